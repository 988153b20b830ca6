//! The store: content-addressed blobs, small named records that reference them, and
//! cached encodings of blobs — bounded in bytes, verified on every read.
//!
//! Two tiers. The local tier (`local.rs`) keeps hot blobs and encoding names in this
//! process's memory; with the embedded tier, a large blob also has its bytes in an
//! unnamed file of the store's directory, for `sendfile` (`sendable.rs`). Behind it, a
//! durable tier (`durable.rs`): the embedded one (`embedded.rs`: redb plus blob files
//! in a directory, surviving restart, crash safe) by default, or Redis (`shared.rs`,
//! one server or a cluster), which every instance of a fleet shares. Callers see only
//! [`Store`]; which tier is underneath is the choice of [`StoreLocation`].
//!
//! The API is blocking; async callers use `spawn_blocking`, except for the `_in_memory`
//! lookups, which never leave the local tier.

mod durable;
mod embedded;
mod error;
mod files;
mod hash;
mod index;
mod local;
mod lru;
pub mod memo;
pub mod sendable;
#[cfg(feature = "redis")]
mod shared;
mod target;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;

pub use error::StoreError;
pub use hash::{Hash, HashParseError};
#[cfg(feature = "redis")]
pub use shared::{CHUNK_BYTES, FIRST_RETRY, LAST_RETRY, MAX_GROUP_KEYS};
pub use target::{RedisTarget, SharedState, StateObserver, TargetError};

use durable::{BlobRead, Durable, PartialBlob, Precondition, RecordWrite};
use embedded::Embedded;
use local::LocalTier;
#[cfg(feature = "redis")]
use shared::Shared;

/// How many times [`Store::update_record`] reads, changes and tries to write a record
/// that other writers keep replacing.
pub const UPDATE_ATTEMPTS: u32 = 16;

/// Stripes of [`Inner::update_turns`].
const UPDATE_STRIPES: usize = 16;

/// The stripe of a record key.
fn update_stripe(key: &str) -> usize {
    use std::hash::{DefaultHasher, Hash as _, Hasher as _};
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    (hasher.finish() % UPDATE_STRIPES as u64) as usize
}

/// The wait before an update's `attempt`-th try: random (so that writers who collided
/// do not collide again) below a bound that doubles from 100 µs up to 6.4 ms.
fn contention_backoff(attempt: u32) -> Duration {
    let bound_us = 100u64 << attempt.min(6);
    // The clock's nanoseconds are jitter enough; nothing depends on their quality.
    let jitter = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| u64::from(since.subsec_nanos()));
    Duration::from_micros(jitter % bound_us)
}

/// How long writes stay suspended after one found the disk (or Redis' memory) full.
pub const WRITE_SUSPENSION: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreConfig {
    /// Bound on the total length of all blobs on disk (the embedded tier); least recently
    /// used blobs are evicted to stay under it. The index file is not counted. Redis
    /// bounds itself (`maxmemory`).
    pub max_bytes: u64,
    /// Bound on the blob bytes held in the local (in-memory) tier.
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

/// Where a store keeps what it holds beyond its local tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// The embedded tier in this directory: one process per directory.
    Embedded(PathBuf),
    /// Redis, shared by a fleet; `budget` bounds connecting and every answer.
    Shared {
        target: RedisTarget,
        budget: Duration,
    },
}

impl StoreLocation {
    /// Where a `store` setting points: Redis when it names a target, else the embedded
    /// store in `dir`.
    pub fn from_setting(
        store: Option<&str>,
        dir: PathBuf,
        budget: Duration,
    ) -> Result<StoreLocation, TargetError> {
        Ok(match store {
            Some(target) => StoreLocation::Shared {
                target: target.parse()?,
                budget,
            },
            None => StoreLocation::Embedded(dir),
        })
    }
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Embedded(dir) => write!(f, "{}", dir.display()),
            StoreLocation::Shared { target, .. } => write!(f, "{target}"),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Total length of the blobs on disk (embedded tier; 0 on Redis, which counts its
    /// own memory).
    pub disk_bytes: u64,
    /// Blobs on disk (embedded tier; 0 on Redis).
    pub blobs: u64,
    /// Records (embedded tier; 0 on Redis).
    pub records: u64,
    /// Blob bytes held in the local (in-memory) tier.
    pub memory_bytes: u64,
    /// Blob lookups since start the local tier answered.
    pub memory_hits: u64,
    /// Blob lookups since start the local tier could not answer (the `_in_memory` ones
    /// included, whose caller may then ask the durable tier).
    pub memory_misses: u64,
    /// Large blobs of this process with a file beside them, sent without a copy
    /// ([`sendable`]): held by a local tier, or by a response still sending one.
    pub sendable_files: u64,
}

/// A handle to an open store; clones share it.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    config: StoreConfig,
    local: Arc<LocalTier>,
    durable: Box<dyn Durable>,
    /// Updates of records whose keys fall in one stripe take turns within this
    /// process, so its own threads queue instead of failing each other's
    /// compare-and-set; only other instances' writes make an update try again.
    update_turns: [Mutex<()>; UPDATE_STRIPES],
    /// Writes made through this handle and its clones: see [`Store::changes`].
    changes: Arc<AtomicU64>,
    /// Where large blobs of the local tier are kept in unnamed files ([`sendable`]):
    /// the embedded tier's directory; none on Redis, whose instances may have no disk.
    files_dir: Option<PathBuf>,
}

impl Store {
    /// Opens the embedded store in `dir`; see [`Store::open_at`].
    pub fn open(dir: &Path, config: StoreConfig) -> Result<Store, StoreError> {
        Store::open_at(&StoreLocation::Embedded(dir.to_owned()), config, None)
    }

    /// Opens the store at `location`.
    ///
    /// The embedded tier is created if needed and recovered from a crash: temp files are
    /// deleted, index rows whose blob file is missing or of the wrong length dropped (with
    /// what references them), blob files the index does not know deleted. An index that
    /// cannot be read is [`StoreError::Corrupt`]; it is left untouched.
    ///
    /// The Redis tier connects when first used: a Redis that is down at start-up gives a
    /// store that serves without it until it is up. `observer` hears each change of its
    /// state.
    pub fn open_at(
        location: &StoreLocation,
        config: StoreConfig,
        observer: Option<StateObserver>,
    ) -> Result<Store, StoreError> {
        let local = Arc::new(LocalTier::new(config.memory_bytes));
        let durable: Box<dyn Durable> = match location {
            StoreLocation::Embedded(dir) => {
                Box::new(Embedded::open(dir, config.max_bytes, local.clone())?)
            }
            #[cfg(feature = "redis")]
            StoreLocation::Shared { target, budget } => Box::new(Shared::open(
                target.clone(),
                *budget,
                config.max_object_bytes,
                local.clone(),
                observer,
            )?),
            #[cfg(not(feature = "redis"))]
            StoreLocation::Shared { target, .. } => {
                drop(observer);
                return Err(StoreError::Shared {
                    target: target.to_string(),
                    detail: "this build of wirefold has no Redis support (cargo feature `redis`)"
                        .to_owned(),
                });
            }
        };
        Ok(Store {
            inner: Arc::new(Inner {
                config,
                local,
                durable,
                update_turns: std::array::from_fn(|_| Mutex::new(())),
                changes: Arc::default(),
                files_dir: match location {
                    StoreLocation::Embedded(dir) => Some(dir.clone()),
                    StoreLocation::Shared { .. } => None,
                },
            }),
        })
    }

    /// The Redis tier's state, when the store is on Redis.
    pub fn shared_state(&self) -> Option<SharedState> {
        self.inner.durable.shared_state()
    }

    /// How many writes this process has made to the store (stored, replaced, removed,
    /// evicted to make room, a damaged blob discarded when read; failed ones too,
    /// which may have evicted), counted once
    /// each has taken effect: what a caller keeping something made from the store's
    /// content compares to learn that nothing changed since (the prepared responses).
    /// Another instance's writes to a shared store are not counted.
    pub fn changes(&self) -> u64 {
        self.inner.changes.load(Ordering::Acquire)
    }

    /// A copy of `data` with a file beside it for `sendfile` ([`sendable`]), when it is
    /// large and the embedded tier has a directory for one.
    fn filed(&self, data: &[u8]) -> Option<Bytes> {
        sendable::filed(self.inner.files_dir.as_deref(), data)
    }

    /// Keeps what was just written in the local tier, unless it is held there already.
    fn keep_written(&self, hash: &Hash, data: &[u8]) {
        if self.inner.local.fits(data.len()) && !self.inner.local.holds(hash) {
            let held = self
                .filed(data)
                .unwrap_or_else(|| Bytes::copy_from_slice(data));
            self.inner.local.keep(hash, &held);
        }
    }

    /// Counts a write that has taken effect (or failed) and hands back its result.
    fn changed<T>(&self, result: T) -> T {
        self.inner.changes.fetch_add(1, Ordering::AcqRel);
        result
    }

    /// Stores `data` and returns its hash; storing the same bytes again is a no-op.
    pub fn put_blob(&self, data: &[u8]) -> Result<Hash, StoreError> {
        self.check_size(data.len() as u64)?;
        let hash = Hash::of(data);
        let stored = self.inner.durable.put_blob(hash, data);
        if stored.is_ok() {
            // What was just stored is about to be asked for: keep it hot rather than read it back.
            self.keep_written(&hash, data);
        }
        self.changed(stored.map(|()| hash))
    }

    /// A writer that stores a blob streamed in pieces: on disk without holding it in
    /// memory; on Redis gathered in memory up to the object limit.
    pub fn blob_writer(&self) -> Result<BlobWriter, StoreError> {
        Ok(BlobWriter {
            partial: self.inner.durable.blob_writer(self.object_limit())?,
            changes: self.inner.changes.clone(),
        })
    }

    /// The blob's bytes, from the local tier or the durable one. A blob that fails
    /// verification is logged, removed with everything referencing it, and reported as
    /// absent.
    pub fn get_blob(&self, hash: &Hash) -> Result<Option<Bytes>, StoreError> {
        if let Some(data) = self.get_blob_in_memory(hash) {
            return Ok(Some(data));
        }
        let data = match self.inner.durable.get_blob(hash)? {
            BlobRead::Found(data) => data,
            BlobRead::Absent => return Ok(None),
            BlobRead::Discarded => return self.changed(Ok(None)),
        };
        if !self.inner.local.fits(data.len()) {
            return Ok(Some(data));
        }
        let data = self.filed(&data).unwrap_or(data);
        self.inner.local.keep(hash, &data);
        Ok(Some(data))
    }

    /// Whether the durable tier holds the blob (a question to Redis when on Redis; false
    /// when it cannot be asked).
    pub fn has_blob(&self, hash: &Hash) -> bool {
        self.inner.durable.has_blob(hash).unwrap_or(false)
    }

    /// Stores a record under `key`, replacing any previous one. `refs` are the blobs it points
    /// at; they must be in the store. The embedded tier removes the record when any of them
    /// is evicted; on Redis a record may outlive its blobs, which then read as absent.
    pub fn put_record(&self, key: &str, value: &[u8], refs: &[Hash]) -> Result<(), StoreError> {
        self.check_size(value.len() as u64)?;
        let written = self
            .inner
            .durable
            .put_record(key, value, refs, Precondition::None);
        self.changed(written.map(drop))
    }

    /// Stores a record under `key` that references no blob and that nothing kept
    /// elsewhere is made from (a network's link estimate, which whatever chooses by it
    /// reads again), without counting it among [`Store::changes`]. The embedded
    /// tier's budget weighs blobs only, so the write evicts nothing; Redis's own
    /// evictions are never counted.
    pub fn put_unwatched_record(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.check_size(value.len() as u64)?;
        self.inner
            .durable
            .put_record(key, value, &[], Precondition::None)
            .map(drop)
    }

    /// Reads the record under `key`, gives it to `change`, and stores what `change`
    /// returns (the new value and the blobs it references, as [`Store::put_record`])
    /// only if the record still holds what was read: a read-modify-write that no
    /// concurrent writer (a thread of this process, or another instance on the same
    /// Redis) can undo. When another instance got in between, `change` runs again on
    /// what that one stored, up to [`UPDATE_ATTEMPTS`] times ([`StoreError::Contended`]
    /// then). `change` returning `None` leaves the record as it is.
    pub fn update_record(
        &self,
        key: &str,
        mut change: impl FnMut(Option<&[u8]>) -> Option<(Vec<u8>, Vec<Hash>)>,
    ) -> Result<(), StoreError> {
        let _turn = lock(&self.inner.update_turns[update_stripe(key)]);
        for attempt in 0..UPDATE_ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(contention_backoff(attempt));
            }
            let current = self.get_record(key)?;
            let Some((value, refs)) = change(current.as_deref()) else {
                return Ok(());
            };
            self.check_size(value.len() as u64)?;
            let precondition = Precondition::Holds(current.as_deref());
            let written = self.changed(self.inner.durable.put_record(
                key,
                &value,
                &refs,
                precondition,
            ))?;
            if written != RecordWrite::Conflict {
                return Ok(());
            }
        }
        Err(StoreError::Contended {
            key: key.to_owned(),
            attempts: UPDATE_ATTEMPTS,
        })
    }

    pub fn get_record(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.durable.get_record(key)
    }

    /// Records whose keys start with `prefix`, in key order, at most `limit` of them. On
    /// Redis, records are listed by group (a key up to its first `/`), so `prefix` must
    /// reach that `/` ([`StoreError::PrefixTooShort`] otherwise), and a group lists its
    /// `MAX_GROUP_KEYS` (10,000) most recently written keys.
    pub fn records_with_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.inner.durable.records_with_prefix(prefix, limit)
    }

    /// Removes the record under `key`, if any. The blobs it referenced stay until evicted.
    pub fn remove_record(&self, key: &str) -> Result<(), StoreError> {
        self.changed(self.inner.durable.remove_record(key))
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
        let hash = Hash::of(encoded);
        let stored = self
            .inner
            .durable
            .put_encoding(source, variant, hash, encoded);
        if stored.is_ok() {
            self.inner.local.remember_encoding(source, variant, hash);
            self.keep_written(&hash, encoded);
        }
        self.changed(stored)
    }

    pub fn get_encoding(&self, source: &Hash, variant: &str) -> Result<Option<Bytes>, StoreError> {
        let Some(encoded) = self.inner.durable.get_encoding(source, variant)? else {
            return Ok(None);
        };
        self.inner.local.remember_encoding(source, variant, encoded);
        self.get_blob(&encoded)
    }

    /// The blob's bytes if they are in the local tier: no disk, index or network access,
    /// so it is cheap enough for an async reactor thread. `None` says nothing about the
    /// durable tier.
    pub fn get_blob_in_memory(&self, hash: &Hash) -> Option<Bytes> {
        let data = self.inner.local.blob(hash)?;
        self.inner.durable.touch(&[*hash]);
        Some(data)
    }

    /// The encoding's bytes if both its name and its bytes are in the local tier; see
    /// [`Store::get_blob_in_memory`].
    pub fn get_encoding_in_memory(&self, source: &Hash, variant: &str) -> Option<Bytes> {
        let encoded = self.inner.local.encoding_name(source, variant)?;
        let data = self.inner.local.blob(&encoded)?;
        self.inner.durable.touch(&[*source, encoded]);
        Some(data)
    }

    pub fn stats(&self) -> StoreStats {
        let durable = self.inner.durable.stats();
        let (memory_hits, memory_misses) = self.inner.local.lookups();
        StoreStats {
            disk_bytes: durable.bytes,
            blobs: durable.blobs,
            records: durable.records,
            memory_bytes: self.inner.local.weight(),
            memory_hits,
            memory_misses,
            sendable_files: sendable::files_held() as u64,
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

/// Streams a blob into the store: on disk, bytes go to a temp file while being hashed,
/// and [`BlobWriter::finish`] moves it into place; dropping an unfinished writer deletes
/// the temp file. After a failed write the writer is unusable; finish reports the
/// failure again.
pub struct BlobWriter {
    partial: Box<dyn PartialBlob>,
    /// The store's [`Store::changes`].
    changes: Arc<AtomicU64>,
}

impl BlobWriter {
    /// Appends `data`. Fails with [`StoreError::TooLarge`] once the blob would exceed the
    /// store's object limit.
    pub fn write(&mut self, data: &[u8]) -> Result<(), StoreError> {
        self.partial.write(data)
    }

    /// Makes the blob durable and stores it; returns its hash.
    pub fn finish(self) -> Result<Hash, StoreError> {
        let stored = self.partial.finish();
        self.changes.fetch_add(1, Ordering::AcqRel);
        stored
    }
}
