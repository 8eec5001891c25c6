//! Command opcodes (Base §5 admin, NVM Command Set §3 I/O, Fabrics §6).

/// Admin command opcodes (Base Figure "Opcodes for Admin Commands").
pub mod admin {
    pub const DELETE_IO_SQ: u8 = 0x00;
    pub const CREATE_IO_SQ: u8 = 0x01;
    pub const GET_LOG_PAGE: u8 = 0x02;
    pub const DELETE_IO_CQ: u8 = 0x04;
    pub const CREATE_IO_CQ: u8 = 0x05;
    pub const IDENTIFY: u8 = 0x06;
    pub const ABORT: u8 = 0x08;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0A;
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    pub const KEEP_ALIVE: u8 = 0x18;
    /// Fabrics commands share opcode 7Fh, with FCTYPE selecting the command.
    pub const FABRICS: u8 = 0x7F;
}

/// NVM command set I/O opcodes.
pub mod io {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_UNCORRECTABLE: u8 = 0x04;
    pub const COMPARE: u8 = 0x05;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DATASET_MANAGEMENT: u8 = 0x09;
    /// Verify (NVM Command Set §3.2.8): read and check, no data moved.
    pub const VERIFY: u8 = 0x0C;
    /// Copy (NVM Command Set §3.2.2): source ranges to one destination.
    pub const COPY: u8 = 0x19;
    /// Reservations (NVM Command Set §3.2, Base §7.2-7.5): Register, Report, Acquire, Release.
    pub const RESERVATION_REGISTER: u8 = 0x0D;
    pub const RESERVATION_REPORT: u8 = 0x0E;
    pub const RESERVATION_ACQUIRE: u8 = 0x11;
    pub const RESERVATION_RELEASE: u8 = 0x15;
}

/// Fabrics command types (FCTYPE, Fabrics §6).
pub mod fctype {
    pub const PROPERTY_SET: u8 = 0x00;
    pub const CONNECT: u8 = 0x01;
    pub const PROPERTY_GET: u8 = 0x04;
    pub const AUTH_SEND: u8 = 0x05;
    pub const AUTH_RECEIVE: u8 = 0x06;
    pub const DISCONNECT: u8 = 0x08;
}

/// Feature identifiers (Base §5.27.1).
pub mod feature {
    pub const ARBITRATION: u8 = 0x01;
    pub const POWER_MANAGEMENT: u8 = 0x02;
    pub const TEMPERATURE_THRESHOLD: u8 = 0x04;
    pub const ERROR_RECOVERY: u8 = 0x05;
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    pub const INTERRUPT_COALESCING: u8 = 0x08;
    pub const INTERRUPT_VECTOR_CONFIG: u8 = 0x09;
    pub const WRITE_ATOMICITY: u8 = 0x0A;
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0B;
    pub const TIMESTAMP: u8 = 0x0E;
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
    pub const HOST_BEHAVIOR: u8 = 0x16;
    /// Host Identifier (Base §5.27): set by Connect on Fabrics.
    pub const HOST_IDENTIFIER: u8 = 0x81;
    /// Reservation Notification Mask and Reservation Persistence (NVM
    /// Command Set §4.1.3).
    pub const RESERVATION_NOTIFICATION_MASK: u8 = 0x82;
    pub const RESERVATION_PERSISTENCE: u8 = 0x83;
}

/// Log page identifiers (Base §5.16.1).
pub mod log_id {
    pub const ERROR: u8 = 0x01;
    pub const SMART: u8 = 0x02;
    pub const FIRMWARE_SLOT: u8 = 0x03;
    pub const CHANGED_NS_LIST: u8 = 0x04;
    pub const COMMANDS_SUPPORTED: u8 = 0x05;
    /// Asymmetric Namespace Access (Base §5.16.1.12).
    pub const ANA: u8 = 0x0C;
    /// Reservation Notification (Base §5.16.1.25).
    pub const RESERVATION_NOTIFICATION: u8 = 0x80;
    pub const DISCOVERY: u8 = 0x70;
}

/// Identify CNS values (Base §5.17.1).
pub mod cns {
    pub const NAMESPACE: u8 = 0x00;
    pub const CONTROLLER: u8 = 0x01;
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    pub const NS_ID_DESCRIPTORS: u8 = 0x03;
    pub const CSI_NAMESPACE: u8 = 0x05;
    pub const CSI_CONTROLLER: u8 = 0x06;
    pub const CSI_ACTIVE_NS_LIST: u8 = 0x07;
    pub const CS_INDEPENDENT_NAMESPACE: u8 = 0x08;
}
