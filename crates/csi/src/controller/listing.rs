//! Listing: volumes and snapshots of every target, one page at a time,
//! and the pools' free space.

use super::export::{absent_ok, Ops, Vol};
use super::invalid;
use crate::caps;
use crate::ids::VolumeId;
use crate::params;
use crate::proto::*;
use serde_json::json;
use std::collections::BTreeMap;
use tonic::Status;

/// Every volume (`snapshots`: or every snapshot) of every target, by id:
/// a volume found on several targets is one id naming them all.
pub fn all(ops: &Ops, snapshots: bool) -> Result<BTreeMap<String, Vol>, Status> {
    let mut by_uuid: BTreeMap<(String, String, String), (Vec<String>, Vol)> = BTreeMap::new();
    for t in ops.config().targets() {
        for v in ops.list(t.name())? {
            if v.snapshot != snapshots {
                continue;
            }
            let key = (v.pool.clone(), v.name.clone(), v.uuid.clone());
            by_uuid
                .entry(key)
                .or_insert_with(|| (vec![], v))
                .0
                .push(t.name().to_owned());
        }
    }
    Ok(by_uuid
        .into_values()
        .map(|(targets, v)| (VolumeId::new(targets, &v.pool, &v.name).to_string(), v))
        .collect())
}

/// A page request's fields, before any target is asked.
pub fn check_page(max_entries: i32, token: &str) -> Result<(), Status> {
    if max_entries < 0 {
        return Err(invalid("max_entries: negative"));
    }
    if !token.is_empty() && token.parse::<usize>().is_err() {
        return Err(Status::aborted(format!(
            "starting_token {token:?}: not one this driver gave"
        )));
    }
    Ok(())
}

/// One page of `items`: (page, next token); errors as the spec asks.
pub fn page<T>(items: Vec<T>, max_entries: i32, token: &str) -> Result<(Vec<T>, String), Status> {
    check_page(max_entries, token)?;
    let max = usize::try_from(max_entries).map_err(|_| invalid("max_entries: negative"))?;
    let start = match token {
        "" => 0,
        t => t
            .parse::<usize>()
            .ok()
            .filter(|&s| s <= items.len())
            .ok_or_else(|| {
                Status::aborted(format!("starting_token {t:?}: not one this driver gave"))
            })?,
    };
    let end = if max == 0 {
        items.len()
    } else {
        (start + max).min(items.len())
    };
    let next = if end < items.len() {
        end.to_string()
    } else {
        String::new()
    };
    Ok((
        items.into_iter().skip(start).take(end - start).collect(),
        next,
    ))
}

pub fn list(ops: &Ops, r: ListVolumesRequest) -> Result<ListVolumesResponse, Status> {
    check_page(r.max_entries, &r.starting_token)?;
    let all = all(ops, false)?;
    let (items, next_token) = page(all.into_iter().collect(), r.max_entries, &r.starting_token)?;
    let entries = items
        .into_iter()
        .map(|(id, v)| list_volumes_response::Entry {
            volume: Some(Volume {
                capacity_bytes: v.size as i64,
                volume_id: id,
                ..Default::default()
            }),
            status: None,
        })
        .collect();
    Ok(ListVolumesResponse {
        entries,
        next_token,
    })
}

pub fn capacity(ops: &Ops, r: GetCapacityRequest) -> Result<GetCapacityResponse, Status> {
    for (i, c) in r.volume_capabilities.iter().enumerate() {
        caps::check(c, &format!("volume_capabilities[{i}]")).map_err(invalid)?;
    }
    let free_of = |t: &str, pool: Option<&str>| -> Result<u64, Status> {
        let pools = ops.call(
            t,
            "pool_list",
            pool.map_or(json!({}), |p| json!({"name": p})),
        );
        let pools = match absent_ok(pools)? {
            Some(p) => p,
            None => return Ok(0),
        };
        Ok(pools
            .as_array()
            .map_or(0, |a| a.iter().filter_map(|p| p["free"].as_u64()).sum()))
    };
    let mut free = 0u64;
    if r.parameters.is_empty() {
        for t in ops.config().targets() {
            free = free.saturating_add(free_of(t.name(), None)?);
        }
    } else {
        let p = params::parse(&r.parameters, ops.config()).map_err(invalid)?;
        free = free_of(&p.targets()[0], Some(p.pool()))?;
    }
    Ok(GetCapacityResponse {
        available_capacity: i64::try_from(free).unwrap_or(i64::MAX),
        maximum_volume_size: None,
        minimum_volume_size: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cover_everything_once() {
        let items: Vec<u32> = (0..7).collect();
        let (p1, t1) = page(items.clone(), 3, "").unwrap();
        let (p2, t2) = page(items.clone(), 3, &t1).unwrap();
        let (p3, t3) = page(items.clone(), 3, &t2).unwrap();
        assert_eq!([p1, p2, p3].concat(), items);
        assert_eq!(t3, "");
        assert_eq!(
            page(items.clone(), 0, "").unwrap(),
            (items.clone(), String::new())
        );
        assert_eq!(
            page(items.clone(), -1, "").unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            page(items.clone(), 2, "x").unwrap_err().code(),
            tonic::Code::Aborted
        );
        assert_eq!(
            page(items, 2, "8").unwrap_err().code(),
            tonic::Code::Aborted
        );
    }
}
