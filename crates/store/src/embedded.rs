//! The embedded durable tier: blobs as files named by their hash, an index in redb,
//! bounded in bytes with least-recently-used eviction, crash safe.
//!
//! Layout of a store directory:
//! - `index.redb`: which blobs exist (length, insertion order), records, encodings;
//! - `blobs/ab/<hex>`: one file per blob, named by the SHA-256 of its content;
//! - `tmp/`: blob writes in flight.
//!
//! Every write puts new data on disk first (temp file, fsync, rename) and commits the index
//! after, so a crash loses at most the write in flight; [`Embedded::open`] cleans up what
//! such a crash leaves behind. Blobs are verified against their hash whenever read from disk.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::durable::{BlobRead, Durable, DurableStats, PartialBlob, Precondition, RecordWrite};
use crate::files::{BlobFiles, TempFile};
use crate::index::{BlobRow, Index, Removal};
use crate::local::LocalTier;
use crate::lru::Lru;
use crate::{lock, Hash, StoreError, WRITE_SUSPENSION};

/// Capacity of a blob writer's buffer: response bodies arrive in chunks of a few KiB.
const WRITE_BUFFER_BYTES: usize = 64 * 1024;

/// A handle to the embedded tier; clones share it.
#[derive(Clone)]
pub(crate) struct Embedded {
    inner: Arc<Inner>,
}

struct Inner {
    /// Bound on the total length of all blobs on disk.
    max_bytes: u64,
    files: BlobFiles,
    index: Index,
    /// The store's local tier, told about every blob removed here.
    local: Arc<LocalTier>,
    /// Held across every change to which blobs and records exist (install a file, commit the
    /// index, evict), so that disk, index and `State` agree whenever it is free. Taken before
    /// `state`, never while holding it.
    changes: Mutex<()>,
    state: Mutex<State>,
}

struct State {
    /// Blobs on disk, weighted by length, in order of last use. After a restart the order is
    /// the insertion order stored in the index.
    on_disk: Lru<()>,
    next_seq: u64,
    records: u64,
    writes_suspended_until: Option<Instant>,
}

/// Bytes of a blob to store: already in a fsynced temp file, or still in memory because the
/// blob was present when the write began (and only needs writing if it has gone since).
enum Staged<'a> {
    File(TempFile),
    Bytes(&'a [u8]),
}

impl Embedded {
    /// Opens the tier in `dir`, creating it if needed, and recovers from a crash: deletes
    /// temp files, drops index rows whose blob file is missing or of the wrong length (with
    /// what references them), and deletes blob files the index does not know.
    ///
    /// An index that cannot be read is [`StoreError::Corrupt`]; it is left untouched.
    pub(crate) fn open(
        dir: &Path,
        max_bytes: u64,
        local: Arc<LocalTier>,
    ) -> Result<Embedded, StoreError> {
        fs::create_dir_all(dir).map_err(|err| StoreError::io(dir, err))?;
        let index = Index::open(&dir.join("index.redb"))?;
        let files = BlobFiles::open(dir)?;
        let temps = files.clear_temp()?;

        let rows = index.blobs()?;
        let lost: Vec<Hash> = rows
            .iter()
            .filter(|row| files.len_on_disk(&row.hash) != Some(row.len))
            .map(|row| row.hash)
            .collect();
        for hash in &lost {
            tracing::warn!(path = %files.path(hash).display(), "blob file missing or incomplete; dropping it from the index");
        }
        let dropped: HashSet<Hash> = index.remove_blobs(&lost)?.blobs.into_iter().collect();

        let mut on_disk = Lru::new();
        for row in rows.iter().filter(|row| !dropped.contains(&row.hash)) {
            on_disk.insert(row.hash, (), row.len);
        }
        let orphans = files.remove_unknown(|hash| on_disk.contains(hash))?;
        let state = State {
            on_disk,
            next_seq: rows.last().map_or(0, |row| row.seq + 1),
            records: index.record_count()?,
            writes_suspended_until: None,
        };
        let embedded = Embedded {
            inner: Arc::new(Inner {
                max_bytes,
                files,
                index,
                local,
                changes: Mutex::new(()),
                state: Mutex::new(state),
            }),
        };
        tracing::info!(
            dir = %dir.display(), temps, orphans, lost = lost.len(), stats = ?embedded.stats(),
            "store opened"
        );
        // The budget may have shrunk since the last run.
        {
            let _changes = lock(&embedded.inner.changes);
            embedded.evict_over_budget()?;
        }
        Ok(embedded)
    }

    /// Installs a staged blob (unless present), indexes it and, for an encoding, its row; then
    /// evicts down to the budget.
    fn commit_blob(
        &self,
        hash: Hash,
        len: u64,
        staged: Staged<'_>,
        encoding_of: Option<(&Hash, &str)>,
    ) -> Result<Hash, StoreError> {
        let _changes = lock(&self.inner.changes);
        if let Some((source, _)) = encoding_of {
            if !self.contains(source) {
                return Err(StoreError::MissingBlob(*source));
            }
        }
        let new_row = if self.contains(&hash) {
            None
        } else {
            let temp = match staged {
                Staged::File(temp) => temp,
                Staged::Bytes(data) => self.track(self.inner.files.write_temp(data))?,
            };
            self.track(self.inner.files.install(temp, &hash))?;
            Some(BlobRow {
                hash,
                len,
                seq: self.state().next_seq,
            })
        };
        let indexed = match (encoding_of, &new_row) {
            (Some((source, variant)), _) => {
                self.inner
                    .index
                    .insert_encoding(source, variant, &hash, new_row.as_ref())
            }
            (None, Some(row)) => self.inner.index.insert_blob(row),
            (None, None) => Ok(()),
        };
        if let Err(err) = self.track(indexed) {
            if new_row.is_some() {
                self.inner.files.remove(&hash);
            }
            return Err(err);
        }
        {
            let mut state = self.state();
            match new_row {
                Some(row) => {
                    state.on_disk.insert(hash, (), len);
                    state.next_seq = row.seq + 1;
                }
                None => {
                    state.on_disk.touch(&hash);
                }
            }
            if let Some((source, _)) = encoding_of {
                state.on_disk.touch(source);
            }
        }
        self.evict_over_budget()?;
        Ok(hash)
    }

    /// Removes least recently used blobs until the total fits `max_bytes`. The caller holds
    /// `changes`.
    fn evict_over_budget(&self) -> Result<(), StoreError> {
        let victims: Vec<Hash> = {
            let state = self.state();
            let mut excess = state.on_disk.weight().saturating_sub(self.inner.max_bytes);
            let mut victims = Vec::new();
            for (hash, len) in state.on_disk.oldest_first() {
                if excess == 0 {
                    break;
                }
                victims.push(hash);
                excess = excess.saturating_sub(len);
            }
            victims
        };
        if victims.is_empty() {
            return Ok(());
        }
        let removal = self.track(self.inner.index.remove_blobs(&victims))?;
        tracing::debug!(
            blobs = removal.blobs.len(),
            records = removal.records,
            "evicted"
        );
        self.forget(removal);
        Ok(())
    }

    /// Brings memory and disk in line with blobs and records removed from the index.
    fn forget(&self, removal: Removal) {
        {
            let mut state = self.state();
            for hash in &removal.blobs {
                state.on_disk.remove(hash);
            }
            state.records -= removal.records;
        }
        self.inner.local.forget(&removal.blobs);
        for hash in &removal.blobs {
            self.inner.files.remove(hash);
        }
    }

    /// Reads a blob's file and checks it against its hash; the error describes the damage.
    fn read_verified(&self, hash: &Hash) -> Result<Bytes, String> {
        let data =
            fs::read(self.inner.files.path(hash)).map_err(|err| format!("unreadable: {err}"))?;
        let actual = Hash::of(&data);
        if actual != *hash {
            return Err(format!("content hashes to {actual}"));
        }
        Ok(Bytes::from(data))
    }

    fn contains(&self, hash: &Hash) -> bool {
        self.state().on_disk.contains(hash)
    }

    fn check_writable(&self) -> Result<(), StoreError> {
        let mut state = self.state();
        match state.writes_suspended_until {
            Some(until) if Instant::now() < until => Err(StoreError::WritesSuspended),
            Some(_) => {
                state.writes_suspended_until = None;
                tracing::info!("resuming store writes");
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Passes `result` through, suspending writes when it says the disk is full.
    fn track<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(err) = &result {
            if err.is_out_of_space() {
                let mut state = self.state();
                if state.writes_suspended_until.is_none() {
                    tracing::warn!(
                        error = %err,
                        "disk full: suspending store writes for {} s; serving continues without caching",
                        WRITE_SUSPENSION.as_secs()
                    );
                }
                state.writes_suspended_until = Some(Instant::now() + WRITE_SUSPENSION);
            }
        }
        result
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.inner.state)
    }
}

impl Durable for Embedded {
    fn put_blob(&self, hash: Hash, data: &[u8]) -> Result<(), StoreError> {
        if self.state().on_disk.touch(&hash) {
            return Ok(());
        }
        self.check_writable()?;
        let temp = self.track(self.inner.files.write_temp(data))?;
        self.commit_blob(hash, data.len() as u64, Staged::File(temp), None)?;
        Ok(())
    }

    fn blob_writer(&self, limit: u64) -> Result<Box<dyn PartialBlob>, StoreError> {
        self.check_writable()?;
        let (file, temp) = self.track(self.inner.files.create_temp())?;
        Ok(Box::new(FileWriter {
            tier: self.clone(),
            limit,
            file: BufWriter::with_capacity(WRITE_BUFFER_BYTES, file),
            temp,
            hasher: Sha256::new(),
            len: 0,
            broken: None,
        }))
    }

    fn get_blob(&self, hash: &Hash) -> Result<BlobRead, StoreError> {
        if !self.state().on_disk.touch(hash) {
            return Ok(BlobRead::Absent);
        }
        if let Ok(data) = self.read_verified(hash) {
            return Ok(BlobRead::Found(data));
        }
        // The file may have been evicted, or evicted and stored again, since the check above;
        // decide again while nothing can change.
        let _changes = lock(&self.inner.changes);
        if !self.contains(hash) {
            return Ok(BlobRead::Absent);
        }
        match self.read_verified(hash) {
            Ok(data) => Ok(BlobRead::Found(data)),
            Err(problem) => {
                tracing::error!(
                    path = %self.inner.files.path(hash).display(), %problem,
                    "damaged blob file; removing it and everything that references it"
                );
                let removal = self.track(self.inner.index.remove_blobs(&[*hash]))?;
                self.forget(removal);
                Ok(BlobRead::Discarded)
            }
        }
    }

    fn has_blob(&self, hash: &Hash) -> Result<bool, StoreError> {
        Ok(self.contains(hash))
    }

    fn touch(&self, hashes: &[Hash]) {
        let mut state = self.state();
        for hash in hashes {
            state.on_disk.touch(hash);
        }
    }

    fn put_record(
        &self,
        key: &str,
        value: &[u8],
        refs: &[Hash],
        precondition: Precondition<'_>,
    ) -> Result<RecordWrite, StoreError> {
        self.check_writable()?;
        let _changes = lock(&self.inner.changes);
        {
            let mut state = self.state();
            if let Some(missing) = refs.iter().find(|hash| !state.on_disk.contains(hash)) {
                return Err(StoreError::MissingBlob(*missing));
            }
            for hash in refs {
                state.on_disk.touch(hash);
            }
        }
        let written = self.track(self.inner.index.put_record(key, value, refs, precondition))?;
        if written == RecordWrite::Added {
            self.state().records += 1;
        }
        Ok(written)
    }

    fn get_record(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.index.get_record(key)
    }

    fn records_with_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.inner.index.records_with_prefix(prefix, limit)
    }

    fn remove_record(&self, key: &str) -> Result<(), StoreError> {
        let _changes = lock(&self.inner.changes);
        if self.track(self.inner.index.remove_record(key))? {
            self.state().records -= 1;
        }
        Ok(())
    }

    fn put_encoding(
        &self,
        source: &Hash,
        variant: &str,
        hash: Hash,
        encoded: &[u8],
    ) -> Result<(), StoreError> {
        self.check_writable()?;
        let staged = if self.contains(&hash) {
            Staged::Bytes(encoded)
        } else {
            Staged::File(self.track(self.inner.files.write_temp(encoded))?)
        };
        self.commit_blob(hash, encoded.len() as u64, staged, Some((source, variant)))?;
        Ok(())
    }

    fn get_encoding(&self, source: &Hash, variant: &str) -> Result<Option<Hash>, StoreError> {
        let encoded = self.inner.index.get_encoding(source, variant)?;
        if encoded.is_some() {
            self.state().on_disk.touch(source);
        }
        Ok(encoded)
    }

    fn stats(&self) -> DurableStats {
        let state = self.state();
        DurableStats {
            bytes: state.on_disk.weight(),
            blobs: state.on_disk.len() as u64,
            records: state.records,
        }
    }
}

/// Streams a blob into a temp file while hashing it; `finish` moves it into place.
/// Dropping an unfinished writer deletes the temp file. After a failed write the writer
/// is unusable; finish reports the failure again.
struct FileWriter {
    tier: Embedded,
    limit: u64,
    file: BufWriter<File>,
    temp: TempFile,
    hasher: Sha256,
    len: u64,
    broken: Option<Broken>,
}

#[derive(Clone, Copy)]
enum Broken {
    TooLarge,
    Io,
}

impl FileWriter {
    fn check_not_broken(&self) -> Result<(), StoreError> {
        match self.broken {
            None => Ok(()),
            Some(Broken::TooLarge) => Err(StoreError::TooLarge { limit: self.limit }),
            Some(Broken::Io) => Err(StoreError::io(
                self.temp.path(),
                io::Error::other("an earlier write to this blob failed"),
            )),
        }
    }
}

impl PartialBlob for FileWriter {
    fn write(&mut self, data: &[u8]) -> Result<(), StoreError> {
        self.check_not_broken()?;
        if self.len + data.len() as u64 > self.limit {
            self.broken = Some(Broken::TooLarge);
            return Err(StoreError::TooLarge { limit: self.limit });
        }
        if let Err(err) = self.file.write_all(data) {
            self.broken = Some(Broken::Io);
            return self.tier.track(Err(StoreError::io(self.temp.path(), err)));
        }
        self.hasher.update(data);
        self.len += data.len() as u64;
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<Hash, StoreError> {
        self.check_not_broken()?;
        let synced = self
            .file
            .flush()
            .and_then(|()| self.file.get_ref().sync_all());
        if let Err(err) = synced {
            return self.tier.track(Err(StoreError::io(self.temp.path(), err)));
        }
        let hash = Hash(self.hasher.finalize().into());
        let FileWriter {
            tier, temp, len, ..
        } = *self;
        tier.commit_blob(hash, len, Staged::File(temp), None)
    }
}
