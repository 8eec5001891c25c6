//! farflash's CSI driver (Container Storage Interface v1.12,
//! docs/kubernetes.md): the Identity and Controller services over gRPC on
//! a Unix socket, provisioning volumes on farflash targets through their
//! mutual-TLS management endpoints (docs/management.md).

#![forbid(unsafe_code)]

pub mod caps;
pub mod config;
pub mod controller;
pub mod identity;
pub mod ids;
pub mod node;
pub mod params;
pub mod serve;
pub mod target;

/// The CSI spec's messages and services, generated from its csi.proto
/// (v1.12.0, proto/) at build time.
pub mod proto {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("csi.v1");
}
