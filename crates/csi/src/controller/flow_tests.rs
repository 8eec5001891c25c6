//! The controller's flows end to end against model targets (model.rs)
//! over real mutual TLS: create, idempotency, publication to one node,
//! snapshots, clones, expansion, QoS, listing, deletion; errors a
//! Kubernetes operator reads. The same flows against real targets are
//! csi-sanity's (tests/csi-sanity.sh) once the targets have volumes.

use super::model::ModelTarget;
use super::ControllerService;
use crate::config::ControllerConfig;
use crate::proto::controller_server::Controller;
use crate::proto::volume_capability::{access_mode::Mode, AccessMode, AccessType, MountVolume};
use crate::proto::*;
use crate::target::Targets;
use std::collections::HashMap;
use std::sync::Arc;
use tonic::{Code, Request};

const NODE_A: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001";
const NODE_B: &str = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-4000-8000-000000000002";
const GIB: i64 = 1 << 30;

fn service(t: &ModelTarget) -> ControllerService {
    let c = ControllerConfig::from_toml(&t.config("target-a", "127.0.0.1:4420"), "test").unwrap();
    let targets = Targets::new(&c).unwrap();
    ControllerService::new(Arc::new(c), targets)
}

fn cap(mode: Mode) -> VolumeCapability {
    VolumeCapability {
        access_mode: Some(AccessMode { mode: mode as i32 }),
        access_type: Some(AccessType::Mount(MountVolume {
            fs_type: "ext4".into(),
            ..Default::default()
        })),
    }
}

fn params(kv: &[(&str, &str)]) -> HashMap<String, String> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn create_req(name: &str, size: i64) -> CreateVolumeRequest {
    CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(CapacityRange {
            required_bytes: size,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![cap(Mode::SingleNodeWriter)],
        parameters: params(&[
            ("targets", "target-a"),
            ("pool", "fast"),
            ("qos.rw_ios_per_sec", "5000"),
        ]),
        ..Default::default()
    }
}

async fn create(s: &ControllerService, r: CreateVolumeRequest) -> Result<Volume, tonic::Status> {
    Ok(s.create_volume(Request::new(r))
        .await?
        .into_inner()
        .volume
        .unwrap())
}

async fn publish(
    s: &ControllerService,
    vol: &str,
    node: &str,
) -> Result<HashMap<String, String>, tonic::Status> {
    let r = ControllerPublishVolumeRequest {
        volume_id: vol.into(),
        node_id: node.into(),
        volume_capability: Some(cap(Mode::SingleNodeWriter)),
        ..Default::default()
    };
    Ok(s.controller_publish_volume(Request::new(r))
        .await?
        .into_inner()
        .publish_context)
}

async fn unpublish(s: &ControllerService, vol: &str, node: &str) {
    let r = ControllerUnpublishVolumeRequest {
        volume_id: vol.into(),
        node_id: node.into(),
        secrets: HashMap::new(),
    };
    s.controller_unpublish_volume(Request::new(r))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_lives_and_leaves_nothing_behind() {
    let t = ModelTarget::start("life", &[("fast", 100 * GIB as u64)]);
    let s = service(&t);
    let name = "pvc-5e2c7a4e-1b0d-4f7a-9b7e-2f1a3c4d5e6f";
    let v = create(&s, create_req(name, GIB)).await.unwrap();
    assert_eq!(v.volume_id, format!("target-a/fast/{name}"));
    assert_eq!(v.capacity_bytes, GIB);
    assert_eq!(
        v.volume_context["nqn"],
        format!("nqn.2026-11.io.farflash.csi:fast:{name}")
    );
    // Idempotent; another size under the same name is refused.
    assert_eq!(
        create(&s, create_req(name, GIB)).await.unwrap().volume_id,
        v.volume_id
    );
    let e = create(&s, create_req(name, 2 * GIB)).await.unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    {
        let m = t.model.lock().unwrap();
        let sub = &m.subsystems[&v.volume_context["nqn"]];
        // Exported with nobody allowed but the placeholder, QoS set.
        assert_eq!(sub.hosts.len(), 1);
        assert!(sub.hosts[0].0.starts_with(super::export::NOBODY));
        assert_eq!(m.qos[&v.volume_context["nqn"]]["rw_ios_per_sec"], 5000);
    }

    // One node at a time for a single-node volume.
    let ctx = publish(&s, &v.volume_id, NODE_A).await.unwrap();
    assert_eq!(ctx["paths"], "127.0.0.1:4420");
    assert_eq!(ctx["transport"], "tcp");
    publish(&s, &v.volume_id, NODE_A).await.unwrap();
    let e = publish(&s, &v.volume_id, NODE_B).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().contains(NODE_A), "{}", e.message());
    let got = s
        .controller_get_volume(Request::new(ControllerGetVolumeRequest {
            volume_id: v.volume_id.clone(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.status.unwrap().published_node_ids, [NODE_A]);
    // The same node with another readonly: incompatible, ALREADY_EXISTS
    // (the target's CONFLICT); the grant stays as it was.
    let ro = ControllerPublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        node_id: NODE_A.into(),
        volume_capability: Some(cap(Mode::SingleNodeWriter)),
        readonly: true,
        ..Default::default()
    };
    let e = s
        .controller_publish_volume(Request::new(ro.clone()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    assert!(e.message().contains("read_only"), "{}", e.message());
    assert!(t.model.lock().unwrap().subsystems[&v.volume_context["nqn"]]
        .read_only
        .is_empty());
    unpublish(&s, &v.volume_id, NODE_A).await;
    unpublish(&s, &v.volume_id, NODE_A).await;
    // Published read-only: the target holds the grant, a repeat is fine.
    for _ in 0..2 {
        s.controller_publish_volume(Request::new(ro.clone()))
            .await
            .unwrap();
    }
    assert_eq!(
        t.model.lock().unwrap().subsystems[&v.volume_context["nqn"]].read_only,
        [NODE_A]
    );
    unpublish(&s, &v.volume_id, NODE_A).await;
    publish(&s, &v.volume_id, NODE_B).await.unwrap();
    unpublish(&s, &v.volume_id, "").await;

    // Expand, then delete twice.
    let r = ControllerExpandVolumeRequest {
        volume_id: v.volume_id.clone(),
        capacity_range: Some(CapacityRange {
            required_bytes: 3 * GIB,
            limit_bytes: 0,
        }),
        volume_capability: Some(cap(Mode::SingleNodeWriter)),
        ..Default::default()
    };
    let a = s
        .controller_expand_volume(Request::new(r))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (a.capacity_bytes, a.node_expansion_required),
        (3 * GIB, true)
    );
    for _ in 0..2 {
        let r = DeleteVolumeRequest {
            volume_id: v.volume_id.clone(),
            secrets: HashMap::new(),
        };
        s.delete_volume(Request::new(r)).await.unwrap();
    }
    let m = t.model.lock().unwrap();
    assert!(
        m.volumes.is_empty() && m.subsystems.is_empty() && m.qos.is_empty(),
        "{m:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_and_clones() {
    let t = ModelTarget::start("snap", &[("fast", 100 * GIB as u64)]);
    let s = service(&t);
    let src = create(&s, create_req("pvc-src", GIB)).await.unwrap();
    let snap = |name: &str, vol: &str| CreateSnapshotRequest {
        source_volume_id: vol.into(),
        name: name.into(),
        ..Default::default()
    };
    let a = s
        .create_snapshot(Request::new(snap("snapshot-1", &src.volume_id)))
        .await
        .unwrap()
        .into_inner()
        .snapshot
        .unwrap();
    assert_eq!(a.source_volume_id, src.volume_id);
    assert!(a.ready_to_use && a.size_bytes == GIB && a.snapshot_id.contains("/pvc-src@s-"));
    let again = s
        .create_snapshot(Request::new(snap("snapshot-1", &src.volume_id)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.snapshot.unwrap().snapshot_id, a.snapshot_id);
    let other = create(&s, create_req("pvc-other", GIB)).await.unwrap();
    let e = s
        .create_snapshot(Request::new(snap("snapshot-1", &other.volume_id)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");

    // A clone of the snapshot, larger; a clone of the volume (its
    // temporary snapshot removed).
    let mut r = create_req("pvc-from-snap", 2 * GIB);
    r.volume_content_source = Some(VolumeContentSource {
        r#type: Some(volume_content_source::Type::Snapshot(
            volume_content_source::SnapshotSource {
                snapshot_id: a.snapshot_id.clone(),
            },
        )),
    });
    assert_eq!(create(&s, r).await.unwrap().capacity_bytes, 2 * GIB);
    let mut r = create_req("pvc-from-vol", GIB);
    r.volume_content_source = Some(VolumeContentSource {
        r#type: Some(volume_content_source::Type::Volume(
            volume_content_source::VolumeSource {
                volume_id: src.volume_id.clone(),
            },
        )),
    });
    create(&s, r).await.unwrap();
    let snaps = s
        .list_snapshots(Request::new(ListSnapshotsRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        snaps.entries.len(),
        1,
        "the clone's temporary snapshot is gone"
    );
    let by_src = ListSnapshotsRequest {
        source_volume_id: other.volume_id.clone(),
        ..Default::default()
    };
    assert!(s
        .list_snapshots(Request::new(by_src))
        .await
        .unwrap()
        .into_inner()
        .entries
        .is_empty());

    // Listing pages through every volume once.
    let mut seen = vec![];
    let mut token = String::new();
    loop {
        let r = ListVolumesRequest {
            max_entries: 2,
            starting_token: token,
        };
        let page = s.list_volumes(Request::new(r)).await.unwrap().into_inner();
        seen.extend(
            page.entries
                .into_iter()
                .map(|e| e.volume.unwrap().volume_id),
        );
        if page.next_token.is_empty() {
            break;
        }
        token = page.next_token;
    }
    seen.sort();
    assert_eq!(seen.len(), 4, "{seen:?}");
    // The snapshot's clone holds it: the snapshot stays until the clone goes.
    s.delete_volume(Request::new(DeleteVolumeRequest {
        volume_id: "target-a/fast/pvc-from-snap".into(),
        secrets: HashMap::new(),
    }))
    .await
    .unwrap();
    s.delete_snapshot(Request::new(DeleteSnapshotRequest {
        snapshot_id: a.snapshot_id.clone(),
        secrets: HashMap::new(),
    }))
    .await
    .unwrap();
    let got = s
        .get_snapshot(Request::new(GetSnapshotRequest {
            snapshot_id: a.snapshot_id.clone(),
            secrets: HashMap::new(),
        }))
        .await;
    assert_eq!(got.unwrap_err().code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_what_is_wrong() {
    let t = ModelTarget::start("errors", &[("fast", 4 * GIB as u64)]);
    let s = service(&t);
    let mut r = create_req("pvc-1", GIB);
    r.parameters.insert("pool".into(), "nosuch".into());
    let e = create(&s, r).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(
        e.message().contains("target target-a") && e.message().contains("nosuch"),
        "{}",
        e.message()
    );
    let e = create(&s, create_req("pvc-big", 8 * GIB))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    let mut r = create_req("pvc-1", GIB);
    r.parameters
        .insert("transport".into(), "carrier-pigeon".into());
    let e = create(&s, r).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().contains("parameter transport"),
        "{}",
        e.message()
    );
    let mut r = create_req("pvc-1", GIB);
    r.mutable_parameters = params(&[("qos.nonsense", "1")]);
    assert_eq!(
        create(&s, r).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    // Publishing to something that is not a node.
    let v = create(&s, create_req("pvc-1", GIB)).await.unwrap();
    assert_eq!(
        publish(&s, &v.volume_id, "some-fake-node-id")
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    assert_eq!(
        publish(&s, "target-a/fast/pvc-none", NODE_A)
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    // A DH-HMAC-CHAP volume without its secret.
    let mut r = ControllerPublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        node_id: NODE_A.into(),
        volume_capability: Some(cap(Mode::SingleNodeWriter)),
        ..Default::default()
    };
    r.volume_context.insert("dhchap".into(), "true".into());
    let e = s
        .controller_publish_volume(Request::new(r))
        .await
        .unwrap_err();
    assert!(
        e.code() == Code::InvalidArgument && e.message().contains("dhchapKey"),
        "{e:?}"
    );
    // QoS changes through a VolumeAttributesClass; other keys are refused.
    let r = ControllerModifyVolumeRequest {
        volume_id: v.volume_id.clone(),
        mutable_parameters: params(&[("qos.r_bytes_per_sec", "200M")]),
        ..Default::default()
    };
    s.controller_modify_volume(Request::new(r)).await.unwrap();
    assert_eq!(
        t.model.lock().unwrap().qos[&v.volume_context["nqn"]]["r_bytes_per_sec"],
        200 << 20
    );
    // A target that does not answer is named.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let c = ControllerConfig::from_toml(
        &t.config("target-a", "127.0.0.1:4420")
            .replace(&t.addr, &dead),
        "t",
    )
    .unwrap();
    let down = ControllerService::new(Arc::new(c.clone()), Targets::new(&c).unwrap());
    let e = create(&down, create_req("pvc-2", GIB)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    assert!(
        e.message().contains("target target-a") && e.message().contains(&dead),
        "{}",
        e.message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_on_two_targets_is_exported_by_both() {
    // A pool both targets reach (rbd): the same volume seen by each.
    let a = ModelTarget::start("pair", &[("shared", 100 * GIB as u64)]);
    let (b_model, b_addr) = a.sibling(&[("shared", 100 * GIB as u64)]);
    let text = format!(
        "{}[[target]]\nname = \"target-b\"\nmanagement = {b_addr:?}\nnvme = [\"127.0.0.2:4420\"]\n",
        a.config("target-a", "127.0.0.1:4420")
    );
    let c = ControllerConfig::from_toml(&text, "t").unwrap();
    let s = ControllerService::new(Arc::new(c.clone()), Targets::new(&c).unwrap());
    let mut r = create_req("pvc-ha", GIB);
    r.parameters
        .insert("targets".into(), "target-a,target-b".into());
    r.parameters.insert("pool".into(), "shared".into());
    // Until the second target sees the volume (a shared pool), it cannot
    // export it: the error names it.
    let e = create(&s, r.clone()).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(
        e.message()
            .contains("target target-b: pool shared does not hold volume pvc-ha"),
        "{}",
        e.message()
    );
    let uuid = a.model.lock().unwrap().volumes[&("shared".to_owned(), "pvc-ha".to_owned())].clone();
    b_model.lock().unwrap().volumes.insert(
        ("shared".into(), "pvc-ha".into()),
        super::model::ModelVolume {
            exported: false,
            ..uuid
        },
    );
    let v = create(&s, r).await.unwrap();
    assert_eq!(v.volume_id, "target-a,target-b/shared/pvc-ha");
    let nqn = &v.volume_context["nqn"];
    let (sa, sb) = (
        a.model.lock().unwrap().subsystems[nqn].clone(),
        b_model.lock().unwrap().subsystems[nqn].clone(),
    );
    assert_eq!(
        (sa.cntlid, sb.cntlid),
        ((1, 1000), (1001, 2000)),
        "disjoint CNTLID ranges"
    );
    assert_eq!(sa.serial, sb.serial);
    assert!(
        a.model.lock().unwrap().ana.is_empty(),
        "the first target stays optimized"
    );
    let ana = b_model.lock().unwrap().ana.clone();
    assert_eq!(ana.len(), 1);
    assert_eq!(
        (ana[0]["listen"].as_str(), ana[0]["state"].as_str()),
        (Some("127.0.0.2:4420"), Some("non-optimized"))
    );
    // Published on both; the node gets both paths.
    let ctx = publish(&s, &v.volume_id, NODE_A).await.unwrap();
    assert_eq!(ctx["paths"], "127.0.0.1:4420,127.0.0.2:4420");
    for m in [&a.model, &b_model] {
        assert!(m.lock().unwrap().subsystems[nqn]
            .hosts
            .iter()
            .any(|(h, _)| h == NODE_A));
    }
    unpublish(&s, &v.volume_id, NODE_A).await;
    s.delete_volume(Request::new(DeleteVolumeRequest {
        volume_id: v.volume_id.clone(),
        secrets: HashMap::new(),
    }))
    .await
    .unwrap();
    assert!(
        a.model.lock().unwrap().subsystems.is_empty()
            && b_model.lock().unwrap().subsystems.is_empty()
    );
}
