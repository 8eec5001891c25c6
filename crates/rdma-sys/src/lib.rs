//! Raw FFI bindings to rdma-core (libibverbs, librdmacm), generated at build
//! time by bindgen from the installed headers (`wrapper.h`). The static
//! inline functions of verbs.h are reachable through bindgen's generated
//! wrappers under their own names (`ibv_post_send`, `ibv_poll_cq` ...).
//!
//! Nothing here is safe to call without reading rdma-core's man pages; the
//! safe layer is `farflash-rdma`.

#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case)]
#![allow(clippy::all, rustdoc::all)]
#![allow(unsafe_op_in_unsafe_fn)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

#[cfg(test)]
mod tests {
    use super::*;

    /// The library links and answers: the device list is readable (empty on
    /// a machine without RDMA devices) and is freed again.
    #[test]
    fn device_list_links_and_frees() {
        let mut n: i32 = -1;
        // SAFETY: `ibv_get_device_list` writes the count to `n` and returns a
        // NULL-terminated array (or NULL with errno) that we free below.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            // No uverbs ABI in the kernel (no /sys/class/infiniband_verbs):
            // NULL with no device counted, and errno says why.
            assert!(n <= 0, "NULL list but {n} devices");
            assert!(std::io::Error::last_os_error().raw_os_error().is_some());
            return;
        }
        assert!(n >= 0);
        for i in 0..n as usize {
            // SAFETY: `list` holds `n` valid device pointers.
            let dev = unsafe { *list.add(i) };
            assert!(!dev.is_null());
        }
        // SAFETY: the array is NULL-terminated at index n.
        assert!(unsafe { *list.add(n as usize) }.is_null());
        // SAFETY: `list` came from ibv_get_device_list and is freed once.
        unsafe { ibv_free_device_list(list) };
    }

    /// The wrapped static inline functions exist with the verbs.h signatures.
    #[test]
    fn inline_verbs_are_wrapped() {
        let _post_send: unsafe extern "C" fn(
            *mut ibv_qp,
            *mut ibv_send_wr,
            *mut *mut ibv_send_wr,
        ) -> i32 = ibv_post_send;
        let _post_recv: unsafe extern "C" fn(
            *mut ibv_qp,
            *mut ibv_recv_wr,
            *mut *mut ibv_recv_wr,
        ) -> i32 = ibv_post_recv;
        let _poll: unsafe extern "C" fn(*mut ibv_cq, i32, *mut ibv_wc) -> i32 = ibv_poll_cq;
        let _notify: unsafe extern "C" fn(*mut ibv_cq, i32) -> i32 = ibv_req_notify_cq;
        assert_eq!(std::mem::size_of::<ibv_sge>(), 16);
        assert_eq!(IBV_WR_RDMA_READ, 4);
        assert_eq!(IBV_WR_SEND_WITH_INV, 9);
    }
}
