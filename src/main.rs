//! `farflash`: a user-space NVMe over Fabrics (TCP) target, host and benchmark.

#![deny(clippy::undocumented_unsafe_blocks)]

mod cli;

use clap::{Parser, Subcommand};

/// `farflash --version`: the crate version and the git commit (build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("FARFLASH_GIT_COMMIT"),
    ")"
);

#[derive(Parser, Debug)]
#[command(
    name = "farflash",
    version = VERSION,
    about = "User-space NVMe/TCP target, host and benchmark"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Export namespaces over NVMe/TCP (the target).
    Serve(cli::serve::ServeArgs),
    /// Print a discovery controller's log page (like `nvme discover`).
    Discover(cli::discover::DiscoverArgs),
    /// Print Identify Controller / Namespace of a remote subsystem (like `nvme id-ctrl`).
    Identify(cli::identify::IdentifyArgs),
    /// Measure a local file or a remote namespace (fio-style options).
    Perf(cli::perf::PerfArgs),
    /// Run a local-vs-remote study (plan of perf runs) and write results, plots and a report.
    Sweep(cli::sweep::SweepArgs),
    /// Generate a DH-HMAC-CHAP host key (like `nvme gen-dhchap-key`).
    GenDhchapKey(cli::dhchap::GenArgs),
    /// Check a DH-HMAC-CHAP key (like `nvme check-dhchap-key`).
    CheckDhchapKey(cli::dhchap::CheckArgs),
    /// Generate a TLS PSK in NVMe PSK interchange format (like `nvme gen-tls-key`).
    GenTlsKey(cli::tls::GenArgs),
    /// Check a TLS PSK and print its identity (like `nvme check-tls-key`).
    CheckTlsKey(cli::tls::CheckArgs),
    /// Manage a running target through its management socket.
    Ctl(cli::ctl::CtlArgs),
    /// Send one JSON-RPC method to a running target (raw; see docs/rpc-schema.json).
    Rpc(cli::ctl::RpcArgs),
    /// Check or create a local volume pool offline (docs/volumes.md).
    Pool(cli::pool::PoolArgs),
    /// Write the man pages and shell completions of this CLI (packaging).
    #[command(hide = true)]
    GenPackageFiles(cli::package::GenArgs),
}

/// Whether `e` (or what caused it) is a write into a closed pipe, and the
/// closed pipe is our standard output (not, say, a host's TCP connection).
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    }) && stdout_closed()
}

/// The reader of standard output is gone (a pipe's write end reports
/// POLLERR then).
fn stdout_closed() -> bool {
    let mut p = libc::pollfd {
        fd: 1,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & libc::POLLERR != 0
}

/// Ends the process as one killed by SIGPIPE, like nvme-cli and any C
/// program writing into a closed pipe (`farflash identify ... | head`):
/// no message, status 141 in the shell.
fn die_of_sigpipe() -> ! {
    // SAFETY: resetting SIGPIPE to its default action and raising it has no
    // preconditions; the process ends there.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    std::process::exit(141)
}

/// `println!` into a closed pipe panics; such a panic ends the process
/// quietly instead of printing a backtrace.
fn quiet_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.contains("failed printing to stdout") && msg.contains("Broken pipe") {
            die_of_sigpipe();
        }
        default(info);
    }));
}

fn main() {
    quiet_on_closed_pipe();
    let cli = Cli::parse();
    let result = match cli.command {
        // No subcommand: the main job, a target with the embedded default config.
        None => cli::serve::run(cli::serve::ServeArgs::default()),
        Some(Command::Serve(a)) => cli::serve::run(a),
        Some(Command::Discover(a)) => cli::discover::run(a),
        Some(Command::Identify(a)) => cli::identify::run(a),
        Some(Command::Perf(a)) => cli::perf::run(a),
        Some(Command::Sweep(a)) => cli::sweep::run(a),
        Some(Command::GenDhchapKey(a)) => cli::dhchap::run_gen(a),
        Some(Command::CheckDhchapKey(a)) => cli::dhchap::run_check(a),
        Some(Command::GenTlsKey(a)) => cli::tls::run_gen(a),
        Some(Command::CheckTlsKey(a)) => cli::tls::run_check(a),
        Some(Command::Ctl(a)) => cli::ctl::run(a),
        Some(Command::Rpc(a)) => cli::ctl::run_rpc(a),
        Some(Command::Pool(a)) => cli::pool::run(a),
        Some(Command::GenPackageFiles(a)) => {
            cli::package::run(a, <Cli as clap::CommandFactory>::command())
        }
    };
    if let Err(e) = result {
        if is_broken_pipe(&e) {
            die_of_sigpipe();
        }
        eprintln!("farflash: error: {e:#}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_names_the_commit() {
        let rest = VERSION
            .strip_prefix(concat!(env!("CARGO_PKG_VERSION"), " ("))
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or_else(|| panic!("version {VERSION:?}"));
        // build.rs: `commit <hex>` in a checkout (or from FARFLASH_GIT_COMMIT),
        // `unknown commit` in a copy without .git.
        let ok = rest == "unknown commit"
            || rest
                .strip_prefix("commit ")
                .is_some_and(|c| !c.is_empty() && c.chars().all(|ch| ch.is_ascii_hexdigit()));
        assert!(ok, "version {VERSION:?}");
        let err = Cli::try_parse_from(["farflash", "--version"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::DisplayVersion);
        assert_eq!(err.to_string().trim(), format!("farflash {VERSION}"));
    }
}
