//! `farflash`: a user-space NVMe over Fabrics (TCP) target, host and benchmark.

mod cli;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "farflash",
    version,
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
}

fn main() {
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
    };
    if let Err(e) = result {
        eprintln!("farflash: error: {e:#}");
        std::process::exit(1);
    }
}
