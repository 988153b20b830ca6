//! The shared durable tier: Redis (one server, or a Redis Cluster), so that every
//! instance of a fleet sees the blobs, records and encodings any of them stored.
//!
//! Keys (`docs/operations.md`, Fleet, lists them for operators):
//! - `wf:b:{<hex>}`: a blob's head, its total length (8 bytes, big endian) followed by
//!   its first chunk; `wf:b:{<hex>}:<n>` its further chunks, `CHUNK_BYTES` each at most.
//!   The hash tag is the blob's hash, so one blob's keys share a slot and are written by
//!   one `MSET` (all or nothing) and read by one `MGET`.
//! - `wf:e:{<source hex>}:<variant>`: the 32-byte hash of an encoding of `source`.
//! - `wf:r:{<record key>}`: a record; `wf:i:{<group>}`: a sorted set of the record keys
//!   of one group (a key up to its first `/`, such as `hist:example.org/`), newest last,
//!   bounded, for [`Durable::records_with_prefix`].
//!
//! No command names keys of two slots. Redis is expected to run with `maxmemory` and
//! `allkeys-lru`: any key may vanish at any time, and a missing key only ever means
//! absent. Every blob is verified against its hash on read; one that fails (foreign,
//! truncated by eviction of a chunk, damaged) is deleted and reported as absent.
//!
//! Calls are blocking (the store's callers run them on the blocking pool) and bounded:
//! connecting and every response are limited to the configured budget. A transport
//! failure or a late answer marks the tier unreachable: calls then fail fast, without
//! touching the network, until a retry time that backs off from
//! [`FIRST_RETRY`] to [`LAST_RETRY`]; the first call after it probes. Redis refusing
//! writes for memory (`OOM`) suspends writes for [`WRITE_SUSPENSION`]. Each change of
//! state is logged once and reported to the store's observer.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use redis::cluster::{ClusterClient, ClusterConnection};
use redis::{Cmd, ConnectionLike, ErrorKind, RedisError, ServerErrorKind};

use crate::durable::{BlobRead, Durable, DurableStats, PartialBlob, Precondition, RecordWrite};
use crate::local::LocalTier;
use crate::target::{RedisTarget, SharedState, StateObserver};
use crate::{lock, Hash, StoreError, WRITE_SUSPENSION};

/// Largest value written to one key: bigger blobs are split into chunks of this size.
pub const CHUNK_BYTES: usize = 512 * 1024;
/// Record keys remembered per group for listing by prefix; the oldest go first.
pub const MAX_GROUP_KEYS: isize = 10_000;
/// The wait before the first reconnection attempt after a failure.
pub const FIRST_RETRY: Duration = Duration::from_millis(250);
/// The longest wait between reconnection attempts.
pub const LAST_RETRY: Duration = Duration::from_secs(5);
/// Idle connections kept for reuse: as many as store calls in flight under load, or
/// calls beyond them connect and disconnect each time (with 16 kept, 64 calls in
/// flight opened 16,903 connections in 5 s and lost 12–35 % of the requests per
/// second; `bench/redis-clients.sh`, docs/operations.md).
const IDLE_CONNECTIONS: usize = 64;
/// Length of a blob head's length prefix.
const LENGTH_BYTES: usize = 8;
/// Compare-and-set of one record, atomic in Redis: KEYS[1] is the record, ARGV[1] the
/// expectation ("-": no record; "=" followed by the value it must hold), ARGV[2] the
/// new value.
const SET_IF_HOLDS: &str = r#"
local current = redis.call('GET', KEYS[1])
local expected = ARGV[1]
if expected == '-' then
  if current then return 'conflict' end
elseif not current or '=' .. current ~= expected then
  return 'conflict'
end
redis.call('SET', KEYS[1], ARGV[2])
if current then return 'replaced' end
return 'added'
"#;

/// A handle to the shared tier; clones share it.
#[derive(Clone)]
pub(crate) struct Shared {
    inner: Arc<Inner>,
}

struct Inner {
    target: RedisTarget,
    client: Client,
    budget: Duration,
    /// Largest blob accepted: a head claiming more is not ours.
    max_object_bytes: u64,
    local: Arc<LocalTier>,
    idle: Mutex<Vec<Connection>>,
    health: Mutex<Health>,
    observer: Option<StateObserver>,
}

enum Client {
    Server(redis::Client),
    Cluster(ClusterClient),
}

enum Connection {
    Server(redis::Connection),
    /// Boxed: it holds a connection per node and the slot map.
    Cluster(Box<ClusterConnection>),
}

impl Connection {
    fn like(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Connection::Server(con) => con,
            Connection::Cluster(con) => con.as_mut(),
        }
    }
}

struct Health {
    state: SharedState,
    /// While unreachable: no call touches the network before this.
    retry_at: Instant,
    /// While unreachable: the wait after the next failure.
    backoff: Duration,
    /// While full: writes fail fast until this.
    writes_resume_at: Instant,
}

/// How a failed command is treated.
enum Failure {
    /// Transport failure, timeout, a server loading or a cluster without a master for the
    /// slot: the tier is unreachable.
    Unreachable(RedisError),
    /// Out of memory under `maxmemory`.
    Full(RedisError),
    /// Anything else (a key of another type: data that is not ours).
    Refused(RedisError),
}

fn classify(err: RedisError) -> Failure {
    if err.code() == Some("OOM") {
        return Failure::Full(err);
    }
    let transient = matches!(
        err.kind(),
        ErrorKind::Io
            | ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::TryAgain
            )
    );
    if transient
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_unrecoverable_error()
    {
        Failure::Unreachable(err)
    } else {
        Failure::Refused(err)
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A hash tag's content: `{` and `}` would end or confuse the tag, `%` is escaped so
/// the mapping stays one to one.
fn tag(text: &str) -> String {
    text.replace('%', "%25")
        .replace('{', "%7B")
        .replace('}', "%7D")
}

fn blob_key(hash: &Hash) -> String {
    format!("wf:b:{{{}}}", hash.to_hex())
}

fn chunk_key(hash: &Hash, n: usize) -> String {
    format!("wf:b:{{{}}}:{n}", hash.to_hex())
}

fn encoding_key(source: &Hash, variant: &str) -> String {
    format!("wf:e:{{{}}}:{variant}", source.to_hex())
}

fn record_key(key: &str) -> String {
    format!("wf:r:{{{}}}", tag(key))
}

/// The group of a record key: up to and including its first `/`, else the whole key.
fn group(key: &str) -> &str {
    key.find('/').map_or(key, |at| &key[..=at])
}

fn group_key(group: &str) -> String {
    format!("wf:i:{{{}}}", tag(group))
}

/// How many keys a blob of `len` bytes takes: the head and the further chunks.
fn chunk_count(len: usize) -> usize {
    len.div_ceil(CHUNK_BYTES).max(1)
}

impl Shared {
    /// Prepares the tier; connections are made when first needed, so a Redis that is
    /// down at start-up makes a store that serves without it until it comes up.
    pub(crate) fn open(
        target: RedisTarget,
        budget: Duration,
        max_object_bytes: u64,
        local: Arc<LocalTier>,
        observer: Option<StateObserver>,
    ) -> Result<Shared, StoreError> {
        let refused = |err: RedisError| StoreError::Shared {
            target: target.to_string(),
            detail: err.to_string(),
        };
        let client = match &target {
            RedisTarget::Server(url) => {
                Client::Server(redis::Client::open(url.as_str()).map_err(refused)?)
            }
            RedisTarget::Cluster(nodes) => Client::Cluster(
                ClusterClient::builder(nodes.iter().map(String::as_str))
                    .connection_timeout(budget)
                    .response_timeout(budget)
                    // A redirect (MOVED, ASK) is followed once; waiting out a failover
                    // is the breaker's job, not a request's.
                    .retries(1)
                    .min_retry_wait(1)
                    .max_retry_wait(budget.as_millis() as u64)
                    .build()
                    .map_err(refused)?,
            ),
        };
        let now = Instant::now();
        Ok(Shared {
            inner: Arc::new(Inner {
                target,
                client,
                budget,
                max_object_bytes,
                local,
                idle: Mutex::new(Vec::new()),
                health: Mutex::new(Health {
                    state: SharedState::Available,
                    retry_at: now,
                    backoff: FIRST_RETRY,
                    writes_resume_at: now,
                }),
                observer,
            }),
        })
    }

    fn connect(&self) -> Result<Connection, RedisError> {
        let budget = Some(self.inner.budget);
        match &self.inner.client {
            Client::Server(client) => {
                let con = client.get_connection_with_timeout(self.inner.budget)?;
                con.set_read_timeout(budget)?;
                con.set_write_timeout(budget)?;
                Ok(Connection::Server(con))
            }
            Client::Cluster(client) => {
                let con = client.get_connection()?;
                con.set_read_timeout(budget)?;
                con.set_write_timeout(budget)?;
                Ok(Connection::Cluster(Box::new(con)))
            }
        }
    }

    /// Runs `op` on a pooled connection, within the breaker: fails fast while the tier
    /// is unreachable, and turns failures into state changes and store errors.
    fn call<T>(
        &self,
        op: impl FnOnce(&mut dyn ConnectionLike) -> Result<T, RedisError>,
    ) -> Result<T, StoreError> {
        {
            let health = self.health();
            if health.state == SharedState::Unreachable && Instant::now() < health.retry_at {
                return Err(self.unavailable());
            }
        }
        let pooled = lock(&self.inner.idle).pop();
        let mut con = match pooled.map_or_else(|| self.connect(), Ok) {
            Ok(con) => con,
            Err(err) => return Err(self.failed(classify(err))),
        };
        match op(con.like()) {
            Ok(value) => {
                self.reached();
                let mut idle = lock(&self.inner.idle);
                if idle.len() < IDLE_CONNECTIONS {
                    idle.push(con);
                }
                Ok(value)
            }
            Err(err) => {
                let failure = classify(err);
                if matches!(failure, Failure::Full(_) | Failure::Refused(_)) {
                    let mut idle = lock(&self.inner.idle);
                    if idle.len() < IDLE_CONNECTIONS {
                        idle.push(con);
                    }
                }
                Err(self.failed(failure))
            }
        }
    }

    /// [`Shared::call`] for a command that stores something: fails fast while Redis is
    /// full.
    fn write<T>(
        &self,
        op: impl FnOnce(&mut dyn ConnectionLike) -> Result<T, RedisError>,
    ) -> Result<T, StoreError> {
        {
            let mut health = self.health();
            if health.state == SharedState::Full {
                if Instant::now() < health.writes_resume_at {
                    return Err(StoreError::WritesSuspended);
                }
                self.change(&mut health, SharedState::Available, "writes resume");
            }
        }
        self.call(op)
    }

    fn query<T: redis::FromRedisValue>(&self, cmd: &Cmd) -> Result<T, StoreError> {
        self.call(|con| cmd.query(con))
    }

    fn reached(&self) {
        let mut health = self.health();
        if health.state == SharedState::Unreachable {
            health.backoff = FIRST_RETRY;
            self.change(&mut health, SharedState::Available, "reachable again");
        }
    }

    fn failed(&self, failure: Failure) -> StoreError {
        let mut health = self.health();
        match failure {
            Failure::Unreachable(err) => {
                let wait = health.backoff;
                health.retry_at = Instant::now() + wait;
                health.backoff = (wait * 2).min(LAST_RETRY);
                // Every idle connection is suspect now: after a restart each would fail
                // once more, each failure backing off further.
                lock(&self.inner.idle).clear();
                if health.state != SharedState::Unreachable {
                    let why = format!("unreachable or over its {:?} budget ({err}); serving without it, retrying with backoff", self.inner.budget);
                    self.change(&mut health, SharedState::Unreachable, &why);
                }
                self.unavailable()
            }
            Failure::Full(err) => {
                health.writes_resume_at = Instant::now() + WRITE_SUSPENSION;
                if health.state != SharedState::Full {
                    let why = format!(
                        "full ({err}); suspending writes for {} s, reads go on",
                        WRITE_SUSPENSION.as_secs()
                    );
                    self.change(&mut health, SharedState::Full, &why);
                }
                StoreError::WritesSuspended
            }
            Failure::Refused(err) => StoreError::Shared {
                target: self.inner.target.to_string(),
                detail: err.to_string(),
            },
        }
    }

    /// Moves to `state`, logging it and telling the observer: once per change.
    fn change(&self, health: &mut Health, state: SharedState, why: &str) {
        health.state = state;
        let target = &self.inner.target;
        match state {
            SharedState::Available => tracing::info!(%target, "shared store {why}"),
            _ => tracing::warn!(%target, "shared store {why}"),
        }
        if let Some(observer) = &self.inner.observer {
            observer(state);
        }
    }

    fn unavailable(&self) -> StoreError {
        StoreError::Unavailable {
            target: self.inner.target.to_string(),
        }
    }

    fn health(&self) -> MutexGuard<'_, Health> {
        lock(&self.inner.health)
    }

    /// Deletes a blob's keys after it failed verification.
    fn discard_blob(&self, hash: &Hash, chunks: usize, problem: &str) {
        tracing::error!(blob = %hash, %problem, "damaged blob in the shared store; removing it");
        let mut del = redis::cmd("DEL");
        del.arg(blob_key(hash));
        for n in 1..chunks {
            del.arg(chunk_key(hash, n));
        }
        // Best effort: a blob left behind fails verification again next time.
        let _ = self.query::<i64>(&del);
        self.inner.local.forget(&[*hash]);
    }

    /// Parses a blob head: the total length and the first chunk, or what is wrong.
    fn parse_head(&self, head: &[u8]) -> Result<(usize, usize), String> {
        let Some((length, first)) = head.split_first_chunk::<LENGTH_BYTES>() else {
            return Err("head shorter than its length prefix".into());
        };
        let total = u64::from_be_bytes(*length);
        if total > self.inner.max_object_bytes {
            return Err(format!("claims {total} bytes, over the object limit"));
        }
        let total = total as usize;
        if first.len() != total.min(CHUNK_BYTES) {
            return Err(format!(
                "first chunk of {} bytes for a blob of {total}",
                first.len()
            ));
        }
        Ok((total, chunk_count(total)))
    }
}

impl Durable for Shared {
    fn put_blob(&self, hash: Hash, data: &[u8]) -> Result<(), StoreError> {
        if self.has_blob(&hash)? {
            return Ok(());
        }
        let mut chunks = data.chunks(CHUNK_BYTES);
        let first = chunks.next().unwrap_or_default();
        let mut head = Vec::with_capacity(LENGTH_BYTES + first.len());
        head.extend_from_slice(&(data.len() as u64).to_be_bytes());
        head.extend_from_slice(first);
        // One MSET over one slot: a reader sees all of the blob or none of it.
        let mut mset = redis::cmd("MSET");
        for (n, chunk) in chunks.enumerate() {
            mset.arg(chunk_key(&hash, n + 1)).arg(chunk);
        }
        mset.arg(blob_key(&hash)).arg(head);
        self.write(|con| mset.query::<()>(con))
    }

    fn blob_writer(&self, limit: u64) -> Result<Box<dyn PartialBlob>, StoreError> {
        Ok(Box::new(BufferedBlob {
            tier: self.clone(),
            limit,
            data: Vec::new(),
            too_large: false,
        }))
    }

    fn get_blob(&self, hash: &Hash) -> Result<BlobRead, StoreError> {
        let Some(head) = self.query::<Option<Vec<u8>>>(redis::cmd("GET").arg(blob_key(hash)))?
        else {
            return Ok(BlobRead::Absent);
        };
        let (total, chunks) = match self.parse_head(&head) {
            Ok(parsed) => parsed,
            Err(problem) => {
                self.discard_blob(hash, 1, &problem);
                return Ok(BlobRead::Discarded);
            }
        };
        let mut data = BytesMut::with_capacity(total);
        data.extend_from_slice(&head[LENGTH_BYTES..]);
        if chunks > 1 {
            let mut mget = redis::cmd("MGET");
            for n in 1..chunks {
                mget.arg(chunk_key(hash, n));
            }
            for chunk in self.query::<Vec<Option<Vec<u8>>>>(&mget)? {
                let Some(chunk) = chunk else {
                    self.discard_blob(hash, chunks, "a chunk is missing (evicted)");
                    return Ok(BlobRead::Discarded);
                };
                data.extend_from_slice(&chunk);
            }
        }
        let actual = Hash::of(&data);
        if data.len() != total || actual != *hash {
            let problem = format!("{} bytes hashing to {actual}", data.len());
            self.discard_blob(hash, chunks, &problem);
            return Ok(BlobRead::Discarded);
        }
        Ok(BlobRead::Found(data.freeze()))
    }

    fn has_blob(&self, hash: &Hash) -> Result<bool, StoreError> {
        self.query(redis::cmd("EXISTS").arg(blob_key(hash)))
    }

    /// Redis keeps its own use order (`allkeys-lru`), which reads update.
    fn touch(&self, _hashes: &[Hash]) {}

    fn put_record(
        &self,
        key: &str,
        value: &[u8],
        refs: &[Hash],
        precondition: Precondition<'_>,
    ) -> Result<RecordWrite, StoreError> {
        for hash in refs {
            if !self.has_blob(hash)? {
                return Err(StoreError::MissingBlob(*hash));
            }
        }
        let record = record_key(key);
        let written = match precondition {
            Precondition::None => {
                self.write(|con| redis::cmd("SET").arg(&record).arg(value).query::<()>(con))?;
                RecordWrite::Replaced
            }
            Precondition::Holds(expected) => {
                let expectation = match expected {
                    None => b"-".to_vec(),
                    Some(expected) => [b"=".as_slice(), expected].concat(),
                };
                let answer: String = self.write(|con| {
                    redis::cmd("EVAL")
                        .arg(SET_IF_HOLDS)
                        .arg(1)
                        .arg(&record)
                        .arg(expectation)
                        .arg(value)
                        .query(con)
                })?;
                match answer.as_str() {
                    "conflict" => return Ok(RecordWrite::Conflict),
                    "added" => RecordWrite::Added,
                    _ => RecordWrite::Replaced,
                }
            }
        };
        let index = group_key(group(key));
        self.write(|con| {
            redis::cmd("ZADD")
                .arg(&index)
                .arg(now_ms())
                .arg(key)
                .query::<()>(con)?;
            redis::cmd("ZREMRANGEBYRANK")
                .arg(&index)
                .arg(0)
                .arg(-(MAX_GROUP_KEYS + 1))
                .query::<()>(con)
        })?;
        Ok(written)
    }

    fn get_record(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.query(redis::cmd("GET").arg(record_key(key)))
    }

    /// Lists the group index of `prefix` (so `prefix` must reach the first `/` of the
    /// keys it lists), dropping members whose record has gone.
    fn records_with_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        if !prefix.contains('/') {
            return Err(StoreError::PrefixTooShort {
                prefix: prefix.to_owned(),
            });
        }
        let index = group_key(group(prefix));
        let mut keys: Vec<String> = self.query(redis::cmd("ZRANGE").arg(&index).arg(0).arg(-1))?;
        keys.retain(|key| key.starts_with(prefix));
        keys.sort();
        let mut found = Vec::new();
        for key in keys {
            if found.len() == limit {
                break;
            }
            match self.get_record(&key)? {
                Some(value) => found.push((key, value)),
                None => self.query::<()>(redis::cmd("ZREM").arg(&index).arg(&key))?,
            }
        }
        Ok(found)
    }

    fn remove_record(&self, key: &str) -> Result<(), StoreError> {
        self.query::<()>(redis::cmd("DEL").arg(record_key(key)))?;
        self.query::<()>(redis::cmd("ZREM").arg(group_key(group(key))).arg(key))
    }

    fn put_encoding(
        &self,
        source: &Hash,
        variant: &str,
        hash: Hash,
        encoded: &[u8],
    ) -> Result<(), StoreError> {
        if !self.has_blob(source)? {
            return Err(StoreError::MissingBlob(*source));
        }
        self.put_blob(hash, encoded)?;
        self.write(|con| {
            redis::cmd("SET")
                .arg(encoding_key(source, variant))
                .arg(&hash.0[..])
                .query::<()>(con)
        })
    }

    fn get_encoding(&self, source: &Hash, variant: &str) -> Result<Option<Hash>, StoreError> {
        let key = encoding_key(source, variant);
        let Some(value) = self.query::<Option<Vec<u8>>>(redis::cmd("GET").arg(&key))? else {
            return Ok(None);
        };
        match <[u8; 32]>::try_from(value.as_slice()) {
            Ok(encoded) => Ok(Some(Hash(encoded))),
            Err(_) => {
                tracing::error!(%key, len = value.len(), "foreign value in the shared store; removing it");
                self.query::<()>(redis::cmd("DEL").arg(&key))?;
                Ok(None)
            }
        }
    }

    /// Redis counts its own memory and keys (`INFO memory`, `INFO keyspace`); this
    /// instance does not ask on every scrape.
    fn stats(&self) -> DurableStats {
        DurableStats::default()
    }

    fn shared_state(&self) -> Option<SharedState> {
        Some(self.health().state)
    }
}

/// A blob streamed into the shared tier: gathered in memory (bounded by the object
/// limit) and stored whole by `finish`, since Redis has no temp files.
struct BufferedBlob {
    tier: Shared,
    limit: u64,
    data: Vec<u8>,
    too_large: bool,
}

impl PartialBlob for BufferedBlob {
    fn write(&mut self, data: &[u8]) -> Result<(), StoreError> {
        if self.too_large || (self.data.len() + data.len()) as u64 > self.limit {
            self.too_large = true;
            return Err(StoreError::TooLarge { limit: self.limit });
        }
        self.data.extend_from_slice(data);
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<Hash, StoreError> {
        if self.too_large {
            return Err(StoreError::TooLarge { limit: self.limit });
        }
        let hash = Hash::of(&self.data);
        self.tier.put_blob(hash, &self.data)?;
        Ok(hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_one_blob_share_a_hash_tag_and_record_tags_cannot_be_broken_out_of() {
        let hash = Hash::of(b"x");
        let tag_of = |key: &str| key[key.find('{').unwrap() + 1..key.find('}').unwrap()].to_owned();
        assert_eq!(tag_of(&blob_key(&hash)), tag_of(&chunk_key(&hash, 3)));
        assert_eq!(
            tag_of(&blob_key(&hash)),
            tag_of(&encoding_key(&hash, "br-5"))
        );
        assert_eq!(tag_of(&record_key("hist:a}b{c")), "hist:a%7Db%7Bc");
        assert_ne!(record_key("a%7Bb"), record_key("a{b"));
        assert_eq!(group("hist:example.org/a/b?c"), "hist:example.org/");
        assert_eq!(group("trained:example.org"), "trained:example.org");
    }

    #[test]
    fn a_blob_takes_one_key_per_chunk() {
        assert_eq!(chunk_count(0), 1);
        assert_eq!(chunk_count(CHUNK_BYTES), 1);
        assert_eq!(chunk_count(CHUNK_BYTES + 1), 2);
    }
}
