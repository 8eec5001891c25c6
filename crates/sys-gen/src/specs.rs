//! What each `*-sys` crate binds: the functions farflash calls, by library,
//! and the types and constants its callers use beyond those signatures.

use crate::{Library, Spec};

/// crates/rbd-sys: librados and librbd (Ceph 16.2).
pub const RBD: Spec = Spec {
    crate_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/../rbd-sys"),
    headers: &["/usr/include/rados/librados.h", "/usr/include/rbd/librbd.h"],
    dev_packages: "librados-dev librbd-dev",
    libraries: &[
        Library {
            soname: "librados.so.2",
            functions: &[
                "rados_version",
                "rados_create",
                "rados_conf_read_file",
                "rados_conf_set",
                "rados_conf_get",
                "rados_connect",
                "rados_shutdown",
                "rados_ioctx_create",
                "rados_ioctx_destroy",
            ],
        },
        Library {
            soname: "librbd.so.1",
            functions: &[
                "rbd_version",
                "rbd_open",
                "rbd_close",
                "rbd_get_size",
                "rbd_get_features",
                "rbd_flush",
                "rbd_aio_create_completion",
                "rbd_aio_get_return_value",
                "rbd_aio_release",
                "rbd_aio_read",
                "rbd_aio_write",
                "rbd_aio_write_zeroes",
                "rbd_aio_flush",
                "rbd_is_exclusive_lock_owner",
                "rbd_lock_acquire",
                "rbd_lock_release",
                "rbd_lock_break",
                "rbd_lock_get_owners",
                "rbd_lock_get_owners_cleanup",
                "rbd_update_watch",
                "rbd_update_unwatch",
            ],
        },
    ],
    types: &["rados_.*", "rbd_.*"],
    vars: &["RBD_.*", "LIBRADOS_.*", "EVENT_TYPE_.*", "LIBRBD_.*"],
    enums_as_consts: false,
    derive_default: false,
};

/// crates/iscsi-sys: libiscsi 1.19.
pub const ISCSI: Spec = Spec {
    crate_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/../iscsi-sys"),
    headers: &[
        "/usr/include/iscsi/iscsi.h",
        "/usr/include/iscsi/scsi-lowlevel.h",
    ],
    dev_packages: "libiscsi-dev",
    libraries: &[Library {
        soname: "libiscsi.so.7",
        functions: &[
            "iscsi_create_context",
            "iscsi_destroy_context",
            "iscsi_full_connect_sync",
            "iscsi_get_error",
            "iscsi_get_fd",
            "iscsi_logout_sync",
            "iscsi_out_queue_length",
            "iscsi_read16_iov_task",
            "iscsi_readcapacity16_sync",
            "iscsi_service",
            "iscsi_set_header_digest",
            "iscsi_set_noautoreconnect",
            "iscsi_set_session_type",
            "iscsi_set_targetname",
            "iscsi_set_timeout",
            "iscsi_which_events",
            "iscsi_write16_iov_task",
            "scsi_datain_unmarshall",
            "scsi_free_scsi_task",
        ],
    }],
    types: &["iscsi_.*", "scsi_.*"],
    vars: &["SCSI_.*", "ISCSI_.*", "LIBISCSI_.*"],
    enums_as_consts: false,
    derive_default: false,
};

/// crates/rdma-sys: rdma-core's libibverbs and librdmacm. The data path
/// of verbs.h (`ibv_post_send`, `ibv_poll_cq` ...) is `static inline`,
/// calling the provider through `ibv_context::ops`; rdma-sys's lib.rs
/// implements those in Rust, so they are not listed here.
pub const RDMA: Spec = Spec {
    crate_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/../rdma-sys"),
    headers: &[
        "/usr/include/infiniband/verbs.h",
        "/usr/include/rdma/rdma_cma.h",
        "/usr/include/rdma/rdma_verbs.h",
    ],
    dev_packages: "libibverbs-dev librdmacm-dev",
    libraries: &[
        Library {
            soname: "libibverbs.so.1",
            functions: &[
                "ibv_get_device_list",
                "ibv_free_device_list",
                "ibv_query_device",
                "ibv_alloc_pd",
                "ibv_dealloc_pd",
                "ibv_reg_mr",
                "ibv_dereg_mr",
                "ibv_create_comp_channel",
                "ibv_destroy_comp_channel",
                "ibv_create_cq",
                "ibv_destroy_cq",
                "ibv_get_cq_event",
                "ibv_ack_cq_events",
            ],
        },
        Library {
            soname: "librdmacm.so.1",
            functions: &[
                "rdma_create_event_channel",
                "rdma_destroy_event_channel",
                "rdma_create_id",
                "rdma_destroy_id",
                "rdma_bind_addr",
                "rdma_listen",
                "rdma_resolve_addr",
                "rdma_resolve_route",
                "rdma_create_qp",
                "rdma_destroy_qp",
                "rdma_connect",
                "rdma_accept",
                "rdma_reject",
                "rdma_disconnect",
                "rdma_migrate_id",
                "rdma_get_cm_event",
                "rdma_ack_cm_event",
            ],
        },
    ],
    types: &["ibv_.*", "rdma_.*"],
    vars: &["IBV_.*", "RDMA_.*"],
    enums_as_consts: true,
    derive_default: true,
};

/// All three, for the regeneration binary.
pub const ALL: [(&str, &Spec); 3] = [
    ("rbd-sys", &RBD),
    ("iscsi-sys", &ISCSI),
    ("rdma-sys", &RDMA),
];
