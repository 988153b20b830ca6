//! Prepared responses: an answer the stages made, kept for the exact request that
//! asked for it and sent again without running them while nothing it was made from
//! has changed. The connection layer costs what nginx's does; the stages cost the
//! rest (docs/benchmarks.md), so a repeat that skips them is the fast path.
//!
//! What an answer is made from, and how a change to it is seen:
//! - the store (instances, encodings, deltas, dictionaries, manifests, variants,
//!   histories): [`store::Store::changes`] counts every write;
//! - the cache's decoded entries in memory, read before the store and put after its
//!   write: [`crate::cache::HotEntries::changes`] counts every put and removal;
//! - work that outlives a request (an encoding kept at the cached level after the
//!   first answers went out at the on-the-fly one, a revalidation, a stylesheet read
//!   for a manifest): `Background::changes` counts every start and end;
//! - not the networks' link estimates, kept in the store and loaded from it
//!   unwatched: the one choice made by them is made again by every repeat (below);
//! - the configuration: reloads are counted here;
//! - the instance itself, which `fetch` vouches for ([`Rests`]): a file found again
//!   unchanged (as `fetch` would find it, `files.check_interval_ms` and all), a cache
//!   hit while it is fresh (its `Age` is rewritten per answer), a content-addressed
//!   dictionary;
//! - memos the stages read that expire (a page's dictionary links): the answer
//!   expires with them.
//!
//! An answer is kept only when the sum of the four counts did not move while it was
//! made (the answer changed nothing and saw no change), and sent only while that sum
//! still holds and its instance does. A choice made from what none of this covers
//! (adaptive fidelity's, by the link estimate and the egress controller) is made
//! again by every repeat, which stands only if it comes out the same
//! ([`crate::model::Rechoose`]). Other state no count covers rules the answer out; so
//! do a pushed resource, a streamed body, a part (206), an error, a `Set-Cookie`.
//!
//! The key is the request as received: method, target, version, scheme and every
//! field with its value, in order. A request with a body, credentials (`Cookie`,
//! `Authorization`) or an upgrade is never keyed: its answer is the stages' every
//! time. A fleet's shared store is written by other instances, whose writes no count
//! here sees, so a server on one keeps no prepared responses.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode, Uri, Version};
use store::memo::{Bounded, Equivalent};
use store::Store;

use super::respond::WholeBody;
use crate::background::Background;
use crate::cache::Cache;
use crate::model::{Fresh, Provenance, Rests};
use crate::record::Delivery;

/// Requests with more fields, or more bytes of them, are not keyed.
const MAX_KEY_FIELDS: usize = 64;
const MAX_KEY_BYTES: usize = 8 << 10;
/// What an entry is expected to weigh, for the memo's sizing.
const TYPICAL_ENTRY_BYTES: u64 = 16 << 10;
/// Statuses an answer may be kept with. Not a 206: its part shares the whole body's
/// buffer, which a kept part would hold while weighing as the part.
const KEPT_STATUSES: [StatusCode; 3] = [
    StatusCode::OK,
    StatusCode::IM_USED,
    StatusCode::NOT_MODIFIED,
];

/// The prepared responses of one pipeline.
pub struct Prepared {
    answers: Bounded<RequestKey, Arc<Kept>>,
    store: Store,
    cache: Arc<Cache>,
    background: Background,
    /// Configuration reloads: each may change any answer.
    reloads: AtomicU64,
}

/// An answer kept.
pub struct Kept {
    /// [`Prepared::epoch`] when the stages began making it.
    epoch: u64,
    pub made: Made,
    /// What the key and the fields weigh, with the body: the memo's bound.
    weight: u64,
}

/// What the stages' answer to a keyed request was, and what sending it again redoes.
pub struct Made {
    pub rests: Rests,
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub whole: WholeBody,
    pub delivery: Delivery,
    /// The request record's resource.
    pub resource: String,
    /// Preload links in the response, for the hint metrics.
    pub links: usize,
}

impl Prepared {
    /// `bytes` of answers at most; `None` when that is 0, or the cache has no store
    /// or a shared one.
    pub fn new(bytes: u64, cache: &Arc<Cache>, background: &Background) -> Option<Prepared> {
        let store = cache
            .store
            .as_ref()
            .filter(|s| bytes > 0 && s.shared_state().is_none())?;
        let entries = (bytes / TYPICAL_ENTRY_BYTES).clamp(16, 1 << 20) as usize;
        Some(Prepared {
            answers: Bounded::with_weight(bytes, entries, |kept: &Arc<Kept>| kept.weight),
            store: store.clone(),
            cache: cache.clone(),
            background: background.clone(),
            reloads: AtomicU64::new(0),
        })
    }

    /// The sum of the counts that move when anything an answer is made from may
    /// have changed.
    pub fn epoch(&self) -> u64 {
        self.store.changes()
            + self.cache.hot.changes()
            + self.background.changes()
            + self.reloads.load(Ordering::Acquire)
    }

    /// A reload put a new configuration in force: no answer made before stands.
    pub fn reloaded(&self) {
        self.reloads.fetch_add(1, Ordering::AcqRel);
    }

    /// The answer kept for `key` while nothing it was made from changed and
    /// `still_holds` says what else it rests on (its instance, a choice) stands.
    pub fn answer(
        &self,
        key: &KeyRef<'_>,
        still_holds: impl FnOnce(&Rests) -> bool,
    ) -> Option<Arc<Kept>> {
        let kept = self.answers.get(key)?;
        if kept.epoch == self.epoch() && still_holds(&kept.made.rests) {
            return Some(kept);
        }
        self.answers.remove(key);
        None
    }

    /// Keeps what the stages made for `key`, begun at `epoch`, when it may be sent
    /// again: nothing changed while it was made, and it is an answer to keep.
    /// Returns whether it was kept.
    pub fn keep(&self, key: RequestKey, epoch: u64, made: Made) -> bool {
        let keepable = KEPT_STATUSES.contains(&made.status)
            && !made.headers.contains_key(header::SET_COOKIE)
            && epoch == self.epoch();
        if !keepable {
            return false;
        }
        let weight = key.weight()
            + fields_weight(&made.headers)
            + made.whole.body.len() as u64
            + made.resource.len() as u64;
        let kept = Kept {
            epoch,
            made,
            weight,
        };
        self.answers.insert(key, Arc::new(kept));
        true
    }
}

impl Kept {
    /// Makes `headers` the fields to send now: the kept ones, in their order, with
    /// `Age` as it is now when they have one (a 304 has none). What `headers` held is
    /// cleared; its memory is reused (a clone would allocate three times).
    pub fn headers_now_into(&self, headers: &mut HeaderMap) {
        headers.clear();
        for (name, value) in &self.made.headers {
            headers.append(name, value.clone());
        }
        if let Some(fresh) = &self.made.rests.fresh {
            if let Some(age) = headers.get_mut(header::AGE) {
                *age = HeaderValue::from(fresh.age_now().as_secs());
            }
        }
    }

    /// The request record's delivery now: a cache hit's age as it is now.
    pub fn delivery_now(&self) -> Delivery {
        let mut delivery = self.made.delivery.clone();
        if let (Some(Provenance::Hit { age }), Some(fresh)) =
            (&mut delivery.cache, &self.made.rests.fresh)
        {
            *age = Fresh::age_now(fresh);
        }
        delivery
    }

    /// Whether the instance was a fresh cache hit (counted as one again).
    pub fn is_cache_hit(&self) -> bool {
        self.made.rests.fresh.is_some()
    }

    /// How the stages' answer to the same request differs from this one, if
    /// it does (`cache.prepared_verify`): status, body, fields (`Age` within a second,
    /// as the two were read at different times).
    pub fn difference(&self, stages: &Made) -> Option<String> {
        if stages.status != self.made.status {
            return Some(format!(
                "status {} instead of {}",
                self.made.status, stages.status
            ));
        }
        if stages.whole.body != self.made.whole.body {
            return Some(format!(
                "a body of {} bytes instead of {}",
                self.made.whole.body.len(),
                stages.whole.body.len()
            ));
        }
        let age = |headers: &HeaderMap| -> Option<u64> {
            headers.get(header::AGE)?.to_str().ok()?.parse().ok()
        };
        let mut kept = HeaderMap::new();
        self.headers_now_into(&mut kept);
        match (age(&kept), age(&stages.headers)) {
            (Some(a), Some(b)) if a.abs_diff(b) <= 1 => {}
            (None, None) => {}
            (a, b) => return Some(format!("Age {a:?} instead of {b:?}")),
        }
        kept.remove(header::AGE);
        let mut expected = stages.headers.clone();
        expected.remove(header::AGE);
        if kept != expected {
            let names = |h: &HeaderMap| {
                h.iter()
                    .map(|(n, v)| format!("{n}: {}", String::from_utf8_lossy(v.as_bytes())))
                    .collect::<Vec<_>>()
            };
            let (sent, wanted) = (names(&kept), names(&expected));
            let extra: Vec<_> = sent.iter().filter(|f| !wanted.contains(f)).collect();
            let missing: Vec<_> = wanted.iter().filter(|f| !sent.contains(f)).collect();
            return Some(format!("fields {extra:?} instead of {missing:?}"));
        }
        None
    }
}

/// A request as received, borrowed: what an answer is looked up by.
pub struct KeyRef<'a> {
    method: &'a Method,
    uri: &'a Uri,
    version: Version,
    tls: bool,
    fields: &'a HeaderMap,
}

impl<'a> KeyRef<'a> {
    /// The key of `req` over a connection with or without TLS, when its answer may
    /// be prepared: `GET` or `HEAD` without a body, credentials or an upgrade, and
    /// fields within the bounds.
    pub fn of<B>(req: &'a Request<B>, tls: bool) -> Option<KeyRef<'a>> {
        let fields = req.headers();
        let plain = matches!(*req.method(), Method::GET | Method::HEAD)
            && fields.len() <= MAX_KEY_FIELDS
            && !fields.contains_key(header::TRANSFER_ENCODING)
            && fields
                .get_all(header::CONTENT_LENGTH)
                .iter()
                .all(|v| v.as_bytes() == b"0")
            && ![header::COOKIE, header::AUTHORIZATION, header::UPGRADE]
                .iter()
                .any(|name| fields.contains_key(name))
            && fields_weight(fields) <= MAX_KEY_BYTES as u64;
        plain.then_some(KeyRef {
            method: req.method(),
            uri: req.uri(),
            version: req.version(),
            tls,
            fields,
        })
    }

    /// An owned copy: the field values are copied, not shared with the connection's
    /// read buffer they were parsed from.
    pub fn owned(&self) -> RequestKey {
        RequestKey {
            method: self.method.clone(),
            uri: self.uri.clone(),
            version: self.version,
            tls: self.tls,
            fields: self
                .fields
                .iter()
                .map(|(name, value)| {
                    // Valid bytes, as they came from a valid value: the fallback
                    // (sharing the buffer) is never taken.
                    let mut copy =
                        HeaderValue::from_bytes(value.as_bytes()).unwrap_or_else(|_| value.clone());
                    copy.set_sensitive(value.is_sensitive());
                    (name.clone(), copy)
                })
                .collect(),
        }
    }
}

/// A request as received, owned: what an answer is kept under.
pub struct RequestKey {
    method: Method,
    uri: Uri,
    version: Version,
    tls: bool,
    fields: Box<[(HeaderName, HeaderValue)]>,
}

impl RequestKey {
    fn weight(&self) -> u64 {
        let fields: usize = self
            .fields
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len())
            .sum();
        (self.uri.to_string().len() + fields) as u64
    }
}

/// The parts of a key, hashed alike for the owned and the borrowed form.
fn hash_key<'f, H: Hasher>(
    state: &mut H,
    method: &Method,
    uri: &Uri,
    version: Version,
    tls: bool,
    fields: impl Iterator<Item = (&'f HeaderName, &'f HeaderValue)>,
) {
    method.as_str().hash(state);
    uri_parts(uri).hash(state);
    version.hash(state);
    tls.hash(state);
    for (name, value) in fields {
        name.as_str().hash(state);
        value.as_bytes().hash(state);
    }
}

fn uri_parts(uri: &Uri) -> (Option<&str>, Option<&str>, Option<&str>) {
    (
        uri.scheme_str(),
        uri.authority().map(|a| a.as_str()),
        uri.path_and_query().map(|p| p.as_str()),
    )
}

impl Hash for RequestKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let fields = self.fields.iter().map(|(n, v)| (n, v));
        hash_key(
            state,
            &self.method,
            &self.uri,
            self.version,
            self.tls,
            fields,
        );
    }
}

impl Hash for KeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_key(
            state,
            self.method,
            self.uri,
            self.version,
            self.tls,
            self.fields.iter(),
        );
    }
}

impl PartialEq for RequestKey {
    fn eq(&self, other: &RequestKey) -> bool {
        self.method == other.method
            && uri_parts(&self.uri) == uri_parts(&other.uri)
            && self.version == other.version
            && self.tls == other.tls
            && self.fields == other.fields
    }
}

impl Eq for RequestKey {}

impl Equivalent<RequestKey> for KeyRef<'_> {
    fn equivalent(&self, key: &RequestKey) -> bool {
        *self.method == key.method
            && uri_parts(self.uri) == uri_parts(&key.uri)
            && self.version == key.version
            && self.tls == key.tls
            && self.fields.len() == key.fields.len()
            && self
                .fields
                .iter()
                .zip(key.fields.iter())
                .all(|((n, v), (kn, kv))| n == kn && v.as_bytes() == kv.as_bytes())
    }
}

fn fields_weight(fields: &HeaderMap) -> u64 {
    fields
        .iter()
        .map(|(n, v)| (n.as_str().len() + v.len()) as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash_of(value: &impl Hash) -> u64 {
        let mut hasher = DefaultHasher::new();
        value.hash(&mut hasher);
        hasher.finish()
    }

    fn request(fields: &[(&'static str, &'static str)]) -> Request<()> {
        let mut builder = Request::get("/page.html?x=1");
        for (name, value) in fields {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn a_borrowed_key_finds_its_owned_copy_and_nothing_else() {
        let asked = request(&[("host", "a"), ("accept-encoding", "br")]);
        let key = KeyRef::of(&asked, false).unwrap();
        let owned = key.owned();
        assert_eq!(hash_of(&key), hash_of(&owned));
        assert!(key.equivalent(&owned));
        let others = [
            request(&[("host", "a"), ("accept-encoding", "gzip")]),
            request(&[("host", "a")]),
            request(&[("accept-encoding", "br"), ("host", "a")]),
            request(&[
                ("host", "a"),
                ("accept-encoding", "br"),
                ("save-data", "on"),
            ]),
        ];
        for other in &others {
            let other = KeyRef::of(other, false).unwrap();
            assert!(!other.equivalent(&owned), "{:?}", other.fields);
        }
        assert!(
            !KeyRef::of(&asked, true).unwrap().equivalent(&owned),
            "scheme"
        );
        let mut head = request(&[("host", "a"), ("accept-encoding", "br")]);
        *head.method_mut() = Method::HEAD;
        assert!(!KeyRef::of(&head, false).unwrap().equivalent(&owned));
    }

    #[test]
    fn requests_with_bodies_credentials_or_upgrades_are_never_keyed() {
        for fields in [
            &[("cookie", "session=1")][..],
            &[("authorization", "Bearer x")],
            &[("content-length", "5")],
            &[("transfer-encoding", "chunked")],
            &[("upgrade", "websocket"), ("connection", "upgrade")],
        ] {
            assert!(KeyRef::of(&request(fields), false).is_none(), "{fields:?}");
        }
        assert!(KeyRef::of(&request(&[("content-length", "0")]), false).is_some());
        let post = Request::post("/").body(()).unwrap();
        assert!(KeyRef::of(&post, false).is_none());
        let long = "x".repeat(MAX_KEY_BYTES);
        let big = Request::get("/").header("x-big", long).body(()).unwrap();
        assert!(KeyRef::of(&big, false).is_none());
    }
}
