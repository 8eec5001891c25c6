//! systemd's readiness protocol (`Type=notify`): `READY=1`, `RELOADING=1`
//! on `$NOTIFY_SOCKET`, when it is set.

/// Sends `msg` to systemd; nothing when not started by it.
pub fn notify(msg: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    let r = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| sock.send_to_addr(msg.as_bytes(), &a))
    } else {
        sock.send_to(msg.as_bytes(), &path)
    };
    if let Err(e) = r {
        tracing::warn!("sd_notify {msg}: {e}");
    }
}
