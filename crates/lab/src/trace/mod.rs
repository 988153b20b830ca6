//! Traces: what clients fetched, read as a stream of [`Exchange`]s from HAR files, WARC
//! files and version corpora.
//!
//! Readers stream: a WARC is read record by record and a version corpus file by file,
//! so memory holds one record (or one HAR document) at a time. A record that cannot be
//! read is yielded as [`Skipped`], naming where it sits, and reading goes on.

mod har;
mod http;
mod versions;
mod warc;

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::LabError;

/// One response as the trace recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchange {
    pub url: String,
    /// The request method, when the trace recorded the request.
    pub method: Option<String>,
    pub status: u16,
    /// The media type (`text/html`), lower case, without parameters.
    pub content_type: Option<String>,
    /// Who fetched it: the HAR page the entry belongs to, or the client address.
    pub client: Option<String>,
    /// When, as the trace wrote it (ISO 8601 in HAR and WARC).
    pub time: Option<String>,
    /// The body with transfer and content codings removed; `None` when the trace
    /// did not keep it.
    pub body: Option<Vec<u8>>,
    /// A WARC identical-payload revisit: the body is that of the latest capture of this URL.
    pub revisit_of: Option<String>,
}

/// A record or entry the reader could not use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub file: PathBuf,
    pub at: Location,
    pub reason: String,
}

/// Where a skipped record sits in its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// Byte offset of the record (in a gzip-per-record WARC: of its gzip member).
    Byte(u64),
    /// Index of the HAR entry (a HAR is one JSON document: its entries have no useful offset).
    Entry(usize),
    /// The file as a whole (a version-corpus file).
    File,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.display();
        match self.at {
            Location::Byte(offset) => write!(f, "{file}: record at byte {offset}: {}", self.reason),
            Location::Entry(i) => write!(f, "{file}: entry {i}: {}", self.reason),
            Location::File => write!(f, "{file}: {}", self.reason),
        }
    }
}

/// What a reader yields.
pub type Item = Result<Exchange, Skipped>;

/// Bounds on what a reader holds in memory.
#[derive(Clone, Copy, Debug)]
pub struct TraceLimits {
    /// Largest record block or decoded body; larger ones are skipped.
    pub max_body: usize,
    /// Largest HAR file (parsed whole).
    pub max_har: u64,
}

/// Opens a trace: a directory is a version corpus; a file is told by its first bytes
/// (`WARC/`, a gzip member, or a JSON object for HAR).
pub fn open(path: &Path, limits: TraceLimits) -> Result<Box<dyn Iterator<Item = Item>>, LabError> {
    let read_error = |source| LabError::Read {
        path: path.to_path_buf(),
        source,
    };
    if std::fs::metadata(path).map_err(read_error)?.is_dir() {
        return Ok(Box::new(versions::read(path, limits)?));
    }
    let mut head = [0u8; 8];
    let n =
        read_prefix(&mut File::open(path).map_err(read_error)?, &mut head).map_err(read_error)?;
    let head = &head[..n];
    if head.starts_with(b"WARC/") || head.starts_with(&warc::GZIP_MAGIC) {
        return Ok(Box::new(warc::read(path, limits)?));
    }
    let first = head
        .strip_prefix(b"\xEF\xBB\xBF")
        .unwrap_or(head)
        .iter()
        .find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{') {
        return Ok(Box::new(har::read(path, limits)?));
    }
    Err(LabError::BadInput {
        path: path.to_path_buf(),
        reason: "neither a directory (version corpus), a WARC file (plain or gzip) nor a HAR file"
            .into(),
    })
}

/// Fills `buf` as far as the file allows.
fn read_prefix(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// `text/HTML; charset=utf-8` → `text/html`.
fn media_type(value: &str) -> Option<String> {
    let t = value.split(';').next()?.trim().to_ascii_lowercase();
    (!t.is_empty()).then_some(t)
}
