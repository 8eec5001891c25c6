//! RDMA CM event channels and their events (librdmacm): a non-blocking
//! channel whose fd an event loop can watch, and events acknowledged when
//! dropped.

use farflash_rdma_sys as sys;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;

/// An `rdma_event_channel` with a non-blocking fd.
pub(crate) struct EventChannel(*mut sys::rdma_event_channel);

impl EventChannel {
    /// Every RDMA listener and host connection starts here, so this is
    /// where libibverbs and librdmacm are opened (once per process); a
    /// machine without them gets an error that names the packages.
    pub fn new() -> io::Result<EventChannel> {
        sys::load().map_err(|e| io::Error::new(io::ErrorKind::NotFound, e))?;
        // SAFETY: no arguments; NULL (with errno) on failure.
        let ch = unsafe { sys::rdma_create_event_channel() };
        if ch.is_null() {
            return Err(io::Error::last_os_error());
        }
        let ch = EventChannel(ch);
        set_nonblocking(ch.fd())?;
        Ok(ch)
    }

    pub fn raw(&self) -> *mut sys::rdma_event_channel {
        self.0
    }

    pub fn fd(&self) -> RawFd {
        // SAFETY: self.0 is a live channel until drop.
        unsafe { (*self.0).fd }
    }

    /// The next event, or None when there is none (EAGAIN).
    pub fn next(&self) -> io::Result<Option<Event>> {
        let mut ev: *mut sys::rdma_cm_event = std::ptr::null_mut();
        // SAFETY: the channel is live; `ev` receives an event we ack on drop.
        let rc = unsafe { sys::rdma_get_cm_event(self.0, &mut ev) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(None),
                io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(Event(ev)))
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: every id on the channel was destroyed before (owners drop
        // their ids first), as rdma_destroy_event_channel requires.
        unsafe { sys::rdma_destroy_event_channel(self.0) };
    }
}

/// One CM event; acknowledged on drop.
pub(crate) struct Event(*mut sys::rdma_cm_event);

impl Event {
    pub fn kind(&self) -> sys::rdma_cm_event_type {
        // SAFETY: live until acked in drop.
        unsafe { (*self.0).event }
    }

    pub fn id(&self) -> *mut sys::rdma_cm_id {
        // SAFETY: as above.
        unsafe { (*self.0).id }
    }

    pub fn status(&self) -> i32 {
        // SAFETY: as above.
        unsafe { (*self.0).status }
    }

    /// The connection parameters of a CONNECT_REQUEST: its private data
    /// (copied into `pd`, returning its length), the initiator depth and the
    /// responder resources, as seen from the passive side (the CM swaps the
    /// requester's values).
    pub fn conn_request(&self, pd: &mut [u8; 256]) -> (usize, u8, u8) {
        // SAFETY: for connection events `param.conn` is the active member;
        // private_data points at private_data_len bytes owned by the event.
        unsafe {
            let c = &(*self.0).param.conn;
            let n = (c.private_data_len as usize).min(pd.len());
            if !c.private_data.is_null() && n > 0 {
                std::ptr::copy_nonoverlapping(c.private_data as *const u8, pd.as_mut_ptr(), n);
            } else {
                return (0, c.initiator_depth, c.responder_resources);
            }
            (n, c.initiator_depth, c.responder_resources)
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: the event came from rdma_get_cm_event and is acked once.
        unsafe { sys::rdma_ack_cm_event(self.0) };
    }
}

pub(crate) fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we own; F_GETFL/F_SETFL take no pointers.
    let rc = unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl < 0 {
            -1
        } else {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK)
        }
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A `sockaddr` from librdmacm as a `SocketAddr` (None for other families).
pub(crate) fn socket_addr(sa: *const sys::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: librdmacm's addresses are sockaddr_storage-sized; the family
    // says which structure it is.
    unsafe {
        match (*(sa as *const libc::sockaddr)).sa_family as i32 {
            libc::AF_INET => {
                let s = &*(sa as *const libc::sockaddr_in);
                let ip = Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
                Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(s.sin_port)))
            }
            libc::AF_INET6 => {
                let s = &*(sa as *const libc::sockaddr_in6);
                let ip = Ipv6Addr::from(s.sin6_addr.s6_addr);
                Some(SocketAddr::new(IpAddr::V6(ip), u16::from_be(s.sin6_port)))
            }
            _ => None,
        }
    }
}

/// `addr` as a `sockaddr_storage` for rdma_bind_addr.
pub(crate) fn to_sockaddr(addr: &SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain data; all zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let s = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = a.port().to_be();
            s.sin_addr.s_addr = u32::from(*a.ip()).to_be();
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for sockaddr_in6.
            let s = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = a.port().to_be();
            s.sin6_addr.s6_addr = a.ip().octets();
            s.sin6_scope_id = a.scope_id();
        }
    }
    ss
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_round_trip() {
        for a in ["10.0.2.15:4420", "[::1]:4421"] {
            let sa: SocketAddr = a.parse().unwrap();
            let ss = to_sockaddr(&sa);
            assert_eq!(
                socket_addr(&ss as *const _ as *const sys::sockaddr),
                Some(sa)
            );
        }
        assert_eq!(socket_addr(std::ptr::null()), None);
    }
}
