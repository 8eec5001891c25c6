//! The configuration as `save_config` and `--autosave` save it: its TOML
//! text, and an atomic, durable, private write of a file.

use farflash_control::reload;

/// The running configuration and its TOML, as `save_config` writes it
/// (`--autosave` too).
pub(crate) fn config_text(
    target: &farflash_core::Target,
) -> Result<(farflash_core::config::Config, String), String> {
    let cfg = {
        let _serial = target.manage_lock();
        reload::current_config(target)
    };
    let text = toml::to_string_pretty(&cfg).map_err(|e| format!("cannot write TOML: {e}"))?;
    let text = format!(
        "# farflash configuration saved by save_config; farflash serve --config FILE\n{text}"
    );
    Ok((cfg, text))
}

/// Writes `data` to `path` through a temporary file, its fsync, a rename and
/// the directory's fsync (a crash leaves the old file or the new one), mode
/// 0600 (a configuration may name hosts and, with authentication, hold keys).
pub(crate) fn write_private(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("not a file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    let r = f.write_all(data).and_then(|_| f.sync_all());
    if let Err(e) = r.and_then(|_| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    // The rename is durable once the directory is.
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}
