//! From replayed records to a checked [`State`].
//!
//! Opening stops at the first problem ([`crate::PoolError::Corrupt`]);
//! `check` collects them all. Either way nothing here panics on what the
//! disk holds.

use crate::format::{MAX_SIZE, NO_PARENT, ZERO};
use crate::layer::Layer;
use crate::state::{Handle, Replay, State, Vol};
use std::collections::HashMap;
use std::sync::Arc;

/// Longest chain of ancestors a volume may have.
pub(crate) const MAX_DEPTH: usize = 128;

/// Geometry the maps are checked against.
pub(crate) struct Bounds {
    pub(crate) total: u64,
    pub(crate) cluster_size: u64,
    pub(crate) max_volumes: u32,
    pub(crate) slot_blocks: u64,
}

/// Builds the state, appending a sentence per problem to `problems`.
pub(crate) fn build(mut rep: Replay, b: &Bounds, problems: &mut Vec<String>) -> State {
    let mut st = State::new(b.total, b.max_volumes, b.slot_blocks);
    let mut names: HashMap<&str, u32> = HashMap::new();
    let mut vols = std::mem::take(&mut rep.vols);
    vols.retain(|_, v| {
        let ok = v.size > 0 && v.size % 4096 == 0 && v.size <= MAX_SIZE;
        if !ok {
            problems.push(format!(
                "volume {:?} has size {} (not a multiple of 4096 in 4096..=1 PiB)",
                v.name, v.size
            ));
        }
        ok
    });
    rep.vols = vols;
    for v in rep.vols.values() {
        if let Some(other) = names.insert(&v.name, v.id) {
            problems.push(format!(
                "name {:?} used by volume ids {other} and {}",
                v.name, v.id
            ));
        }
        if v.parent != NO_PARENT {
            match rep.vols.get(&v.parent) {
                None => problems.push(format!(
                    "volume {:?} has unknown parent id {}",
                    v.name, v.parent
                )),
                Some(p) if !p.snapshot => problems.push(format!(
                    "volume {:?} has parent {:?}, not a snapshot",
                    v.name, p.name
                )),
                _ => {}
            }
        }
    }
    let mut owner: HashMap<u64, (String, u64)> = HashMap::new();
    let mut layers: HashMap<u32, Arc<Layer>> = HashMap::new();
    let ids: Vec<u32> = rep.vols.keys().copied().collect();
    for id in ids {
        layer_of(id, &rep, b, &mut layers, &mut owner, problems, 0);
    }
    for (id, rec) in rep.vols {
        let Some(layer) = layers.get(&id).cloned() else {
            continue;
        };
        let handle = Handle::new(layer.clone(), rec.size, rec.snapshot);
        st.insert(Vol { rec, layer, handle });
    }
    st
}

/// The layer of volume `id`, built after its parent's (cycles and chains
/// deeper than the volume count are problems; the layer then has no
/// parent).
fn layer_of(
    id: u32,
    rep: &Replay,
    b: &Bounds,
    layers: &mut HashMap<u32, Arc<Layer>>,
    owner: &mut HashMap<u64, (String, u64)>,
    problems: &mut Vec<String>,
    depth: usize,
) -> Option<Arc<Layer>> {
    if let Some(l) = layers.get(&id) {
        return Some(l.clone());
    }
    let v = rep.vols.get(&id)?;
    if depth > rep.vols.len().min(MAX_DEPTH) {
        problems.push(format!(
            "volume {:?} is in a parent cycle or a chain deeper than {MAX_DEPTH}",
            v.name
        ));
        return None;
    }
    let parent = match v.parent {
        NO_PARENT => None,
        p => layer_of(p, rep, b, layers, owner, problems, depth + 1),
    };
    if layers.contains_key(&id) {
        return layers.get(&id).cloned();
    }
    let clusters = v.size.div_ceil(b.cluster_size);
    let layer = Layer::new(id, clusters, parent);
    let empty = Default::default();
    for (&index, &value) in rep.maps.get(&id).unwrap_or(&empty) {
        if index >= clusters {
            problems.push(format!(
                "volume {:?} maps logical cluster {index} beyond its size ({clusters} clusters)",
                v.name
            ));
            continue;
        }
        if value != ZERO {
            let phys = value - 1;
            if phys >= b.total {
                problems.push(format!(
                    "volume {:?} maps physical cluster {phys} beyond the pool ({} clusters)",
                    v.name, b.total
                ));
                continue;
            }
            if let Some((other, oi)) = owner.insert(phys, (v.name.clone(), index)) {
                problems.push(format!(
                    "cluster {phys} mapped twice: by {other:?} (logical {oi}) and {:?} (logical {index})",
                    v.name
                ));
            }
        }
        layer.set(index, value);
    }
    let layer = Arc::new(layer);
    layers.insert(id, layer.clone());
    Some(layer)
}
