//! The lab: analyses over traces and corpora that answer "what would wirefold save
//! here?", with the same codec crate the server uses (no second copy of codec logic).
//!
//! The CLI runs a [`LabCommand`] as `wirefold lab <command>` through [`run`]; the test
//! and bench tools beside them (`lab link`, `lab series-origin`) are `wirefold-testbed`'s.

mod aid;
mod codecs;
mod corpus;
mod deltas;
mod estimate;
mod plot;
mod progress;
mod report;
mod savings;
mod timing;
pub mod trace;

use std::io;
use std::path::PathBuf;

pub use aid::AidArgs;
pub use codecs::CodecsArgs;
pub use deltas::DeltasArgs;
pub use estimate::EstimateArgs;
pub use savings::SavingsArgs;

/// A lab analysis.
// Declaration order is the order of `wirefold lab --help`, where the CLI (crates/cli/src/lab.rs)
// lists the testbed's `link` after `estimate` and `series-origin` last.
#[derive(Debug, clap::Subcommand)]
pub enum LabCommand {
    /// Compression ratio and speed of every codec and level wirefold uses, per content type.
    Codecs(CodecsArgs),
    /// Bytes and speed of compression, RFC 9842 dictionary codings and VCDIFF on every
    /// consecutive version pair of version corpora, against xdelta3 and zstd --patch-from.
    Deltas(DeltasArgs),
    /// Round trips to each HTML page and its inline resources, without and with automatic
    /// inline download, under TCP slow start (Chandranmenon & Varghese 2001).
    Aid(AidArgs),
    /// The transfer-time estimate (3/2 + log2(ceil(size/mss)+1))·rtt + size/bw, for one
    /// size or for every page of a folder with its inline resources.
    Estimate(EstimateArgs),
    /// Delta-eligible and unchanged responses of HAR, WARC or version-corpus traces, and
    /// the bytes gzip, br, zstd, dcb, dcz and VCDIFF would send (Mogul et al. 1997, section 5).
    Savings(SavingsArgs),
}

/// How a command prints its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns for people.
    #[default]
    Table,
    /// One JSON document (schemas: docs/lab.md, docs/compression.md).
    Json,
    /// Comma-separated values with a header line.
    Csv,
}

/// Why a lab command failed.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("no files to measure in {}", display_paths(.0))]
    NoInput(Vec<PathBuf>),
    #[error("{}: {reason}", path.display())]
    BadInput { path: PathBuf, reason: String },
    #[error("{setting} did not reproduce {} after a round trip", path.display())]
    RoundTrip { setting: String, path: PathBuf },
    #[error("writing the report: {0}")]
    Output(#[from] io::Error),
}

impl From<wirefold_corpus::ReadError> for LabError {
    fn from(e: wirefold_corpus::ReadError) -> Self {
        LabError::Read {
            path: e.path,
            source: e.source,
        }
    }
}

fn display_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs a lab command, printing its report on standard output.
pub fn run(command: LabCommand) -> Result<(), LabError> {
    let stdout = io::stdout();
    run_to(command, &mut stdout.lock())
}

/// Runs a lab command, writing its report to `out`.
pub fn run_to(command: LabCommand, out: &mut dyn io::Write) -> Result<(), LabError> {
    match command {
        LabCommand::Codecs(args) => codecs::run(&args, out),
        LabCommand::Deltas(args) => deltas::run(&args, out),
        LabCommand::Aid(args) => aid::run(&args, out),
        LabCommand::Estimate(args) => estimate::run(&args, out),
        LabCommand::Savings(args) => savings::run(&args, out),
    }
}
