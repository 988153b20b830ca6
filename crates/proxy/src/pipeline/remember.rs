//! Stage 3, remember: records what fetch found worth keeping — a cache entry and its
//! body, or a file version's content — then releases coalesced waiters.
//!
//! A failed write (disk full, I/O error) is logged and counted; the response is
//! served all the same.

use bytes::Bytes;

use super::fetch::Fetched;
use super::{Instance, Pipeline};
use crate::cache::{CacheEntry, StoredResponse};

/// What to write.
pub enum StorePlan {
    /// A cache entry for `key`; `body` is `None` when only the head changed (a 304).
    CacheEntry { key: String, response: StoredResponse, body: Option<Bytes> },
    /// Content to keep by its hash (file versions, future delta bases).
    Body { bytes: Bytes },
}

pub async fn remember(p: &Pipeline, fetched: Fetched<'_>) -> Instance {
    let Fetched { instance, store_plan, leader } = fetched;
    if let (Some(plan), Some(store)) = (store_plan, p.store.clone()) {
        let written = tokio::task::spawn_blocking(move || -> Result<(), store::StoreError> {
            match plan {
                StorePlan::Body { bytes } => store.put_blob(&bytes).map(|_| ()),
                StorePlan::CacheEntry { key, response, body } => {
                    if let Some(bytes) = body {
                        store.put_blob(&bytes)?;
                    }
                    let mut entry = store
                        .get_record(&key)?
                        .and_then(|r| CacheEntry::decode(&r))
                        .unwrap_or_default();
                    entry.upsert(response);
                    store.put_record(&key, &entry.encode(), &entry.bodies())
                }
            }
        })
        .await
        .expect("store writes do not panic");
        match written {
            Ok(()) => {}
            // Suspended after a full disk (logged once by the store), or a body evicted
            // between writes: not cached this time, nothing to report per request.
            Err(store::StoreError::WritesSuspended | store::StoreError::MissingBlob(_)) => {
                p.metrics.store_write_errors.inc();
            }
            Err(e) => {
                p.metrics.store_write_errors.inc();
                tracing::warn!(error = %e, "not cached: store write failed; serving anyway");
            }
        }
    }
    drop(leader);
    instance
}

/// Drops the cache entry of a target after a successful unsafe request (RFC 9111 §4.4).
pub async fn invalidate(p: &Pipeline, key: &str) {
    let Some(store) = p.store.clone() else { return };
    let key = key.to_string();
    let result = tokio::task::spawn_blocking(move || store.remove_record(&key)).await;
    if let Ok(Err(e)) = result {
        tracing::warn!(error = %e, "cache invalidation failed");
    }
}
