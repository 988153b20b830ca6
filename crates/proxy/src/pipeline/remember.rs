//! Stage 3, remember: records what fetch found worth keeping — a cache entry and its
//! body, or a file version's content — then releases coalesced waiters.
//!
//! A failed write (disk full, I/O error) is logged and counted; the response is
//! served all the same.

use std::sync::Arc;

use bytes::Bytes;

use crate::cache::{resource_of, Cache, CacheEntry, LeaderGuard, StoredResponse};
use crate::metrics::Metrics;
use crate::model::Instance;
use delta::{history, now_unix, record_version, DeltaEngine};

/// What fetch hands to `remember`.
pub struct Fetched<'a> {
    pub instance: Instance,
    pub store_plan: Option<StorePlan>,
    /// Held by the request that fetched for coalesced waiters until `remember` is done.
    pub leader: Option<LeaderGuard<'a>>,
}

impl Fetched<'_> {
    pub fn plain(instance: Instance) -> Self {
        Fetched {
            instance,
            store_plan: None,
            leader: None,
        }
    }
}

impl Fetched<'_> {
    pub fn plain_file((instance, store_plan): (Instance, Option<StorePlan>)) -> Self {
        Fetched {
            instance,
            store_plan,
            leader: None,
        }
    }
}

/// What to write.
pub enum StorePlan {
    /// A cache entry for `key`; `body` is `None` when only the head changed (a 304).
    /// `is_version`: a text body the same for everyone, so it also joins the
    /// resource's history (a delta base, dictionary and training sample for other
    /// clients).
    CacheEntry {
        key: String,
        response: StoredResponse,
        body: Option<Bytes>,
        is_version: bool,
    },
    /// A file version's content, kept by its hash; a version (delta base) of
    /// `resource` when that is given (text files).
    Body {
        bytes: Bytes,
        resource: Option<String>,
    },
}

/// Runs after `fetch`, before anything is sent: writes what `fetch` planned to keep
/// (a cache entry and its body; a text version joins its resource's history for
/// deltas), keeps a written entry hot, then releases coalesced waiters. May change
/// only the store. Returns the instance unchanged; a failed write (disk full, I/O
/// error) is logged and counted and the response is served all the same.
pub async fn remember(
    cache: &Arc<Cache>,
    deltas: &DeltaEngine,
    metrics: &Metrics,
    fetched: Fetched<'_>,
) -> Instance {
    let Fetched {
        instance,
        store_plan,
        leader,
    } = fetched;
    if let (Some(plan), Some(store)) = (store_plan, cache.store.clone()) {
        let delta = deltas.config().clone();
        // Read before the write: see `HotEntries::put_written`.
        let seen = match &plan {
            StorePlan::CacheEntry { key, .. } => cache.hot.generation(key),
            StorePlan::Body { .. } => 0,
        };
        // A cache entry written is kept hot by the same blocking work: the requester
        // may go away meanwhile (its future dropped), and the store's entry and the
        // hot one must not part.
        let cache = Arc::clone(cache);
        let written = delta::blocking::run(move || -> Result<(), store::StoreError> {
            match plan {
                StorePlan::Body {
                    bytes,
                    resource: None,
                } => store.put_blob(&bytes).map(drop),
                StorePlan::Body {
                    bytes,
                    resource: Some(resource),
                } => {
                    let hash = store.put_blob(&bytes)?;
                    let etag = Some(format!("\"{}\"", crate::model::content_etag(&hash)));
                    let version = history::Version {
                        hash: hash.to_hex(),
                        etag,
                        time: now_unix(),
                        size: bytes.len() as u64,
                    };
                    record_version(&store, &delta, &resource, version).map(drop)
                }
                StorePlan::CacheEntry {
                    key,
                    response,
                    body,
                    is_version,
                } => {
                    if let Some(bytes) = &body {
                        store.put_blob(bytes)?;
                    }
                    let headers = response.headers();
                    let new_version = body.as_ref().filter(|_| is_version).and_then(|bytes| {
                        let etag = headers
                            .get(http::header::ETAG)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_string);
                        Some(history::Version {
                            hash: response.body_hash()?.to_hex(),
                            etag,
                            time: now_unix(),
                            size: bytes.len() as u64,
                        })
                    });
                    // Other variants of the entry may be written meanwhile (by
                    // other requests, or other instances on Redis): this one joins
                    // whatever is stored when it lands.
                    let mut written = CacheEntry::default();
                    store.update_record(&key, |stored| {
                        written = stored.and_then(CacheEntry::decode).unwrap_or_default();
                        written.upsert(response.clone());
                        Some((written.encode(), written.bodies()))
                    })?;
                    if let Some(version) = new_version {
                        record_version(&store, &delta, resource_of(&key), version)?;
                    }
                    cache.hot.put_written(&key, &written, seen);
                    Ok(())
                }
            }
        })
        .await;
        match written {
            Ok(()) => {}
            // Suspended after a full disk or a shared store that stopped answering
            // (logged once by the store), or a body evicted between writes: not cached
            // this time, nothing to report per request.
            Err(e) if e.is_quiet() => {
                metrics.store_write_errors.inc();
            }
            Err(e) => {
                metrics.store_write_errors.inc();
                tracing::warn!(error = %e, "not cached: store write failed; serving anyway");
            }
        }
    }
    if let Some(leader) = leader {
        leader.finish();
    }
    instance
}
