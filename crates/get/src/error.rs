//! What can go wrong, each with the text the command line shows.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum GetError {
    #[error(
        "`{url}` is not a usable URL: {reason} (expected http://host[:port]/path or https://…)"
    )]
    Url { url: String, reason: String },
    #[error("--ca-file {0}")]
    Tls(String),
    #[error("cache {path}: {detail}")]
    Cache { path: PathBuf, detail: String },
    #[error("{url}: {detail}")]
    Transfer { url: String, detail: String },
    #[error("{url}: no verified instance (first answer: {first}; plain refetch: {plain})")]
    Unverifiable {
        url: String,
        first: String,
        plain: String,
    },
}
