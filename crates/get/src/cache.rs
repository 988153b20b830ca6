//! The on-disk cache: `index.json` (instances per URL, newest first, and
//! dictionaries with their origin and `match` pattern) and `blobs/<sha256>`, the
//! decoded contents. Every file is written to a temporary name and renamed; a blob is
//! checked against its name whenever it is read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderMap};
use serde::{Deserialize, Serialize};
use store::Hash;
use wirefold_http::cache_control::CacheControl;
use wirefold_http::conditional::EntityTag;
use wirefold_http::dictionary::use_as_dictionary_match;

use crate::error::GetError;
use crate::exchange::{field, Outcome, Target};

/// Instances kept per URL: the bases offered for a delta.
const KEEP_INSTANCES: usize = 4;
/// Dictionaries kept in all; the oldest goes first.
const KEEP_DICTIONARIES: usize = 64;

#[derive(Serialize, Deserialize, Default)]
pub(crate) struct Index {
    /// Per URL, its instances newest first (at most `KEEP_INSTANCES`).
    pub(crate) resources: BTreeMap<String, Vec<InstanceEntry>>,
    /// Newest first.
    pub(crate) dictionaries: Vec<DictionaryEntry>,
}

#[derive(Serialize, Deserialize, Clone)]
pub(crate) struct InstanceEntry {
    pub(crate) etag: String,
    sha256: String,
    time: u64,
}

#[derive(Serialize, Deserialize, Clone)]
pub(crate) struct DictionaryEntry {
    pub(crate) origin: String,
    pub(crate) pattern: String,
    sha256: String,
    /// The URL it came from.
    pub(crate) source: String,
    pub(crate) time: u64,
}

impl InstanceEntry {
    pub(crate) fn hash(&self) -> Option<Hash> {
        self.sha256.parse().ok()
    }
}

impl DictionaryEntry {
    pub(crate) fn hash(&self) -> Option<Hash> {
        self.sha256.parse().ok()
    }
}

pub(crate) struct Cache {
    dir: PathBuf,
    pub(crate) index: Index,
}

impl Cache {
    pub(crate) fn open(dir: &Path) -> Result<Cache, GetError> {
        let failed = |path: &Path, detail: String| GetError::Cache {
            path: path.to_path_buf(),
            detail,
        };
        std::fs::create_dir_all(dir.join("blobs")).map_err(|e| failed(dir, e.to_string()))?;
        let index_path = dir.join("index.json");
        let index = match std::fs::read(&index_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                failed(
                    &index_path,
                    format!("unreadable ({e}); remove it to start with an empty cache"),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Index::default(),
            Err(e) => return Err(failed(&index_path, e.to_string())),
        };
        Ok(Cache {
            dir: dir.to_path_buf(),
            index,
        })
    }

    fn blob_path(&self, hash: &Hash) -> PathBuf {
        self.dir.join("blobs").join(hash.to_hex())
    }

    pub(crate) fn has_blob(&self, hash: &Hash) -> bool {
        self.blob_path(hash).is_file()
    }

    /// The content, if present and intact (a damaged file is never offered or served).
    pub(crate) fn blob(&self, hash: &Hash) -> Option<Bytes> {
        let bytes = std::fs::read(self.blob_path(hash)).ok()?;
        (Hash::of(&bytes) == *hash).then(|| Bytes::from(bytes))
    }

    fn put_blob(&self, hash: &Hash, bytes: &[u8]) -> Result<(), GetError> {
        let path = self.blob_path(hash);
        if self.blob(hash).is_some() {
            return Ok(());
        }
        write_atomically(&path, bytes)
    }

    /// Keeps a delivered instance under its URL and, when it declares itself one, as
    /// a dictionary. A 304 only makes its instance the newest.
    pub(crate) fn remember(&mut self, target: &Target, outcome: &Outcome) -> Result<(), GetError> {
        if !keepable(&outcome.headers) || !(outcome.status.is_success() || outcome.cached) {
            return Ok(());
        }
        let held = self.index.resources.entry(target.url.clone()).or_default();
        let previous = held
            .iter()
            .position(|i| i.sha256 == outcome.hash.to_hex())
            .map(|at| held.remove(at));
        let etag = field(&outcome.headers, &header::ETAG).filter(|t| EntityTag::parse(t).is_some());
        if let Some(etag) = etag.or(previous.map(|p| p.etag)) {
            held.insert(
                0,
                InstanceEntry {
                    etag,
                    sha256: outcome.hash.to_hex(),
                    time: now(),
                },
            );
            held.truncate(KEEP_INSTANCES);
        }
        if !outcome.cached {
            self.put_blob(&outcome.hash, &outcome.instance)?;
            self.remember_dictionary(target, outcome)?;
        }
        Ok(())
    }

    /// Keeps the outcome as a dictionary for its origin if it carries
    /// `Use-As-Dictionary` with a path pattern. Returns whether it did.
    pub(crate) fn remember_dictionary(
        &mut self,
        target: &Target,
        outcome: &Outcome,
    ) -> Result<bool, GetError> {
        let Some(pattern) =
            use_as_dictionary_match(&outcome.headers).filter(|p| p.starts_with('/'))
        else {
            return Ok(false);
        };
        if !keepable(&outcome.headers) {
            return Ok(false);
        }
        self.put_blob(&outcome.hash, &outcome.instance)?;
        // One dictionary per (origin, pattern): a newer one replaces it.
        self.index
            .dictionaries
            .retain(|d| !(d.origin == target.origin && d.pattern == pattern));
        self.index.dictionaries.insert(
            0,
            DictionaryEntry {
                origin: target.origin.clone(),
                pattern,
                sha256: outcome.hash.to_hex(),
                source: target.url.clone(),
                time: now(),
            },
        );
        self.index.dictionaries.truncate(KEEP_DICTIONARIES);
        Ok(true)
    }

    /// Writes the index, then removes blobs it no longer names.
    pub(crate) fn save(&self) -> Result<(), GetError> {
        let index = serde_json::to_vec_pretty(&self.index).map_err(|e| GetError::Cache {
            path: self.dir.join("index.json"),
            detail: e.to_string(),
        })?;
        write_atomically(&self.dir.join("index.json"), &index)?;
        let named: std::collections::HashSet<&str> = self
            .index
            .resources
            .values()
            .flatten()
            .map(|i| i.sha256.as_str())
            .chain(self.index.dictionaries.iter().map(|d| d.sha256.as_str()))
            .collect();
        let Ok(entries) = std::fs::read_dir(self.dir.join("blobs")) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            // Temporary files of a concurrent run are left alone; they are renamed or gone soon.
            if name
                .to_str()
                .is_some_and(|n| n.len() == 64 && !named.contains(n))
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(())
    }
}

/// A private cache may keep anything but `no-store`; `no-store, im` on a 226 lets a
/// delta-aware cache keep the result (RFC 3229 §10.8).
fn keepable(headers: &HeaderMap) -> bool {
    let im = headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|d| d.trim().eq_ignore_ascii_case("im"));
    !CacheControl::from_headers(headers).no_store || im
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), GetError> {
    let failed = |e: std::io::Error| GetError::Cache {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let temporary = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&temporary, bytes).map_err(failed)?;
    std::fs::rename(&temporary, path).map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        failed(e)
    })
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corrupt_index_is_reported_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.json"), b"{not json").unwrap();
        let err = Cache::open(dir.path()).err().unwrap().to_string();
        assert!(
            err.contains("index.json") && err.contains("remove it"),
            "{err}"
        );
        assert_eq!(
            std::fs::read(dir.path().join("index.json")).unwrap(),
            b"{not json"
        );
    }
}
