//! Blob files: `blobs/ab/<hex>` for content, `tmp/` for writes in flight.
//!
//! A blob is written to a temp file, fsynced, then renamed into place, so a blob file under
//! `blobs/` is always complete. The parent directory is not fsynced after the rename: if a crash
//! loses the rename, recovery on open drops the index row whose file is missing.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Hash, StoreError};

pub(crate) struct BlobFiles {
    blobs_dir: PathBuf,
    temp_dir: PathBuf,
    next_temp: AtomicU64,
}

/// A temp file that is removed when dropped, unless it was installed as a blob.
pub(crate) struct TempFile {
    path: PathBuf,
    installed: bool,
}

impl TempFile {
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.installed {
            return;
        }
        if let Err(err) = fs::remove_file(&self.path) {
            if err.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %self.path.display(), %err, "cannot remove temp file; it is removed when the store next opens");
            }
        }
    }
}

impl BlobFiles {
    pub(crate) fn open(dir: &Path) -> Result<BlobFiles, StoreError> {
        let files = BlobFiles {
            blobs_dir: dir.join("blobs"),
            temp_dir: dir.join("tmp"),
            next_temp: AtomicU64::new(0),
        };
        for sub in [&files.blobs_dir, &files.temp_dir] {
            fs::create_dir_all(sub).map_err(|err| StoreError::io(sub, err))?;
        }
        Ok(files)
    }

    pub(crate) fn path(&self, hash: &Hash) -> PathBuf {
        self.shard(hash).join(hash.to_hex())
    }

    /// The directory of the blob `hash`: one per first byte.
    fn shard(&self, hash: &Hash) -> PathBuf {
        self.blobs_dir.join(&hash.to_hex()[..2])
    }

    /// A new, empty temp file. The process id keeps names apart from leftovers of an earlier run.
    pub(crate) fn create_temp(&self) -> Result<(File, TempFile), StoreError> {
        let n = self.next_temp.fetch_add(1, Ordering::Relaxed);
        let path = self
            .temp_dir
            .join(format!("{}-{n}.tmp", std::process::id()));
        let file = File::create_new(&path).map_err(|err| StoreError::io(&path, err))?;
        Ok((
            file,
            TempFile {
                path,
                installed: false,
            },
        ))
    }

    /// Writes `data` to a new temp file and fsyncs it.
    pub(crate) fn write_temp(&self, data: &[u8]) -> Result<TempFile, StoreError> {
        let (mut file, temp) = self.create_temp()?;
        file.write_all(data)
            .and_then(|()| file.sync_all())
            .map_err(|err| StoreError::io(temp.path(), err))?;
        Ok(temp)
    }

    /// Moves a complete, fsynced temp file into place as the blob `hash`.
    pub(crate) fn install(&self, mut temp: TempFile, hash: &Hash) -> Result<(), StoreError> {
        let shard = self.shard(hash);
        let path = self.path(hash);
        fs::create_dir_all(&shard).map_err(|err| StoreError::io(&shard, err))?;
        fs::rename(&temp.path, &path).map_err(|err| StoreError::io(&path, err))?;
        temp.installed = true;
        Ok(())
    }

    /// Removes the file of an unindexed blob. A failure leaves an orphan that the next open deletes.
    pub(crate) fn remove(&self, hash: &Hash) {
        let path = self.path(hash);
        if let Err(err) = fs::remove_file(&path) {
            if err.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %path.display(), %err, "cannot remove evicted blob file; it is removed when the store next opens");
            }
        }
    }

    /// The size of the blob's file, or None when it is missing or unreadable.
    pub(crate) fn len_on_disk(&self, hash: &Hash) -> Option<u64> {
        fs::metadata(self.path(hash)).ok().map(|meta| meta.len())
    }

    /// Deletes every temp file: writes that were in flight when a previous run stopped.
    pub(crate) fn clear_temp(&self) -> Result<usize, StoreError> {
        let mut removed = 0;
        for path in list(&self.temp_dir)? {
            remove_leftover(&path)?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Deletes every file under `blobs/` that is not the file of a blob `known` accepts:
    /// blobs written but never indexed before a crash, or dropped from the index but not
    /// yet unlinked.
    pub(crate) fn remove_unknown(
        &self,
        known: impl Fn(&Hash) -> bool,
    ) -> Result<usize, StoreError> {
        let mut removed = 0;
        for shard in list(&self.blobs_dir)? {
            let entries = if shard.is_dir() {
                list(&shard)?
            } else {
                vec![shard.clone()]
            };
            for path in entries {
                let hash = path
                    .file_name()
                    .and_then(|name| name.to_str())
                    .and_then(|name| Hash::from_hex(name).ok());
                if hash.is_some_and(|hash| known(&hash) && self.path(&hash) == path) {
                    continue;
                }
                remove_leftover(&path)?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

fn list(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let entries = fs::read_dir(dir).map_err(|err| StoreError::io(dir, err))?;
    entries
        .map(|entry| {
            entry
                .map(|entry| entry.path())
                .map_err(|err| StoreError::io(dir, err))
        })
        .collect()
}

fn remove_leftover(path: &Path) -> Result<(), StoreError> {
    tracing::info!(path = %path.display(), "removing leftover file");
    let result = if path.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    result.map_err(|err| StoreError::io(path, err))
}
