//! The HTTP cache: its stored form, the hot entries kept decoded in memory, and miss
//! coalescing, behind one service, [`Cache`].
//!
//! A cache entry is a store record keyed by the request target; it lists up to
//! `MAX_VARIANTS` stored responses that differ by the request fields named in
//! `Vary`. Bodies are store blobs (decoded, content addressed); the record names them
//! as references, so evicting a body removes the entry that needs it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use base64::Engine;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use store::{Hash, Store};
use tokio::sync::watch;
use wirefold_http::caching::Freshness;
use wirefold_http::vary::Vary;

use store::memo::Bounded;

/// The shared cache (RFC 9111) of one server.
pub struct Cache {
    /// Absent when caching is disabled: every lookup misses, nothing is written.
    pub store: Option<Store>,
    pub hot: HotEntries,
    pub inflight: Inflight,
}

impl Cache {
    pub fn new(store: Option<Store>) -> Self {
        Cache {
            store,
            hot: HotEntries::default(),
            inflight: Inflight::default(),
        }
    }

    /// The stored response matching this request, with its fields, body and the
    /// body's hash; `None` on a miss or when the body is gone (evicted or found
    /// corrupt). A hot entry with a hot body is answered here; otherwise the index is
    /// read on the blocking pool.
    pub async fn lookup(
        &self,
        key: &str,
        request: &HeaderMap,
    ) -> Option<(StoredResponse, HeaderMap, Bytes, Hash)> {
        let store = self.store.clone()?;
        let hot = self.hot.get(key);
        if let Some(hot) = &hot {
            let (stored, headers) = hot.find(request)?;
            if let Some(hash) = stored.body_hash() {
                if let Some(bytes) = store.get_blob_in_memory(&hash) {
                    return Some((stored.clone(), headers.clone(), bytes, hash));
                }
            }
        }
        // Read before the store: a put or removal of the key meanwhile (a refill, an
        // invalidation) makes what is read here too old to keep.
        let generation = self.hot.generation(key);
        let (owned_key, request) = (key.to_string(), request.clone());
        let (entry, found) = tokio::task::spawn_blocking(move || {
            let entry = CacheEntry::decode(&store.get_record(&owned_key).ok()??)?;
            let hot = HotEntries::decoded(&entry);
            let (stored, headers) = hot.find(&request)?.clone();
            let hash = stored.body_hash()?;
            let bytes = store.get_blob(&hash).ok()??;
            Some((entry, (stored, headers, bytes, hash)))
        })
        .await
        .ok()??;
        // Only the body was not in memory: the entry is hot already.
        if hot.is_none() {
            self.hot.put_unless_changed(key, &entry, generation);
        }
        Some(found)
    }

    /// Drops the entry of a target after a successful unsafe request (RFC 9111 §4.4).
    pub async fn invalidate(&self, key: &str) {
        let Some(store) = self.store.clone() else {
            return;
        };
        // Before the store too: this future may be dropped (the client left) while
        // the store's removal goes on without it.
        self.hot.remove(key);
        let owned_key = key.to_string();
        let result = tokio::task::spawn_blocking(move || store.remove_record(&owned_key)).await;
        if let Ok(Err(e)) = result {
            tracing::warn!(error = %e, "cache invalidation failed");
        }
        // After the store: a lookup that read the record before it went sees this
        // removal and keeps nothing (`put_unless_changed`).
        self.hot.remove(key);
    }
}

/// Variants kept per URL; the oldest is dropped beyond this.
const MAX_VARIANTS: usize = 8;

/// Request fields the cache never keys on: wirefold stores decoded bodies and
/// negotiates content codings itself.
pub const IGNORED_VARY_FIELDS: [HeaderName; 1] = [http::header::ACCEPT_ENCODING];

#[derive(Serialize, Deserialize, Default)]
pub struct CacheEntry {
    pub variants: Vec<StoredResponse>,
}

#[derive(Serialize, Deserialize, Clone)]
pub struct StoredResponse {
    /// The normalized values of the request fields named by `Vary`.
    pub secondary_key: String,
    pub status: u16,
    /// The response head in HTTP/1.1 field syntax, base64 (values may be any octets).
    head: String,
    pub body: String,
    /// (response time, corrected initial age, lifetime), seconds.
    freshness: (u64, u64, u64),
}

impl StoredResponse {
    pub fn new(
        secondary_key: String,
        status: StatusCode,
        headers: &HeaderMap,
        body: Hash,
        freshness: &Freshness,
    ) -> Self {
        StoredResponse {
            secondary_key,
            status: status.as_u16(),
            head: encode_head(headers),
            body: body.to_hex(),
            freshness: freshness.to_parts(),
        }
    }

    pub fn headers(&self) -> HeaderMap {
        decode_head(&self.head)
    }

    pub fn set_headers(&mut self, headers: &HeaderMap) {
        self.head = encode_head(headers);
    }

    pub fn body_hash(&self) -> Option<Hash> {
        self.body.parse().ok()
    }

    pub fn freshness(&self) -> Freshness {
        let (response_time, initial_age, lifetime) = self.freshness;
        Freshness::from_parts(response_time, initial_age, lifetime)
    }

    pub fn set_freshness(&mut self, f: &Freshness) {
        self.freshness = f.to_parts();
    }

    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::OK)
    }

    pub fn age(&self, now: SystemTime) -> Duration {
        self.freshness().current_age(now)
    }
}

impl CacheEntry {
    pub fn decode(bytes: &[u8]) -> Option<CacheEntry> {
        serde_json::from_slice(bytes).ok()
    }

    #[allow(
        clippy::expect_used,
        reason = "a struct of strings and numbers serializes: serde_json fails only on \
                  maps with non-string keys and on failing `Serialize` impls"
    )]
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("cache entries serialize")
    }

    /// Adds or replaces the variant with the same secondary key.
    pub fn upsert(&mut self, response: StoredResponse) {
        self.variants
            .retain(|v| v.secondary_key != response.secondary_key);
        self.variants.insert(0, response);
        self.variants.truncate(MAX_VARIANTS);
    }

    pub fn bodies(&self) -> Vec<Hash> {
        self.variants
            .iter()
            .filter_map(StoredResponse::body_hash)
            .collect()
    }
}

/// The secondary cache key of `response_headers`' Vary for a request; `None` when the
/// response varies on everything (`Vary: *`) and so can never be reused.
pub fn secondary_key(response_headers: &HeaderMap, request: &HeaderMap) -> Option<String> {
    Vary::from_headers(response_headers).secondary_key(request, &IGNORED_VARY_FIELDS)
}

/// The store record key of a resource (site, path and query).
pub fn record_key(resource: &str) -> String {
    format!("http:{resource}")
}

/// The resource a record key names.
pub fn resource_of(key: &str) -> &str {
    key.strip_prefix("http:").unwrap_or(key)
}

pub use delta::history::site_of;

/// A header block in HTTP/1.1 field syntax, base64 (values may be any octets).
pub fn encode_head(headers: &HeaderMap) -> String {
    let mut raw = Vec::new();
    for (name, value) in headers {
        raw.extend_from_slice(name.as_str().as_bytes());
        raw.extend_from_slice(b": ");
        raw.extend_from_slice(value.as_bytes());
        raw.extend_from_slice(b"\r\n");
    }
    base64::engine::general_purpose::STANDARD.encode(raw)
}

pub fn decode_head(head: &str) -> HeaderMap {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(head)
        .unwrap_or_default();
    let mut headers = HeaderMap::new();
    for line in raw.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            headers.append(n, v);
        }
    }
    headers
}

/// Cache entries recently read or written, with their fields decoded, so a hit on
/// a hot body is answered on the reactor thread without an index transaction.
pub struct HotEntries {
    entries: Bounded<String, Arc<HotEntry>>,
    /// Entries put or removed, each counted once in place: see [`HotEntries::changes`].
    changes: AtomicU64,
    /// Puts and removals per shard of keys, changed together with the entries (see
    /// [`HotEntries::put_unless_changed`]).
    generations: Mutex<[u64; GENERATION_SHARDS]>,
}

const GENERATION_SHARDS: usize = 64;

/// A decoded cache entry: each stored response with its fields.
pub struct HotEntry {
    variants: Vec<(StoredResponse, HeaderMap)>,
}

/// Bytes of decoded entries kept (as [`HotEntry::memory_estimate`] counts them):
/// about 16,384 entries of 2 KiB, a head of a dozen fields encoded and decoded.
const HOT_BYTES: u64 = 32 << 20;
const HOT_ENTRIES_ESTIMATE: usize = 16_384;

impl Default for HotEntries {
    fn default() -> Self {
        HotEntries {
            entries: Bounded::with_weight(HOT_BYTES, HOT_ENTRIES_ESTIMATE, |hot| {
                hot.memory_estimate()
            }),
            changes: AtomicU64::new(0),
            generations: Mutex::new([0; GENERATION_SHARDS]),
        }
    }
}

impl HotEntries {
    pub fn get(&self, key: &str) -> Option<Arc<HotEntry>> {
        self.entries.get(key)
    }

    /// An entry's decoded form, without keeping it.
    pub fn decoded(entry: &CacheEntry) -> HotEntry {
        HotEntry {
            variants: entry
                .variants
                .iter()
                .map(|v| (v.clone(), v.headers()))
                .collect(),
        }
    }

    /// Keeps `entry`, just written to the store for `key`, if `key` was not put or
    /// removed since [`HotEntries::generation`] returned `seen` (read before the
    /// write); otherwise another write or an invalidation may have landed after this
    /// one in the store, so the key's hot entry is dropped and the next lookup reads
    /// the store.
    pub fn put_written(&self, key: &str, entry: &CacheEntry, seen: u64) {
        let decoded = Arc::new(Self::decoded(entry));
        let mut generations = self.generations();
        if generations[shard(key)] == seen {
            self.entries.insert(key.to_string(), decoded);
        } else {
            self.entries.remove(key);
        }
        generations[shard(key)] += 1;
        self.changes.fetch_add(1, Ordering::AcqRel);
    }

    /// Keeps `entry`, read from the store, unless `key` was put or removed since
    /// `seen`: a refill or an invalidation that raced the read is newer, and an
    /// older entry put over it would be served. Another key of the same shard
    /// changing also skips it (the next lookup reads the store again). Counts as no
    /// change: it is what the store holds, which every write puts or removes after
    /// itself.
    pub fn put_unless_changed(&self, key: &str, entry: &CacheEntry, seen: u64) {
        let decoded = Arc::new(Self::decoded(entry));
        let generations = self.generations();
        if generations[shard(key)] == seen {
            self.entries.insert(key.to_string(), decoded);
        }
    }

    /// The count of puts and removals of `key`'s shard so far.
    pub fn generation(&self, key: &str) -> u64 {
        self.generations()[shard(key)]
    }

    pub fn remove(&self, key: &str) {
        let mut generations = self.generations();
        self.entries.remove(key);
        generations[shard(key)] += 1;
        self.changes.fetch_add(1, Ordering::AcqRel);
    }

    fn generations(&self) -> MutexGuard<'_, [u64; GENERATION_SHARDS]> {
        // Counters only: a panic elsewhere leaves them usable.
        self.generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Entries put or removed so far. A lookup answers from a hot entry before the
    /// store, and an entry is put after the store write that made it: what a prepared
    /// response counts, beside the store's writes, to see a new entry.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }
}

fn shard(key: &str) -> usize {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(key) as usize % GENERATION_SHARDS
}

impl HotEntry {
    /// Bytes held: each stored response's strings and its decoded fields, with a
    /// rough allowance for a field's bookkeeping in a `HeaderMap`.
    fn memory_estimate(&self) -> u64 {
        const FIELD_OVERHEAD: usize = 64;
        let bytes: usize = self
            .variants
            .iter()
            .map(|(stored, headers)| {
                let fields: usize = headers
                    .iter()
                    .map(|(name, value)| name.as_str().len() + value.len() + FIELD_OVERHEAD)
                    .sum();
                std::mem::size_of::<(StoredResponse, HeaderMap)>()
                    + stored.secondary_key.len()
                    + stored.head.len()
                    + stored.body.len()
                    + fields
            })
            .sum();
        bytes as u64
    }

    /// The stored response whose `Vary` fields match this request, with its fields.
    pub fn find(&self, request: &HeaderMap) -> Option<&(StoredResponse, HeaderMap)> {
        self.variants.iter().find(|(stored, headers)| {
            secondary_key(headers, request).as_deref() == Some(stored.secondary_key.as_str())
        })
    }
}

/// Concurrent misses for one key: the first becomes the leader and fetches; the
/// others wait until it has stored the response (or found it unstorable) and then
/// look again.
#[derive(Default)]
pub struct Inflight {
    leaders: Mutex<HashMap<String, watch::Receiver<bool>>>,
}

pub enum Role<'a> {
    Leader(LeaderGuard<'a>),
    /// Told `true` when the leader finished its fill ([`LeaderGuard::finish`]).
    Follower(watch::Receiver<bool>),
}

/// Held by the leader until its response is stored; dropping it wakes the followers.
/// Dropped without [`LeaderGuard::finish`], the fill was abandoned midway (its
/// requester went away and its work was dropped): a follower may lead instead.
pub struct LeaderGuard<'a> {
    inflight: &'a Inflight,
    key: String,
    done: watch::Sender<bool>,
}

impl LeaderGuard<'_> {
    /// The fill is over, stored or not (uncacheable, the origin failed): the
    /// followers find what the cache holds now, or go to the origin each.
    pub fn finish(self) {
        self.done.send_replace(true);
    }
}

impl Drop for LeaderGuard<'_> {
    fn drop(&mut self) {
        self.inflight.leaders().remove(&self.key);
    }
}

impl Inflight {
    /// The leaders. Each use is one `get`, `insert` or `remove`, so a panic elsewhere
    /// cannot leave the map half-updated: a poisoned lock is taken over as it is (a
    /// leader's guard is also dropped while unwinding, where a panic would abort).
    fn leaders(&self) -> MutexGuard<'_, HashMap<String, watch::Receiver<bool>>> {
        self.leaders.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn join(&self, key: &str) -> Role<'_> {
        let mut leaders = self.leaders();
        if let Some(rx) = leaders.get(key) {
            return Role::Follower(rx.clone());
        }
        let (tx, rx) = watch::channel(false);
        leaders.insert(key.to_string(), rx);
        Role::Leader(LeaderGuard {
            inflight: self,
            key: key.to_string(),
            done: tx,
        })
    }
}

/// How a follower's wait for its leader ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Led {
    /// The fill is over ([`LeaderGuard::finish`]).
    Finished,
    /// The leader was dropped midway: a follower may lead instead.
    Abandoned,
    /// Still going at the wait's limit.
    StillGoing,
}

/// Waits until the leader is done (its sender dropped), at most `limit`.
pub async fn wait_for_leader(mut rx: watch::Receiver<bool>, limit: Duration) -> Led {
    let ended = tokio::time::timeout(limit, async { while rx.changed().await.is_ok() {} }).await;
    match (ended, *rx.borrow()) {
        (Err(_), _) => Led::StillGoing,
        (Ok(()), true) => Led::Finished,
        (Ok(()), false) => Led::Abandoned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write's put, nothing having raced it.
    fn put(hot: &HotEntries, key: &str, entry: &CacheEntry) {
        hot.put_written(key, entry, hot.generation(key));
    }

    #[test]
    fn head_round_trips_any_octets() {
        let mut h = HeaderMap::new();
        h.append("x-a", HeaderValue::from_static("1"));
        h.append("x-a", HeaderValue::from_static("2"));
        h.append("x-b", HeaderValue::from_bytes(b"caf\xe9: yes").unwrap());
        let back = decode_head(&encode_head(&h));
        assert_eq!(back, h);
    }

    /// A burst of one-off URLs (a crawler, a scan) must not push frequently requested
    /// entries out: the fetch stage looks each key up, then keeps what it read or wrote.
    #[test]
    fn hot_entries_outlive_a_burst_of_one_off_keys() {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CACHE_CONTROL,
            HeaderValue::from_static("max-age=60"),
        );
        let entry = CacheEntry {
            variants: vec![StoredResponse::new(
                String::new(),
                StatusCode::OK,
                &headers,
                Hash::of(b"body"),
                &Freshness::from_parts(0, 0, 60),
            )],
        };
        let hot = HotEntries::default();
        let hot_keys: Vec<String> = (0..8).map(|i| format!("site/hot/{i}")).collect();
        for key in &hot_keys {
            put(&hot, key, &entry);
        }
        for _ in 0..3 {
            for key in &hot_keys {
                assert!(hot.get(key).is_some());
            }
        }
        for i in 0..50_000 {
            let key = format!("site/once/{i}");
            assert!(hot.get(&key).is_none());
            put(&hot, &key, &entry);
        }
        let kept = hot_keys.iter().filter(|k| hot.get(k).is_some()).count();
        assert_eq!(kept, hot_keys.len(), "hot entries kept after the burst");

        // Every put and removal is counted once it took effect, a read is not.
        let before = hot.changes();
        put(&hot, "site/new", &entry);
        assert_eq!(hot.changes(), before + 1);
        assert!(hot.get("site/new").is_some());
        assert_eq!(hot.changes(), before + 1);
        hot.remove("site/new");
        assert_eq!(hot.changes(), before + 2);
    }

    fn entry_with_etag(etag: &'static str) -> CacheEntry {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::ETAG, HeaderValue::from_static(etag));
        CacheEntry {
            variants: vec![StoredResponse::new(
                String::new(),
                StatusCode::OK,
                &headers,
                Hash::of(etag.as_bytes()),
                &Freshness::from_parts(0, 0, 60),
            )],
        }
    }

    fn hot_etag(hot: &HotEntries, key: &str) -> Option<String> {
        let entry = hot.get(key)?;
        let (_, headers) = entry.find(&HeaderMap::new())?;
        Some(headers[http::header::ETAG].to_str().unwrap().to_string())
    }

    /// A lookup reads the store on the blocking pool; a refill or an invalidation of
    /// the key may land meanwhile. What it read must not replace or revive them.
    #[test]
    fn a_lookup_keeps_what_it_read_only_if_the_key_did_not_change_meanwhile() {
        let hot = HotEntries::default();
        let seen = hot.generation("site/page");
        put(&hot, "site/page", &entry_with_etag("\"new\""));
        hot.put_unless_changed("site/page", &entry_with_etag("\"old\""), seen);
        assert_eq!(hot_etag(&hot, "site/page").as_deref(), Some("\"new\""));

        put(&hot, "site/gone", &entry_with_etag("\"old\""));
        let seen = hot.generation("site/gone");
        hot.remove("site/gone");
        hot.put_unless_changed("site/gone", &entry_with_etag("\"old\""), seen);
        assert!(hot.get("site/gone").is_none());

        // Nothing changed: kept, and not counted as a change (the store holds it).
        let (seen, changes) = (hot.generation("site/quiet"), hot.changes());
        hot.put_unless_changed("site/quiet", &entry_with_etag("\"read\""), seen);
        assert_eq!(hot_etag(&hot, "site/quiet").as_deref(), Some("\"read\""));
        assert_eq!(hot.changes(), changes);
    }

    /// Two writes of a key, or a write and an invalidation, may reach the hot
    /// entries in the other order than the store: then none of theirs is kept.
    #[test]
    fn a_write_overtaken_by_another_change_of_its_key_drops_the_hot_entry() {
        let hot = HotEntries::default();
        let first = hot.generation("site/page");
        let second = hot.generation("site/page");
        hot.put_written("site/page", &entry_with_etag("\"second\""), second);
        hot.put_written("site/page", &entry_with_etag("\"first\""), first);
        assert!(hot.get("site/page").is_none());

        let seen = hot.generation("site/gone");
        hot.remove("site/gone");
        hot.put_written("site/gone", &entry_with_etag("\"old\""), seen);
        assert!(hot.get("site/gone").is_none());
    }

    #[test]
    fn leader_then_followers() {
        let inflight = Inflight::default();
        let leader = match inflight.join("k") {
            Role::Leader(g) => g,
            Role::Follower(_) => panic!("first must lead"),
        };
        assert!(matches!(inflight.join("k"), Role::Follower(_)));
        drop(leader);
        assert!(matches!(inflight.join("k"), Role::Leader(_)));
    }

    /// A follower learns whether its leader finished the fill, was dropped midway
    /// (then it may lead instead), or was still going when the wait ended.
    #[tokio::test]
    async fn followers_are_told_a_finished_fill_from_an_abandoned_one() {
        let inflight = Inflight::default();
        let limit = Duration::from_secs(5);
        for (finish, led) in [(true, Led::Finished), (false, Led::Abandoned)] {
            let Role::Leader(leader) = inflight.join("k") else {
                panic!("first must lead");
            };
            let Role::Follower(rx) = inflight.join("k") else {
                panic!("second must follow");
            };
            let waiting = tokio::spawn(wait_for_leader(rx, limit));
            if finish {
                leader.finish();
            } else {
                drop(leader);
            }
            assert_eq!(waiting.await.unwrap(), led);
        }
        let Role::Leader(_going) = inflight.join("k") else {
            panic!("first must lead");
        };
        let Role::Follower(rx) = inflight.join("k") else {
            panic!("second must follow");
        };
        assert_eq!(
            wait_for_leader(rx, Duration::from_millis(10)).await,
            Led::StillGoing
        );
    }
}
