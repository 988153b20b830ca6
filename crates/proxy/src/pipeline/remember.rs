//! Stage 3, remember: records what fetch found worth keeping — a cache entry and its
//! body, or a file version's content — then releases coalesced waiters.
//!
//! A failed write (disk full, I/O error) is logged and counted; the response is
//! served all the same.

use bytes::Bytes;

use super::fetch::Fetched;
use super::{Instance, Pipeline};
use crate::cache::{resource_of, site_of, CacheEntry, StoredResponse};
use crate::config::DeltaConfig;
use crate::delta::{dictionaries, history};

/// What to write.
pub enum StorePlan {
    /// A cache entry for `key`; `body` is `None` when only the head changed (a 304).
    /// `is_version`: the body is the same for everyone, so a text body also joins
    /// the resource's history (a delta base, dictionary and training sample for
    /// other clients).
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

pub async fn remember(p: &Pipeline, fetched: Fetched<'_>) -> Instance {
    let Fetched {
        instance,
        store_plan,
        leader,
    } = fetched;
    if let (Some(plan), Some(store)) = (store_plan, p.store.clone()) {
        let delta = p.config.delta.clone();
        let compression = p.config.compression.clone();
        let text = move |headers: &http::HeaderMap| {
            headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|ct| compression.profile_for(ct).is_some())
        };
        // A cache entry written comes back, to be kept hot.
        let written = tokio::task::spawn_blocking(
            move || -> Result<Option<(String, CacheEntry)>, store::StoreError> {
                match plan {
                    StorePlan::Body {
                        bytes,
                        resource: None,
                    } => store.put_blob(&bytes).map(|_| None),
                    StorePlan::Body {
                        bytes,
                        resource: Some(resource),
                    } => {
                        let hash = store.put_blob(&bytes)?;
                        let etag = Some(format!("\"{}\"", super::fetch::content_etag(&hash)));
                        let version = history::Version {
                            hash: hash.to_hex(),
                            etag,
                            time: now_unix(),
                            size: bytes.len() as u64,
                        };
                        remember_version(&store, &delta, &resource, version).map(|_| None)
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
                        let mut entry = store
                            .get_record(&key)?
                            .and_then(|r| CacheEntry::decode(&r))
                            .unwrap_or_default();
                        let headers = response.headers();
                        let new_version = body
                            .as_ref()
                            .filter(|_| is_version && text(&headers))
                            .and_then(|bytes| {
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
                        entry.upsert(response);
                        store.put_record(&key, &entry.encode(), &entry.bodies())?;
                        if let Some(version) = new_version {
                            remember_version(&store, &delta, resource_of(&key), version)?;
                        }
                        Ok(Some((key, entry)))
                    }
                }
            },
        )
        .await
        .expect("store writes do not panic");
        match written {
            Ok(Some((key, entry))) => p.hot.put(&key, &entry),
            Ok(None) => {}
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
    p.hot.remove(key);
    let key = key.to_string();
    let result = tokio::task::spawn_blocking(move || store.remove_record(&key)).await;
    if let Ok(Err(e)) = result {
        tracing::warn!(error = %e, "cache invalidation failed");
    }
}

/// Appends a new instance to its resource's history and registers it as a possible
/// dictionary for its site.
pub(crate) fn remember_version(
    store: &store::Store,
    delta: &DeltaConfig,
    resource: &str,
    version: history::Version,
) -> Result<(), store::StoreError> {
    if !delta.enabled {
        return Ok(());
    }
    let hash = version.hash();
    history::record(store, resource, version, delta.history, delta.history_bytes)?;
    match hash {
        Some(hash) if delta.dictionaries => dictionaries::register(store, &hash, site_of(resource)),
        _ => Ok(()),
    }
}

pub(crate) fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
