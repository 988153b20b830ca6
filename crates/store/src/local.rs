//! The local tier: blobs and encoding names held in this process's memory, in front of
//! whichever durable tier the store uses (the embedded disk store or Redis).
//!
//! Everything here is addressed by content: a blob is the bytes its hash names, and an
//! encoding name maps a (source, variant) to the hash of bytes that decode to the source.
//! An entry may outlive its copy in the durable tier (evicted there, or replaced by an
//! equivalent encoding from another instance), but it is never wrong, so nothing this
//! tier answers can change what a client receives.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;

use crate::lru::Lru;
use crate::{lock, Hash};

pub(crate) struct LocalTier {
    /// Bound on the blob bytes held.
    limit: u64,
    state: Mutex<LocalState>,
    /// Blob lookups answered here, and those that went on to the durable tier.
    hits: AtomicU64,
    misses: AtomicU64,
}

struct LocalState {
    blobs: Lru<Bytes>,
    /// Encodings read or written since start, so a hot encoding is found without asking
    /// the durable tier: source → (variant, encoded blob).
    encoding_names: HashMap<Hash, Vec<(String, Hash)>>,
}

impl LocalTier {
    pub(crate) fn new(limit: u64) -> LocalTier {
        LocalTier {
            limit,
            state: Mutex::new(LocalState {
                blobs: Lru::new(),
                encoding_names: HashMap::new(),
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The blob, if held here; counted as a hit or a miss.
    pub(crate) fn blob(&self, hash: &Hash) -> Option<Bytes> {
        let found = self.state().blobs.get(hash).cloned();
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Blob lookups since start: (answered here, not).
    pub(crate) fn lookups(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// Whether a blob of `len` bytes may be kept.
    pub(crate) fn fits(&self, len: usize) -> bool {
        len as u64 <= self.limit
    }

    /// Whether the blob is held here (not counted as a lookup).
    pub(crate) fn holds(&self, hash: &Hash) -> bool {
        self.state().blobs.contains(hash)
    }

    /// Keeps a blob just read or written, if it fits; the least recently used go first.
    pub(crate) fn keep(&self, hash: &Hash, data: &Bytes) {
        if !self.fits(data.len()) {
            return;
        }
        let mut state = self.state();
        state.blobs.insert(*hash, data.clone(), data.len() as u64);
        while state.blobs.weight() > self.limit {
            state.blobs.pop_oldest();
        }
    }

    pub(crate) fn encoding_name(&self, source: &Hash, variant: &str) -> Option<Hash> {
        self.state()
            .encoding_names
            .get(source)?
            .iter()
            .find(|(v, _)| v == variant)
            .map(|(_, encoded)| *encoded)
    }

    pub(crate) fn remember_encoding(&self, source: &Hash, variant: &str, encoded: Hash) {
        let mut state = self.state();
        let names = state.encoding_names.entry(*source).or_default();
        match names.iter_mut().find(|(v, _)| v == variant) {
            Some(entry) => entry.1 = encoded,
            None => names.push((variant.to_string(), encoded)),
        }
    }

    /// Drops blobs the durable tier removed (evicted, or found damaged), and every
    /// encoding name whose source or encoded form they were.
    pub(crate) fn forget(&self, removed: &[Hash]) {
        if removed.is_empty() {
            return;
        }
        let mut state = self.state();
        for hash in removed {
            state.blobs.remove(hash);
            state.encoding_names.remove(hash);
        }
        let removed: HashSet<&Hash> = removed.iter().collect();
        state
            .encoding_names
            .values_mut()
            .for_each(|names| names.retain(|(_, h)| !removed.contains(h)));
    }

    pub(crate) fn weight(&self) -> u64 {
        self.state().blobs.weight()
    }

    fn state(&self) -> MutexGuard<'_, LocalState> {
        lock(&self.state)
    }
}
