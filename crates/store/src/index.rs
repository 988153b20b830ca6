//! The index: which blobs exist, named records, and encodings, kept in redb.
//!
//! Only this module knows redb; the `Store` speaks to it in blob, record and encoding terms so
//! another backend (Redis, for a fleet) can stand in its place.
//!
//! Invariant kept by every transaction: each record's and each encoding's referenced blobs are
//! rows of `BLOBS`, and the reverse tables list exactly those references. Removing a blob
//! therefore finds, and removes, everything that would dangle.

use std::path::{Path, PathBuf};
use std::sync::{PoisonError, RwLock};

use redb::{
    Builder, Database, DatabaseError, MultimapTable, MultimapTableDefinition, ReadTransaction,
    ReadableDatabase, ReadableMultimapTable, ReadableTable, ReadableTableMetadata, Table,
    TableDefinition, WriteTransaction,
};

use crate::durable::{Precondition, RecordWrite};
use crate::{Hash, StoreError};

/// Memory for redb's page cache. Its default (1 GiB) let the index's pages pile up in
/// memory as the index grew (65 MB for 100,000 blobs in the soak); the pages it misses
/// are in the kernel's page cache, a read away.
const INDEX_CACHE_BYTES: usize = 16 << 20;

/// Blob → (length in bytes, insertion sequence). The sequence orders eviction after a restart.
const BLOBS: TableDefinition<[u8; 32], (u64, u64)> = TableDefinition::new("blobs");
/// Record key → (the 32-byte hashes of the blobs it references, concatenated; value).
const RECORDS: TableDefinition<&str, (&[u8], &[u8])> = TableDefinition::new("records");
/// (source blob, variant) → encoded blob.
const ENCODINGS: TableDefinition<([u8; 32], &str), [u8; 32]> = TableDefinition::new("encodings");
/// Blob → keys of the records referencing it.
const RECORD_REFS: MultimapTableDefinition<[u8; 32], &str> =
    MultimapTableDefinition::new("record_refs");
/// Blob → the encodings it is the source or the encoded form of.
const ENCODING_REFS: MultimapTableDefinition<[u8; 32], ([u8; 32], &str)> =
    MultimapTableDefinition::new("encoding_refs");

pub(crate) struct BlobRow {
    pub(crate) hash: Hash,
    pub(crate) len: u64,
    pub(crate) seq: u64,
}

/// What removing blobs took with it.
pub(crate) struct Removal {
    pub(crate) blobs: Vec<Hash>,
    pub(crate) records: u64,
}

pub(crate) struct Index {
    path: PathBuf,
    /// None once an I/O failure closed the database: redb refuses every operation after a
    /// failed write until it is reopened, which the next operation does.
    db: RwLock<Option<Database>>,
}

/// What a failed open of the index means. Only a file redb could read and found
/// wrong is corrupt: one the process may not write (a read-only mount, a data
/// directory owned by someone else) is reported as such, since moving it aside, the
/// fix for a corrupt index, would not help and would lose what it holds.
fn open_error(path: &Path, exists: bool, err: DatabaseError) -> StoreError {
    match err {
        DatabaseError::DatabaseAlreadyOpen => StoreError::InUse {
            path: path.to_owned(),
        },
        DatabaseError::Storage(redb::StorageError::Io(source)) if is_read_only(&source) => {
            StoreError::ReadOnly {
                path: path.to_owned(),
                source,
            }
        }
        DatabaseError::Storage(redb::StorageError::Io(source)) if !exists => {
            StoreError::io(path, source)
        }
        other => StoreError::Corrupt {
            path: path.to_owned(),
            detail: other.to_string(),
        },
    }
}

/// Permission denied (EACCES, EPERM) or a read-only file system (EROFS).
fn is_read_only(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
    )
}

impl Index {
    /// Opens the index at `path`, creating it when the file does not exist or is empty (a
    /// crash during creation, holding nothing). An existing file that fails redb's integrity
    /// check is reported as corrupt and left as it is.
    pub(crate) fn open(path: &Path) -> Result<Index, StoreError> {
        let exists = match std::fs::metadata(path) {
            Ok(meta) => meta.len() > 0,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => false,
            Err(err) => return Err(StoreError::io(path, err)),
        };
        let mut builder = Builder::new();
        builder.set_cache_size(INDEX_CACHE_BYTES);
        let opened = if exists {
            builder.set_check_integrity_on_open(true).open(path)
        } else {
            builder.create(path)
        };
        let db = opened.map_err(|err| open_error(path, exists, err))?;
        let index = Index {
            path: path.to_owned(),
            db: RwLock::new(Some(db)),
        };
        // Creating the tables up front lets readers assume they exist; a table of another
        // type means the file is not ours.
        index
            .write(|tables| Ok(tables.blobs.len()?))
            .map_err(|err| match err {
                StoreError::Index(detail) => StoreError::Corrupt {
                    path: path.to_owned(),
                    detail,
                },
                other => other,
            })?;
        Ok(index)
    }

    /// Every blob row, in insertion order.
    pub(crate) fn blobs(&self) -> Result<Vec<BlobRow>, StoreError> {
        let mut rows = self.read(|txn| {
            let blobs = txn.open_table(BLOBS)?;
            let mut rows = Vec::new();
            for item in blobs.iter()? {
                let (hash, value) = item?;
                let (len, seq) = value.value();
                rows.push(BlobRow {
                    hash: Hash(hash.value()),
                    len,
                    seq,
                });
            }
            Ok(rows)
        })?;
        rows.sort_by_key(|row| row.seq);
        Ok(rows)
    }

    pub(crate) fn record_count(&self) -> Result<u64, StoreError> {
        self.read(|txn| Ok(txn.open_table(RECORDS)?.len()?))
    }

    pub(crate) fn insert_blob(&self, row: &BlobRow) -> Result<(), StoreError> {
        self.write(|tables| tables.insert_blob(row))
    }

    /// Records `encoded` as the `variant` encoding of `source`, adding its blob row when new.
    pub(crate) fn insert_encoding(
        &self,
        source: &Hash,
        variant: &str,
        encoded: &Hash,
        new_blob: Option<&BlobRow>,
    ) -> Result<(), StoreError> {
        self.write(|tables| {
            if let Some(row) = new_blob {
                tables.insert_blob(row)?;
            }
            tables.insert_encoding(source, variant, encoded)
        })
    }

    pub(crate) fn get_encoding(
        &self,
        source: &Hash,
        variant: &str,
    ) -> Result<Option<Hash>, StoreError> {
        self.read(|txn| {
            let encodings = txn.open_table(ENCODINGS)?;
            Ok(encodings
                .get((source.0, variant))?
                .map(|guard| Hash(guard.value())))
        })
    }

    /// Stores a record if the one it replaces meets `precondition`, in one transaction.
    pub(crate) fn put_record(
        &self,
        key: &str,
        value: &[u8],
        refs: &[Hash],
        precondition: Precondition<'_>,
    ) -> Result<RecordWrite, StoreError> {
        self.write(|tables| {
            if let Precondition::Holds(expected) = precondition {
                let current = tables.records.get(key)?;
                if current.as_ref().map(|guard| guard.value().1) != expected {
                    return Ok(RecordWrite::Conflict);
                }
            }
            let replaced = tables.remove_record(key)?;
            let mut refs = refs.to_vec();
            refs.sort();
            refs.dedup();
            let packed: Vec<u8> = refs.iter().flat_map(|hash| hash.0).collect();
            tables.records.insert(key, (packed.as_slice(), value))?;
            for hash in &refs {
                tables.record_refs.insert(hash.0, key)?;
            }
            Ok(if replaced {
                RecordWrite::Replaced
            } else {
                RecordWrite::Added
            })
        })
    }

    pub(crate) fn get_record(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.read(|txn| {
            let records = txn.open_table(RECORDS)?;
            Ok(records.get(key)?.map(|guard| guard.value().1.to_vec()))
        })
    }

    /// Records whose keys start with `prefix`, in key order, at most `limit`.
    pub(crate) fn records_with_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.read(|txn| {
            let records = txn.open_table(RECORDS)?;
            let mut found = Vec::new();
            for row in records.range(prefix..)? {
                let (key, value) = row?;
                if !key.value().starts_with(prefix) || found.len() == limit {
                    break;
                }
                found.push((key.value().to_string(), value.value().1.to_vec()));
            }
            Ok(found)
        })
    }

    /// Removes a record; true when it existed.
    pub(crate) fn remove_record(&self, key: &str) -> Result<bool, StoreError> {
        self.write(|tables| tables.remove_record(key))
    }

    /// Removes blob rows with every record and encoding referencing them, and the encoded
    /// blobs of removed sources that nothing else references.
    pub(crate) fn remove_blobs(&self, hashes: &[Hash]) -> Result<Removal, StoreError> {
        self.write(|tables| tables.remove_blobs(hashes.to_vec()))
    }

    fn read<T>(
        &self,
        op: impl FnOnce(&ReadTransaction) -> Result<T, redb::Error>,
    ) -> Result<T, StoreError> {
        self.with_db(|db| op(&db.begin_read()?))
    }

    fn write<T>(
        &self,
        op: impl FnOnce(&mut Tables<'_>) -> Result<T, redb::Error>,
    ) -> Result<T, StoreError> {
        self.with_db(|db| {
            let txn = db.begin_write()?;
            let out = op(&mut Tables::open(&txn)?)?;
            txn.commit()?;
            Ok(out)
        })
    }

    fn with_db<T>(
        &self,
        op: impl FnOnce(&Database) -> Result<T, redb::Error>,
    ) -> Result<T, StoreError> {
        let result = self.on_database(op)?;
        result.map_err(|err| {
            if matches!(err, redb::Error::Io(_) | redb::Error::PreviousIo) {
                self.close();
            }
            match err {
                redb::Error::Io(source) => StoreError::io(&self.path, source),
                other => StoreError::Index(format!("{}: {other}", self.path.display())),
            }
        })
    }

    /// Runs `op` on the database, reopening it first if an I/O error closed it; the
    /// lock is released before returning.
    fn on_database<T>(&self, op: impl FnOnce(&Database) -> T) -> Result<T, StoreError> {
        loop {
            let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(open) = db.as_ref() {
                return Ok(op(open));
            }
            drop(db);
            let mut db = self.db.write().unwrap_or_else(PoisonError::into_inner);
            if db.is_none() {
                tracing::info!(path = %self.path.display(), "reopening store index after an I/O error");
                *db = Some(Database::open(&self.path).map_err(|err| match err {
                    DatabaseError::Storage(redb::StorageError::Io(source)) => {
                        StoreError::io(&self.path, source)
                    }
                    other => StoreError::Index(format!("{}: {other}", self.path.display())),
                })?);
            }
        }
    }

    fn close(&self) {
        tracing::warn!(path = %self.path.display(), "closing store index after an I/O error");
        *self.db.write().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// The tables of one write transaction.
struct Tables<'txn> {
    blobs: Table<'txn, [u8; 32], (u64, u64)>,
    records: Table<'txn, &'static str, (&'static [u8], &'static [u8])>,
    encodings: Table<'txn, ([u8; 32], &'static str), [u8; 32]>,
    record_refs: MultimapTable<'txn, [u8; 32], &'static str>,
    encoding_refs: MultimapTable<'txn, [u8; 32], ([u8; 32], &'static str)>,
}

impl<'txn> Tables<'txn> {
    fn open(txn: &'txn WriteTransaction) -> Result<Tables<'txn>, redb::Error> {
        Ok(Tables {
            blobs: txn.open_table(BLOBS)?,
            records: txn.open_table(RECORDS)?,
            encodings: txn.open_table(ENCODINGS)?,
            record_refs: txn.open_multimap_table(RECORD_REFS)?,
            encoding_refs: txn.open_multimap_table(ENCODING_REFS)?,
        })
    }

    fn insert_blob(&mut self, row: &BlobRow) -> Result<(), redb::Error> {
        self.blobs.insert(row.hash.0, (row.len, row.seq))?;
        Ok(())
    }

    fn insert_encoding(
        &mut self,
        source: &Hash,
        variant: &str,
        encoded: &Hash,
    ) -> Result<(), redb::Error> {
        let previous = self
            .encodings
            .insert((source.0, variant), encoded.0)?
            .map(|guard| guard.value());
        if let Some(previous) = previous.filter(|previous| previous != &source.0) {
            self.encoding_refs.remove(previous, (source.0, variant))?;
        }
        self.encoding_refs.insert(source.0, (source.0, variant))?;
        self.encoding_refs.insert(encoded.0, (source.0, variant))?;
        Ok(())
    }

    /// Removes a record and its reverse references; true when it existed.
    fn remove_record(&mut self, key: &str) -> Result<bool, redb::Error> {
        let Some(packed) = self
            .records
            .remove(key)?
            .map(|guard| guard.value().0.to_vec())
        else {
            return Ok(false);
        };
        let (hashes, _) = packed.as_chunks::<32>();
        for hash in hashes {
            self.record_refs.remove(hash, key)?;
        }
        Ok(true)
    }

    fn remove_blobs(&mut self, mut queue: Vec<Hash>) -> Result<Removal, redb::Error> {
        let mut removal = Removal {
            blobs: Vec::new(),
            records: 0,
        };
        while let Some(hash) = queue.pop() {
            if self.blobs.remove(hash.0)?.is_none() {
                continue;
            }
            removal.blobs.push(hash);

            let mut keys = Vec::new();
            for key in self.record_refs.remove_all(hash.0)? {
                keys.push(key?.value().to_owned());
            }
            for key in keys {
                if self.remove_record(&key)? {
                    removal.records += 1;
                }
            }

            let mut encodings = Vec::new();
            for encoding in self.encoding_refs.remove_all(hash.0)? {
                let encoding = encoding?;
                let (source, variant) = encoding.value();
                encodings.push((source, variant.to_owned()));
            }
            for (source, variant) in encodings {
                let Some(encoded) = self
                    .encodings
                    .remove((source, variant.as_str()))?
                    .map(|guard| guard.value())
                else {
                    continue;
                };
                let other = if source == hash.0 { encoded } else { source };
                self.encoding_refs
                    .remove(other, (source, variant.as_str()))?;
                // An encoding is worthless without its source; its blob goes too unless it is
                // also stored for another reason.
                if source == hash.0 && !self.is_referenced(encoded)? {
                    queue.push(Hash(encoded));
                }
            }
        }
        Ok(removal)
    }

    fn is_referenced(&self, hash: [u8; 32]) -> Result<bool, redb::Error> {
        Ok(self.record_refs.get(hash)?.next().is_some()
            || self.encoding_refs.get(hash)?.next().is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_failure(err: std::io::Error) -> DatabaseError {
        DatabaseError::Storage(redb::StorageError::Io(err))
    }

    #[test]
    fn a_read_only_index_is_reported_as_read_only_not_corrupt() {
        let path = Path::new("/data/store/index.redb");
        let erofs = std::io::Error::from_raw_os_error(30);
        let eacces = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        for err in [erofs, eacces] {
            let reported = open_error(path, true, io_failure(err));
            let message = reported.to_string();
            assert!(matches!(reported, StoreError::ReadOnly { .. }), "{message}");
            assert!(
                message.contains("read-only")
                    && message.contains("/data/store/index.redb")
                    && !message.contains("corrupt")
                    && !message.contains("move it aside"),
                "{message}"
            );
        }
        let other = std::io::Error::other("short read");
        assert!(matches!(
            open_error(path, true, io_failure(other)),
            StoreError::Corrupt { .. }
        ));
    }
}
