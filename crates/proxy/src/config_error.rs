//! The error every section's validation returns, a leaf so that a stage owning its own
//! section (the hint stage's `[hints]`) needs nothing else of `config`.

use std::path::PathBuf;

/// A configuration error, naming the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("`{key}`: {message}")]
    Invalid { key: &'static str, message: String },
    #[error("config file {path}, line {line}: `{key}`: {message}")]
    InvalidAt {
        path: PathBuf,
        line: usize,
        key: &'static str,
        message: String,
    },
}
