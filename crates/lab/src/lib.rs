//! The lab: analyses over traces and corpora that answer "what would wirefold save
//! here?", with the same codec crate the server uses (no second copy of codec logic).
//!
//! The CLI runs a [`LabCommand`] as `wirefold lab <command>` through [`run`].

mod codecs;
mod corpus;
mod report;

use std::io;
use std::path::PathBuf;

pub use codecs::CodecsArgs;

/// A lab analysis.
#[derive(Debug, clap::Subcommand)]
pub enum LabCommand {
    /// Compression ratio and speed of every codec and level wirefold uses, per content type.
    Codecs(CodecsArgs),
}

/// How a command prints its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns for people.
    #[default]
    Table,
    /// One JSON document (schema in docs/compression.md).
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
    #[error("{setting} did not reproduce {} after a round trip", path.display())]
    RoundTrip { setting: String, path: PathBuf },
    #[error("writing the report: {0}")]
    Output(#[from] io::Error),
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
    match command {
        LabCommand::Codecs(args) => codecs::run(&args, &mut stdout.lock()),
    }
}
