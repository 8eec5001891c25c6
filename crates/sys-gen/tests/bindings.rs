//! The committed bindings of the four `*-sys` crates against the installed
//! headers: regenerated into memory and compared line by line. Without the
//! headers or libclang each test prints why it cannot check and passes,
//! unless FARFLASH_REQUIRE_BINDINGS_CHECK=1 (tests/run.sh sets it).

use farflash_sys_gen::{check, specs};

#[test]
fn rbd_sys_matches_the_installed_headers() {
    check(&specs::RBD);
}

#[test]
fn iscsi_sys_matches_the_installed_headers() {
    check(&specs::ISCSI);
}

#[test]
fn rdma_sys_matches_the_installed_headers() {
    check(&specs::RDMA);
}

#[test]
fn ssl_sys_matches_the_installed_headers() {
    check(&specs::SSL);
}
