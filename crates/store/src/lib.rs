//! The store: content-addressed blobs on disk, small named records that reference them, and
//! cached encodings of blobs — bounded in bytes, surviving restart, crash safe.
//!
//! Layout of a store directory:
//! - `index.redb`: which blobs exist (length, insertion order), records, encodings;
//! - `blobs/ab/<hex>`: one file per blob, named by the SHA-256 of its content;
//! - `tmp/`: blob writes in flight.
//!
//! Every write puts new data on disk first (temp file, fsync, rename) and commits the index
//! after, so a crash loses at most the write in flight; [`Store::open`] cleans up what such a
//! crash leaves behind. Blobs are verified against their hash whenever read from disk.
//!
//! The API is blocking; async callers use `spawn_blocking`.

mod error;
mod files;
mod hash;
mod index;
mod lru;
pub mod memo;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sha2::{Digest, Sha256};

pub use error::StoreError;
pub use hash::{Hash, HashParseError};

use files::{BlobFiles, TempFile};
use index::{BlobRow, Index, Removal};
use lru::Lru;

/// How long writes stay suspended after one found the disk full.
pub const WRITE_SUSPENSION: Duration = Duration::from_secs(30);

/// Capacity of a [`BlobWriter`]'s buffer: response bodies arrive in chunks of a few KiB.
const WRITE_BUFFER_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreConfig {
    /// Bound on the total length of all blobs on disk; least recently used blobs are evicted
    /// to stay under it. The index file is not counted.
    pub max_bytes: u64,
    /// Bound on the blob bytes held in the in-memory read cache.
    pub memory_bytes: u64,
    /// Largest single blob accepted.
    pub max_object_bytes: u64,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            max_bytes: 1 << 30,
            memory_bytes: 64 << 20,
            max_object_bytes: 64 << 20,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Total length of the blobs on disk.
    pub disk_bytes: u64,
    pub blobs: u64,
    pub records: u64,
    /// Blob bytes held in the in-memory read cache.
    pub memory_bytes: u64,
}

/// A handle to an open store; clones share it.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    config: StoreConfig,
    files: BlobFiles,
    index: Index,
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
    memory: Lru<Bytes>,
    /// Encodings whose index rows were read or written since start, so a hot encoding is
    /// found without an index transaction: source → (variant, encoded blob).
    encoding_names: HashMap<Hash, Vec<(String, Hash)>>,
    next_seq: u64,
    records: u64,
    writes_suspended_until: Option<Instant>,
}

impl State {
    fn remember_encoding(&mut self, source: &Hash, variant: &str, encoded: Hash) {
        let names = self.encoding_names.entry(*source).or_default();
        match names.iter_mut().find(|(v, _)| v == variant) {
            Some(entry) => entry.1 = encoded,
            None => names.push((variant.to_string(), encoded)),
        }
    }
}

/// Bytes of a blob to store: already in a fsynced temp file, or still in memory because the
/// blob was present when the write began (and only needs writing if it has gone since).
enum Staged<'a> {
    File(TempFile),
    Bytes(&'a [u8]),
}

impl Store {
    /// Opens the store in `dir`, creating it if needed, and recovers from a crash: deletes
    /// temp files, drops index rows whose blob file is missing or of the wrong length (with
    /// what references them), and deletes blob files the index does not know.
    ///
    /// An index that cannot be read is [`StoreError::Corrupt`]; it is left untouched.
    pub fn open(dir: &Path, config: StoreConfig) -> Result<Store, StoreError> {
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
            memory: Lru::new(),
            encoding_names: HashMap::new(),
            next_seq: rows.last().map_or(0, |row| row.seq + 1),
            records: index.record_count()?,
            writes_suspended_until: None,
        };
        let store = Store {
            inner: Arc::new(Inner {
                config,
                files,
                index,
                changes: Mutex::new(()),
                state: Mutex::new(state),
            }),
        };
        tracing::info!(
            dir = %dir.display(), temps, orphans, lost = lost.len(), stats = ?store.stats(),
            "store opened"
        );
        // The budget may have shrunk since the last run.
        {
            let _changes = lock(&store.inner.changes);
            store.evict_over_budget()?;
        }
        Ok(store)
    }

    /// Stores `data` and returns its hash; storing the same bytes again is a no-op.
    pub fn put_blob(&self, data: &[u8]) -> Result<Hash, StoreError> {
        self.check_size(data.len() as u64)?;
        let hash = Hash::of(data);
        if self.state().on_disk.touch(&hash) {
            return Ok(hash);
        }
        self.check_writable()?;
        let temp = self.track(self.inner.files.write_temp(data))?;
        self.commit_blob(hash, data.len() as u64, Staged::File(temp), None)?;
        // What was just stored is about to be asked for: keep it hot rather than read it back.
        self.cache(&hash, &Bytes::copy_from_slice(data));
        Ok(hash)
    }

    /// A writer that stores a blob streamed in pieces without holding it in memory.
    pub fn blob_writer(&self) -> Result<BlobWriter, StoreError> {
        self.check_writable()?;
        let (file, temp) = self.track(self.inner.files.create_temp())?;
        Ok(BlobWriter {
            store: self.clone(),
            file: BufWriter::with_capacity(WRITE_BUFFER_BYTES, file),
            temp,
            hasher: Sha256::new(),
            len: 0,
            broken: None,
        })
    }

    /// The blob's bytes, from memory or from disk. A blob whose file fails verification is
    /// logged, removed with everything referencing it, and reported as absent.
    pub fn get_blob(&self, hash: &Hash) -> Result<Option<Bytes>, StoreError> {
        {
            let mut state = self.state();
            if let Some(data) = state.memory.get(hash).cloned() {
                state.on_disk.touch(hash);
                return Ok(Some(data));
            }
            if !state.on_disk.touch(hash) {
                return Ok(None);
            }
        }
        if let Ok(data) = self.read_verified(hash) {
            self.cache(hash, &data);
            return Ok(Some(data));
        }
        // The file may have been evicted, or evicted and stored again, since the check above;
        // decide again while nothing can change.
        let _changes = lock(&self.inner.changes);
        if !self.state().on_disk.contains(hash) {
            return Ok(None);
        }
        match self.read_verified(hash) {
            Ok(data) => {
                self.cache(hash, &data);
                Ok(Some(data))
            }
            Err(problem) => {
                tracing::error!(
                    path = %self.inner.files.path(hash).display(), %problem,
                    "damaged blob file; removing it and everything that references it"
                );
                let removal = self.track(self.inner.index.remove_blobs(&[*hash]))?;
                self.forget(removal);
                Ok(None)
            }
        }
    }

    pub fn has_blob(&self, hash: &Hash) -> bool {
        self.state().on_disk.contains(hash)
    }

    /// Stores a record under `key`, replacing any previous one. `refs` are the blobs it points
    /// at; they must be in the store, and the record is removed when any of them is.
    pub fn put_record(&self, key: &str, value: &[u8], refs: &[Hash]) -> Result<(), StoreError> {
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
        if self.track(self.inner.index.put_record(key, value, refs))? {
            self.state().records += 1;
        }
        Ok(())
    }

    pub fn get_record(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.index.get_record(key)
    }

    /// Records whose keys start with `prefix`, in key order, at most `limit` of them.
    pub fn records_with_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.inner.index.records_with_prefix(prefix, limit)
    }

    /// Removes the record under `key`, if any. The blobs it referenced stay until evicted.
    pub fn remove_record(&self, key: &str) -> Result<(), StoreError> {
        let _changes = lock(&self.inner.changes);
        if self.track(self.inner.index.remove_record(key))? {
            self.state().records -= 1;
        }
        Ok(())
    }

    /// Stores `encoded` as the `variant` (e.g. "br-5") encoding of the blob `source`, which
    /// must be in the store. The encoding is removed when its source is.
    pub fn put_encoding(
        &self,
        source: &Hash,
        variant: &str,
        encoded: &[u8],
    ) -> Result<(), StoreError> {
        self.check_size(encoded.len() as u64)?;
        self.check_writable()?;
        let hash = Hash::of(encoded);
        let staged = if self.has_blob(&hash) {
            Staged::Bytes(encoded)
        } else {
            Staged::File(self.track(self.inner.files.write_temp(encoded))?)
        };
        self.commit_blob(hash, encoded.len() as u64, staged, Some((source, variant)))?;
        self.cache(&hash, &Bytes::copy_from_slice(encoded));
        Ok(())
    }

    pub fn get_encoding(&self, source: &Hash, variant: &str) -> Result<Option<Bytes>, StoreError> {
        let Some(encoded) = self.inner.index.get_encoding(source, variant)? else {
            return Ok(None);
        };
        {
            let mut state = self.state();
            state.on_disk.touch(source);
            state.remember_encoding(source, variant, encoded);
        }
        self.get_blob(&encoded)
    }

    /// The blob's bytes if they are in the memory cache: no disk or index access, so it
    /// is cheap enough for an async reactor thread. `None` says nothing about the disk.
    pub fn get_blob_in_memory(&self, hash: &Hash) -> Option<Bytes> {
        let mut state = self.state();
        let data = state.memory.get(hash).cloned()?;
        state.on_disk.touch(hash);
        Some(data)
    }

    /// The encoding's bytes if both its name and its bytes are in memory; see
    /// [`Store::get_blob_in_memory`].
    pub fn get_encoding_in_memory(&self, source: &Hash, variant: &str) -> Option<Bytes> {
        let mut state = self.state();
        let encoded = *state
            .encoding_names
            .get(source)?
            .iter()
            .find(|(v, _)| v == variant)
            .map(|(_, h)| h)?;
        let data = state.memory.get(&encoded).cloned()?;
        state.on_disk.touch(source);
        state.on_disk.touch(&encoded);
        Some(data)
    }

    pub fn stats(&self) -> StoreStats {
        let state = self.state();
        StoreStats {
            disk_bytes: state.on_disk.weight(),
            blobs: state.on_disk.len() as u64,
            records: state.records,
            memory_bytes: state.memory.weight(),
        }
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
            if !self.has_blob(source) {
                return Err(StoreError::MissingBlob(*source));
            }
        }
        let new_row = if self.has_blob(&hash) {
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
            if let Some((source, variant)) = encoding_of {
                state.on_disk.touch(source);
                state.remember_encoding(source, variant, hash);
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
            let mut excess = state
                .on_disk
                .weight()
                .saturating_sub(self.inner.config.max_bytes);
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
                state.memory.remove(hash);
                state.encoding_names.remove(hash);
            }
            let removed: HashSet<&Hash> = removal.blobs.iter().collect();
            state
                .encoding_names
                .values_mut()
                .for_each(|names| names.retain(|(_, h)| !removed.contains(h)));
            state.records -= removal.records;
        }
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

    /// Keeps a blob just read in the memory cache, if it is still stored and fits.
    fn cache(&self, hash: &Hash, data: &Bytes) {
        let limit = self.inner.config.memory_bytes;
        let mut state = self.state();
        if data.len() as u64 > limit || !state.on_disk.contains(hash) {
            return;
        }
        state.memory.insert(*hash, data.clone(), data.len() as u64);
        while state.memory.weight() > limit {
            state.memory.pop_oldest();
        }
    }

    fn check_size(&self, len: u64) -> Result<(), StoreError> {
        let limit = self.object_limit();
        if len > limit {
            return Err(StoreError::TooLarge { limit });
        }
        Ok(())
    }

    fn object_limit(&self) -> u64 {
        self.inner
            .config
            .max_object_bytes
            .min(self.inner.config.max_bytes)
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

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("config", &self.inner.config)
            .field("stats", &self.stats())
            .finish()
    }
}

/// A panic elsewhere leaves the guarded data consistent (every update completes under one
/// lock hold), so a poisoned lock is still usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Streams a blob into the store: bytes go to a temp file while being hashed, and
/// [`BlobWriter::finish`] moves it into place. Dropping an unfinished writer deletes the temp
/// file. After a failed write the writer is unusable; finish reports the failure again.
pub struct BlobWriter {
    store: Store,
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

impl BlobWriter {
    /// Appends `data`. Fails with [`StoreError::TooLarge`] once the blob would exceed the
    /// store's object limit.
    pub fn write(&mut self, data: &[u8]) -> Result<(), StoreError> {
        self.check_not_broken()?;
        let limit = self.store.object_limit();
        if self.len + data.len() as u64 > limit {
            self.broken = Some(Broken::TooLarge);
            return Err(StoreError::TooLarge { limit });
        }
        if let Err(err) = self.file.write_all(data) {
            self.broken = Some(Broken::Io);
            return self.store.track(Err(StoreError::io(self.temp.path(), err)));
        }
        self.hasher.update(data);
        self.len += data.len() as u64;
        Ok(())
    }

    /// Makes the blob durable and stores it; returns its hash.
    pub fn finish(mut self) -> Result<Hash, StoreError> {
        self.check_not_broken()?;
        let synced = self
            .file
            .flush()
            .and_then(|()| self.file.get_ref().sync_all());
        if let Err(err) = synced {
            return self.store.track(Err(StoreError::io(self.temp.path(), err)));
        }
        let hash = Hash(self.hasher.finalize().into());
        self.store
            .commit_blob(hash, self.len, Staged::File(self.temp), None)
    }

    fn check_not_broken(&self) -> Result<(), StoreError> {
        match self.broken {
            None => Ok(()),
            Some(Broken::TooLarge) => Err(StoreError::TooLarge {
                limit: self.store.object_limit(),
            }),
            Some(Broken::Io) => Err(StoreError::io(
                self.temp.path(),
                io::Error::other("an earlier write to this blob failed"),
            )),
        }
    }
}
