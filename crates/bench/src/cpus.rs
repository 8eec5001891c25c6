//! `--cpus-allowed`: a CPU list such as `1`, `0-1`, `0,2-3`, and pinning
//! the calling thread to it (sched_setaffinity).

use anyhow::{bail, Context};

pub fn parse_cpu_list(s: &str) -> anyhow::Result<Vec<usize>> {
    let mut v = vec![];
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let a: usize = a
            .parse()
            .with_context(|| format!("bad CPU {a:?} in {s:?}"))?;
        let b: usize = b
            .parse()
            .with_context(|| format!("bad CPU {b:?} in {s:?}"))?;
        if b < a || b >= libc::CPU_SETSIZE as usize {
            bail!("bad CPU range {part:?}");
        }
        v.extend(a..=b);
    }
    if v.is_empty() {
        bail!("empty CPU list {s:?}");
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// Restricts the calling thread to `cpus`.
pub fn pin_current_thread(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; all-zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c < libc::CPU_SETSIZE as usize {
            // SAFETY: `c` is below CPU_SETSIZE, the bound CPU_SET requires.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 = this thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(parse_cpu_list("1").unwrap(), vec![1]);
        assert_eq!(parse_cpu_list("0-1").unwrap(), vec![0, 1]);
        assert_eq!(parse_cpu_list("3,0-1,1").unwrap(), vec![0, 1, 3]);
        assert!(parse_cpu_list("2-1").is_err());
        assert!(parse_cpu_list("x").is_err());
        assert!(pin_current_thread(&[0]).is_ok());
    }
}
