//! Errors of the store. Each message names the file or limit involved.

use std::io;
use std::path::PathBuf;

use crate::Hash;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The index cannot be opened. The store refuses to start rather than recreate it, so
    /// nothing stored is lost silently; an operator moves the file aside to start empty.
    #[error("store index {path} is corrupt or unreadable ({detail}); move it aside to start with an empty store")]
    Corrupt { path: PathBuf, detail: String },

    /// The index exists but may not be written: a read-only mount or missing
    /// permissions, not corruption.
    #[error("store index {path} is read-only ({source}): make the data directory writable by this user, or point the data directory elsewhere")]
    ReadOnly { path: PathBuf, source: io::Error },

    #[error("I/O error on {path}: {source}")]
    Io { path: PathBuf, source: io::Error },

    #[error("object exceeds the store's limit of {limit} bytes")]
    TooLarge { limit: u64 },

    /// A recent write found the disk full; writes fail fast until the suspension ends.
    #[error("store writes are suspended for {} s after the disk filled up", crate::WRITE_SUSPENSION.as_secs())]
    WritesSuspended,

    /// A record or encoding named a blob the store does not hold (never stored, or evicted).
    #[error("blob {0} is not in the store")]
    MissingBlob(Hash),

    /// Another `Store` (in this or another process) has the index open.
    #[error("store index {path} is already open by another store; one process per data directory")]
    InUse { path: PathBuf },

    #[error("store index error: {0}")]
    Index(String),

    /// The shared store (Redis) is unreachable or slower than its budget; calls fail
    /// fast until the next reconnection attempt.
    #[error("shared store {target} is unreachable or over its time budget; serving without it until it answers again")]
    Unavailable { target: String },

    /// The shared store refused a command for another reason than memory or transport.
    #[error("shared store {target} refused a command: {detail}")]
    Shared { target: String, detail: String },

    /// A record changed under every one of an update's attempts: other writers keep
    /// replacing it faster than this one can read, change and write it.
    #[error("record {key:?} kept changing under {attempts} attempts to update it")]
    Contended { key: String, attempts: u32 },

    /// Listing records by a prefix the shared store's group index cannot answer.
    #[error("records are listed by group on Redis (a key up to its first `/`); the prefix {prefix:?} does not reach it")]
    PrefixTooShort { prefix: String },
}

impl StoreError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> StoreError {
        StoreError::Io {
            path: path.into(),
            source,
        }
    }

    /// Whether a caller should count this failure without logging it: the store logs
    /// suspended writes and an unreachable shared store itself, once per change of
    /// state, and a missing blob is an ordinary race with eviction.
    pub fn is_quiet(&self) -> bool {
        matches!(
            self,
            StoreError::WritesSuspended
                | StoreError::Unavailable { .. }
                | StoreError::MissingBlob(_)
        )
    }

    /// Whether this error says the disk (or quota, or file size limit) is exhausted.
    pub(crate) fn is_out_of_space(&self) -> bool {
        matches!(self, StoreError::Io { source, .. } if matches!(
            source.kind(),
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded | io::ErrorKind::FileTooLarge
        ))
    }
}
