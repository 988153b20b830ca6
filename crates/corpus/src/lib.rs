//! Version corpora on disk, as the lab's analyses and the test bench's origins read them:
//! folders of numbered versions of one resource ([`series`]) and the content type a
//! file's extension tells ([`ContentType`]).

pub mod series;

use std::io;
use std::path::{Path, PathBuf};

pub use series::Series;

/// A file or folder of a corpus that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}: {source}", path.display())]
pub struct ReadError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// The content types the lab reports separately, told by file extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ContentType {
    Html,
    Css,
    Js,
    Json,
    Svg,
    Other,
}

impl ContentType {
    pub fn of(path: &Path) -> Self {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        match ext.as_str() {
            "html" | "htm" | "xhtml" => Self::Html,
            "css" => Self::Css,
            "js" | "mjs" | "cjs" => Self::Js,
            "json" => Self::Json,
            "svg" => Self::Svg,
            _ => Self::Other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Html => "html",
            Self::Css => "css",
            Self::Js => "js",
            Self::Json => "json",
            Self::Svg => "svg",
            Self::Other => "other",
        }
    }

    /// The media type a web server would send for this content type.
    pub fn media_type(self) -> Option<&'static str> {
        match self {
            Self::Html => Some("text/html"),
            Self::Css => Some("text/css"),
            Self::Js => Some("text/javascript"),
            Self::Json => Some("application/json"),
            Self::Svg => Some("image/svg+xml"),
            Self::Other => None,
        }
    }
}
