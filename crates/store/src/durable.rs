//! The seam between the [`Store`](crate::Store) and where it keeps things durably: the
//! embedded tier (redb plus blob files, `embedded.rs`) or Redis (`shared.rs`). The
//! store's local tier sits in front of either; callers only ever see `Store`.

use bytes::Bytes;

use crate::{Hash, SharedState, StoreError};

/// What reading a blob found.
pub(crate) enum BlobRead {
    Found(Bytes),
    Absent,
    /// It failed verification and was removed: a write the store counts.
    Discarded,
}

/// What a durable tier holds: blobs by content hash, records by key, and encodings as
/// (source blob, variant) → encoded blob. Sizes are checked by the store before a call.
pub(crate) trait Durable: Send + Sync {
    /// Stores `data`, whose hash is `hash`; storing the same bytes again is a no-op.
    fn put_blob(&self, hash: Hash, data: &[u8]) -> Result<(), StoreError>;

    /// A writer that stores a blob streamed in pieces; `limit` bounds its length.
    fn blob_writer(&self, limit: u64) -> Result<Box<dyn PartialBlob>, StoreError>;

    /// The blob's bytes, verified against `hash`. A blob that fails verification is
    /// removed (with whatever the tier removes along with it): [`BlobRead::Discarded`].
    fn get_blob(&self, hash: &Hash) -> Result<BlobRead, StoreError>;

    fn has_blob(&self, hash: &Hash) -> Result<bool, StoreError>;

    /// Tells the tier that the local tier just answered for these blobs, for a tier
    /// that orders its eviction by use. Never blocks on I/O.
    fn touch(&self, hashes: &[Hash]);

    /// Stores a record under `key` if the record it replaces meets `precondition`, as one
    /// atomic step; `refs` are blobs it points at, which must be stored.
    fn put_record(
        &self,
        key: &str,
        value: &[u8],
        refs: &[Hash],
        precondition: Precondition<'_>,
    ) -> Result<RecordWrite, StoreError>;

    fn get_record(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError>;

    fn records_with_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError>;

    fn remove_record(&self, key: &str) -> Result<(), StoreError>;

    /// Stores `encoded` (whose hash is `hash`) as the `variant` encoding of `source`,
    /// which must be stored.
    fn put_encoding(
        &self,
        source: &Hash,
        variant: &str,
        hash: Hash,
        encoded: &[u8],
    ) -> Result<(), StoreError>;

    /// The hash of the `variant` encoding of `source`, if one is stored.
    fn get_encoding(&self, source: &Hash, variant: &str) -> Result<Option<Hash>, StoreError>;

    fn stats(&self) -> DurableStats;

    /// The state of a tier shared with other instances (Redis); `None` for one that is
    /// this process's own.
    fn shared_state(&self) -> Option<SharedState> {
        None
    }
}

/// What a durable tier can count without asking anyone else.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DurableStats {
    pub(crate) bytes: u64,
    pub(crate) blobs: u64,
    pub(crate) records: u64,
}

/// A blob being written in pieces; see [`BlobWriter`](crate::BlobWriter).
pub(crate) trait PartialBlob: Send {
    fn write(&mut self, data: &[u8]) -> Result<(), StoreError>;
    fn finish(self: Box<Self>) -> Result<Hash, StoreError>;
}

/// What a record write requires of the record it replaces: the compare in
/// compare-and-set, so that read-modify-write cycles of concurrent writers (threads of
/// one instance, or instances of a fleet) never silently drop each other's changes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Precondition<'a> {
    /// Nothing: the write replaces whatever is there.
    None,
    /// The record holds exactly this value (`None`: there is no record).
    Holds(Option<&'a [u8]>),
}

/// How a record write went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordWrite {
    /// The key was new.
    Added,
    /// An earlier record was replaced.
    Replaced,
    /// The precondition did not hold; nothing was written.
    Conflict,
}
