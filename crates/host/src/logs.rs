//! Decoding the log pages the host reads: SMART / Health Information
//! (Base §5.16.1.3).

use farflash_wire::le::u64_at;

/// The SMART counters farflash cares about (128-bit on the wire; the low
/// 64 bits are kept, which no real counter exceeds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SmartLog {
    pub critical_warning: u8,
    /// Composite temperature in kelvins.
    pub temperature: u16,
    /// Thousands of 512-byte units, rounded up.
    pub data_units_read: u64,
    pub data_units_written: u64,
    pub host_read_commands: u64,
    pub host_write_commands: u64,
    pub power_cycles: u64,
    pub power_on_hours: u64,
    pub unsafe_shutdowns: u64,
    pub media_errors: u64,
    pub error_log_entries: u64,
}

pub const SMART_LEN: usize = farflash_wire::log::SMART_LEN;

impl SmartLog {
    /// Decodes a 512-byte page; `None` when `b` is shorter.
    pub fn decode(b: &[u8]) -> Option<SmartLog> {
        if b.len() < SMART_LEN {
            return None;
        }
        Some(SmartLog {
            critical_warning: b[0],
            temperature: u16::from_le_bytes([b[1], b[2]]),
            data_units_read: u64_at(b, 32),
            data_units_written: u64_at(b, 48),
            host_read_commands: u64_at(b, 64),
            host_write_commands: u64_at(b, 80),
            power_cycles: u64_at(b, 112),
            power_on_hours: u64_at(b, 128),
            unsafe_shutdowns: u64_at(b, 144),
            media_errors: u64_at(b, 160),
            error_log_entries: u64_at(b, 176),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use farflash_wire::log::Smart;

    #[test]
    fn decodes_what_wire_encodes() {
        let s = Smart {
            data_units_read: 7,
            data_units_written: 8,
            host_read_commands: 9,
            host_write_commands: 10,
            temperature: 300,
            ..Smart::default()
        };
        let mut b = vec![0u8; SMART_LEN];
        s.encode(&mut b);
        let d = SmartLog::decode(&b).unwrap();
        assert_eq!(
            (
                d.data_units_read,
                d.data_units_written,
                d.host_read_commands,
                d.host_write_commands,
                d.temperature
            ),
            (7, 8, 9, 10, 300)
        );
        assert_eq!(SmartLog::decode(&b[..10]), None);
    }
}
