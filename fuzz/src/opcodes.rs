//! Every opcode the target knows (and a few it must refuse), so harnesses
//! can steer a fuzz byte onto a real command instead of hoping for it.

use farflash_wire::opcode::{admin, fctype, io};

pub const ADMIN: [u8; 13] = [
    admin::DELETE_IO_SQ,
    admin::CREATE_IO_SQ,
    admin::GET_LOG_PAGE,
    admin::DELETE_IO_CQ,
    admin::CREATE_IO_CQ,
    admin::IDENTIFY,
    admin::ABORT,
    admin::SET_FEATURES,
    admin::GET_FEATURES,
    admin::ASYNC_EVENT_REQUEST,
    admin::KEEP_ALIVE,
    admin::FABRICS,
    0x80, // Format NVM: not supported
];

pub const IO: [u8; 14] = [
    io::FLUSH,
    io::WRITE,
    io::READ,
    io::WRITE_UNCORRECTABLE,
    io::COMPARE,
    io::WRITE_ZEROES,
    io::DATASET_MANAGEMENT,
    io::VERIFY,
    io::COPY,
    io::RESERVATION_REGISTER,
    io::RESERVATION_REPORT,
    io::RESERVATION_ACQUIRE,
    io::RESERVATION_RELEASE,
    admin::FABRICS,
];

pub const FCTYPES: [u8; 7] = [
    fctype::PROPERTY_SET,
    fctype::CONNECT,
    fctype::PROPERTY_GET,
    fctype::AUTH_SEND,
    fctype::AUTH_RECEIVE,
    fctype::DISCONNECT,
    0x7F,
];

/// Picks an opcode by `sel` from the admin or I/O set.
pub fn pick(sel: u8, io_queue: bool) -> u8 {
    if io_queue {
        IO[sel as usize % IO.len()]
    } else {
        ADMIN[sel as usize % ADMIN.len()]
    }
}

pub fn pick_fctype(sel: u8) -> u8 {
    FCTYPES[sel as usize % FCTYPES.len()]
}
