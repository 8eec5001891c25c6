//! ControllerPublish/Unpublish: a node's host NQN (its node ID) allowed on
//! the volume's subsystem on every target of the volume, with the keys of
//! the publish secret (DH-HMAC-CHAP, TLS PSK); removed again, keys with it.

use super::export::{absent_ok, exists_ok, Ops};
use super::invalid;
use super::volumes::parse_id;
use crate::caps;
use crate::ids::VolumeId;
use crate::params::{self, Transport};
use crate::proto::ControllerPublishVolumeRequest;
use farflash_mgmt::jsonrpc as rpc;
use serde_json::{json, Value};
use std::collections::HashMap;
use tonic::Status;

/// Whether a node ID is a host NQN (what NodeGetInfo reports).
fn is_host_nqn(s: &str) -> bool {
    s.starts_with("nqn.") && s.len() <= 223 && s.bytes().all(|b| b.is_ascii_graphic())
}

/// Checks the request's fields (InvalidArgument naming the field).
pub fn check_publish(
    r: ControllerPublishVolumeRequest,
) -> Result<ControllerPublishVolumeRequest, Status> {
    if r.volume_id.is_empty() {
        return Err(invalid("volume_id: missing"));
    }
    if r.node_id.is_empty() {
        return Err(invalid("node_id: missing"));
    }
    let c = r
        .volume_capability
        .as_ref()
        .ok_or_else(|| invalid("volume_capability: missing"))?;
    caps::check(c, "volume_capability").map_err(invalid)?;
    Ok(r)
}

/// The hosts allowed on the volume's subsystem (its primary target's).
pub fn published_nodes(ops: &Ops, id: &VolumeId) -> Result<Vec<String>, Status> {
    Ok(ops.allowed_hosts(id.primary(), id)?.unwrap_or_default())
}

pub fn publish(
    ops: &Ops,
    r: ControllerPublishVolumeRequest,
) -> Result<HashMap<String, String>, Status> {
    let id = parse_id(&r.volume_id, "volume")?;
    let vol = ops.volume(&id)?.filter(|v| !v.snapshot);
    vol.ok_or_else(|| Status::not_found(format!("volume {} does not exist", r.volume_id)))?;
    if !is_host_nqn(&r.node_id) || r.node_id.starts_with(super::export::NOBODY) {
        return Err(Status::not_found(format!(
            "node {:?} is not a host NQN (the node service reports its /etc/nvme/hostnqn)",
            r.node_id
        )));
    }
    let cap = r
        .volume_capability
        .as_ref()
        .ok_or_else(|| invalid("volume_capability: missing"))?;
    let ctx = &r.volume_context;
    let transport = match ctx.get("transport").map(String::as_str) {
        Some("tls") => Transport::Tls,
        _ => Transport::Tcp,
    };
    let dhchap = ctx.get("dhchap").is_some_and(|d| d == "true");
    let keys = params::host_keys(dhchap, transport, &r.secrets).map_err(invalid)?;
    let hosts = ops.allowed_hosts(id.primary(), &id)?.ok_or_else(|| {
        Status::not_found(format!("volume {id} has no subsystem on {}", id.primary()))
    })?;
    if caps::single_node(caps::mode(cap)) {
        if let Some(other) = hosts.iter().find(|h| **h != r.node_id) {
            return Err(Status::failed_precondition(format!(
                "volume {id} is published to node {other} already and its access mode allows one node"
            )));
        }
    }
    let keyed = !keys.is_empty();
    // The target's read-only grant (docs/management.md, "Read-only
    // hosts"): the node's controllers see the namespace write protected.
    let read_only = r.readonly || caps::reader_only(caps::mode(cap));
    let mut p = keys;
    p.insert("nqn".into(), json!(id.nqn()));
    p.insert("host".into(), json!(r.node_id));
    p.insert("read_only".into(), json!(read_only));
    for t in id.targets() {
        // EXISTS: host_allow without keys for a host on the list already,
        // with the same grant. A repeated publish to the same node succeeds
        // (CSI spec: ControllerPublishVolume is idempotent). CONFLICT: the
        // node is allowed with the other read_only: the CSI spec's
        // ALREADY_EXISTS ("published but is incompatible").
        match exists_ok(ops.call(t, "host_allow", Value::Object(p.clone()))) {
            Err(e) if e.is(rpc::CONFLICT) => {
                return Err(Status::already_exists(format!(
                    "volume {id} is published to node {} already with readonly = {}: incompatible ({e})",
                    r.node_id, !read_only
                )))
            }
            r => r?,
        }
    }
    tracing::info!(volume = %id, node = %r.node_id, keys = keyed, read_only, "ControllerPublishVolume: node allowed");
    Ok(context(ops, &id, transport))
}

/// What the node needs to connect: the subsystem and every path.
fn context(ops: &Ops, id: &VolumeId, transport: Transport) -> HashMap<String, String> {
    let paths: Vec<String> = id
        .targets()
        .iter()
        .flat_map(|t| {
            ops.config()
                .target(t)
                .map(|e| e.nvme().to_vec())
                .unwrap_or_default()
        })
        .collect();
    HashMap::from([
        ("nqn".to_owned(), id.nqn()),
        ("paths".to_owned(), paths.join(",")),
        ("transport".to_owned(), transport.as_str().to_owned()),
    ])
}

pub fn unpublish(ops: &Ops, raw: &str, node: &str) -> Result<(), Status> {
    let Ok(id) = VolumeId::parse(raw) else {
        // Not ours: it is published nowhere.
        tracing::info!("ControllerUnpublishVolume {raw}: not a farflash volume id; nothing to do");
        return Ok(());
    };
    for t in id.targets() {
        let nodes = match node {
            // No node: from every node.
            "" => ops.allowed_hosts(t, &id)?.unwrap_or_default(),
            n => vec![n.to_owned()],
        };
        for n in nodes {
            // Not allowed there, or no such subsystem: done already.
            absent_ok(ops.call(t, "host_disallow", json!({"nqn": id.nqn(), "host": n})))?;
        }
    }
    tracing::info!(volume = %id, node, "ControllerUnpublishVolume: node removed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_are_host_nqns() {
        assert!(is_host_nqn(
            "nqn.2014-08.org.nvmexpress:uuid:5e2c7a4e-1b0d-4f7a-9b7e-2f1a3c4d5e6f"
        ));
        assert!(!is_host_nqn("some-fake-node-id"));
        assert!(!is_host_nqn("nqn.with space"));
        assert!(!is_host_nqn(&format!("nqn.{}", "x".repeat(220))));
    }
}
