//! The instances the client proxy holds, in the store under its data directory: per
//! URL the newest few (body blob, final header fields, freshness), and per cluster
//! (same scheme and authority, same inferred path pattern) the newest members, so a
//! request can offer instances of similar URLs as delta bases, and per origin the
//! newest instance of the URLs kept last, so a page request can announce what the
//! server need not push (`wirefold-held`).
//!
//! Every method blocks (the store does); async callers use `spawn_blocking`.

use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde::{Deserialize, Serialize};
use store::{Hash, Store, StoreConfig, StoreError, StoreLocation};
use wirefold_http::audience::audience;
use wirefold_http::caching::{check_storable, Freshness, NotStorable};

use link_protocol::frame::{MAX_HAVE, MAX_HELD};
use proxy::cache::{decode_head, encode_head};

/// The most instances one request offers (the protocol allows [`MAX_HAVE`]).
const OFFERED: usize = 4;

const URL_RECORD: &str = "link-client/url/";
const CLUSTER_RECORD: &str = "link-client/cluster/";
const ORIGIN_RECORD: &str = "link-client/origin/";

/// One held instance of a URL.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct HeldInstance {
    hash: String,
    /// The final header fields the browser got.
    head: String,
    /// The request's values of the fields the response's `Vary` names.
    pub secondary_key: String,
    /// (response time, corrected initial age, lifetime), seconds.
    freshness: (u64, u64, u64),
}

impl HeldInstance {
    pub fn hash(&self) -> Option<Hash> {
        self.hash.parse().ok()
    }
    pub fn fields(&self) -> HeaderMap {
        decode_head(&self.head)
    }
    pub fn freshness(&self) -> Freshness {
        let (response_time, initial_age, lifetime) = self.freshness;
        Freshness::from_parts(response_time, initial_age, lifetime)
    }
}

/// Newest first.
#[derive(Serialize, Deserialize, Default)]
struct UrlRecord {
    instances: Vec<HeldInstance>,
}

/// Newest first: (URL, instance hash).
#[derive(Serialize, Deserialize, Default)]
struct ClusterRecord {
    members: Vec<(String, String)>,
}

/// What to remember about a response the browser got.
pub struct Received<'a> {
    pub url: &'a str,
    pub body: &'a [u8],
    pub fields: &'a HeaderMap,
    pub secondary_key: String,
    pub request_time: SystemTime,
    pub response_time: SystemTime,
}

#[derive(Clone)]
pub struct Instances {
    store: Store,
    /// Instances kept per URL; 0 keeps (and offers) none.
    keep: usize,
}

impl Instances {
    pub fn open(
        location: &StoreLocation,
        config: StoreConfig,
        keep: usize,
    ) -> Result<Instances, StoreError> {
        Ok(Instances {
            store: Store::open_at(location, config, None)?,
            keep,
        })
    }

    /// The newest instance held for `url`.
    pub fn newest(&self, url: &str) -> Option<HeldInstance> {
        self.url_record(url).instances.into_iter().next()
    }

    /// The hashes to offer in `wirefold-have`: the URL's two newest instances, then
    /// its cluster's, newest first, at most `OFFERED` (4). Each costs ~40 bytes of
    /// request that no HPACK table can save (it changes with every version): on a
    /// 28.8 kbit/s link, 16 of them would add 0.2 s to every request, while older
    /// instances rarely make the better base.
    pub fn offer(&self, url: &str) -> Vec<Hash> {
        if self.keep == 0 {
            return Vec::new();
        }
        let own = self
            .url_record(url)
            .instances
            .into_iter()
            .take(2)
            .map(|i| i.hash);
        let cluster = cluster_key(url)
            .map(|key| self.cluster_record(&key).members)
            .unwrap_or_default()
            .into_iter()
            .map(|(_, hash)| hash);
        let mut offer: Vec<Hash> = Vec::new();
        for hash in own.chain(cluster).filter_map(|h| h.parse().ok()) {
            if !offer.contains(&hash) {
                offer.push(hash);
            }
            if offer.len() == OFFERED {
                break;
            }
        }
        offer
    }

    /// Whether `hash` is one of the instances held for `url`.
    pub fn holds(&self, url: &str, hash: &Hash) -> bool {
        let hex = hash.to_hex();
        self.url_record(url).instances.iter().any(|i| i.hash == hex)
    }

    /// The newest instance of each of the URLs of `url`'s origin kept last, newest
    /// first, at most [`MAX_HELD`]: what a page request announces in `wirefold-held`.
    pub fn held_for_origin(&self, url: &str) -> Vec<Hash> {
        if self.keep == 0 {
            return Vec::new();
        }
        origin_key(url)
            .map(|key| self.cluster_record(&key).members)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(_, hash)| hash.parse().ok())
            .collect()
    }

    /// A held instance's body, verified by the store.
    pub fn body(&self, hash: &Hash) -> Option<Bytes> {
        self.store
            .get_blob(hash)
            .inspect_err(|e| tracing::warn!(error = %e, "reading a held instance"))
            .ok()
            .flatten()
    }

    /// Keeps a response the browser got as the URL's newest instance.
    pub fn keep(&self, received: Received<'_>) -> Result<(), StoreError> {
        if self.keep == 0 {
            return Ok(());
        }
        let hash = self.store.put_blob(received.body)?;
        let instance = HeldInstance {
            hash: hash.to_hex(),
            head: encode_head(received.fields),
            secondary_key: received.secondary_key,
            freshness: Freshness::new(
                StatusCode::OK,
                received.fields,
                received.request_time,
                received.response_time,
            )
            .to_parts(),
        };
        self.update(
            &format!("{URL_RECORD}{}", received.url),
            |record: &mut UrlRecord| {
                record.instances.retain(|i| i.hash != instance.hash);
                record.instances.insert(0, instance.clone());
                record.instances.truncate(self.keep);
            },
            |record| record.instances.iter().map(|i| i.hash.as_str()).collect(),
        )?;

        let member = (received.url.to_string(), hash.to_hex());
        if let Some(key) = cluster_key(received.url) {
            self.update(
                &key,
                |cluster: &mut ClusterRecord| {
                    cluster.members.retain(|m| *m != member);
                    cluster.members.insert(0, member.clone());
                    cluster.members.truncate(MAX_HAVE);
                },
                |cluster| cluster.members.iter().map(|(_, h)| h.as_str()).collect(),
            )?;
        }
        let Some(key) = origin_key(received.url) else {
            return Ok(());
        };
        // One member per URL: its newest instance is the one worth announcing.
        self.update(
            &key,
            |origin: &mut ClusterRecord| {
                origin.members.retain(|(url, _)| *url != member.0);
                origin.members.insert(0, member.clone());
                origin.members.truncate(MAX_HELD);
            },
            |origin| origin.members.iter().map(|(_, h)| h.as_str()).collect(),
        )
    }

    /// Changes the record under `key` in one atomic step, so that client proxies
    /// sharing one Redis (or concurrent requests of one) never drop each other's
    /// instances; `hashes` names the blobs the changed record references.
    #[allow(
        clippy::expect_used,
        reason = "the records are structs of strings, numbers and lists: serde_json fails \
                  only on maps with non-string keys and on failing `Serialize` impls"
    )]
    fn update<T: Serialize + for<'de> Deserialize<'de> + Default>(
        &self,
        key: &str,
        change: impl Fn(&mut T),
        hashes: impl Fn(&T) -> Vec<&str>,
    ) -> Result<(), StoreError> {
        self.store.update_record(key, |stored| {
            let mut record: T = stored
                .and_then(|bytes| serde_json::from_slice(bytes).ok())
                .unwrap_or_default();
            change(&mut record);
            // Blobs evicted since the record was written are dropped from its references.
            let refs: Vec<Hash> = hashes(&record)
                .into_iter()
                .filter_map(|h| h.parse().ok())
                .filter(|h| self.store.has_blob(h))
                .collect();
            let value = serde_json::to_vec(&record).expect("records serialize");
            Some((value, refs))
        })
    }

    fn url_record(&self, url: &str) -> UrlRecord {
        self.record(&format!("{URL_RECORD}{url}"))
    }

    fn cluster_record(&self, key: &str) -> ClusterRecord {
        self.record(key)
    }

    fn record<T: for<'de> Deserialize<'de> + Default>(&self, key: &str) -> T {
        match self.store.get_record(key) {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes).unwrap_or_default(),
            Ok(None) => T::default(),
            Err(e) => {
                tracing::warn!(error = %e, key, "reading a held-instance record");
                T::default()
            }
        }
    }
}

/// Whether a response may be kept as an instance (and so served fresh or offered as
/// a base to later requests, by anyone): a 200 to a GET that is the same for everyone
/// (`wirefold_http::audience`: no `Cookie` or `Authorization` sent, not `private`, no
/// `Set-Cookie`), not `no-store`, not `Vary: *`. Responses without freshness (or with
/// `no-cache`) are kept: they are bases, never served without a link round trip.
pub fn may_keep(
    method: &Method,
    request: &HeaderMap,
    status: StatusCode,
    response: &HeaderMap,
) -> bool {
    *method == Method::GET
        && status == StatusCode::OK
        && audience(request, response, false).may_derive()
        && matches!(
            check_storable(method, request, status, response),
            Ok(()) | Err(NotStorable::NoFreshnessInformation)
        )
}

/// The record of an absolute URL's origin (scheme and authority).
fn origin_key(url: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    Some(format!(
        "{ORIGIN_RECORD}{}://{}",
        uri.scheme_str()?,
        uri.authority()?
    ))
}

/// The cluster of an absolute URL: scheme, authority and the inferred pattern of
/// its path, without the query: `/item?id=1` and `/item?id=2` are one cluster, and
/// so are `/v1/app.js` and `/v2/app.js`.
fn cluster_key(url: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    Some(format!(
        "{CLUSTER_RECORD}{}://{}{}",
        uri.scheme_str()?,
        uri.authority()?,
        wirefold_http::url_pattern::infer(uri.path())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
            .collect()
    }

    fn received<'a>(url: &'a str, body: &'a [u8], f: &'a HeaderMap) -> Received<'a> {
        Received {
            url,
            body,
            fields: f,
            secondary_key: String::new(),
            request_time: SystemTime::now(),
            response_time: SystemTime::now(),
        }
    }

    #[test]
    fn keeps_the_newest_per_url_and_offers_the_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let held = Instances::open(
            &StoreLocation::Embedded(dir.path().to_owned()),
            StoreConfig::default(),
            2,
        )
        .unwrap();
        let f = fields(&[("cache-control", "no-cache")]);
        for body in [&b"one"[..], b"two", b"three"] {
            held.keep(received("http://a.test/item?id=1", body, &f))
                .unwrap();
        }
        held.keep(received("http://a.test/item?id=2", b"other", &f))
            .unwrap();
        held.keep(received("http://b.test/item?id=3", b"elsewhere", &f))
            .unwrap();
        let offer = held.offer("http://a.test/item?id=1");
        assert_eq!(
            offer,
            vec![
                Hash::of(b"three"),
                Hash::of(b"two"),
                Hash::of(b"other"),
                Hash::of(b"one")
            ]
        );
        let newest = held.newest("http://a.test/item?id=1").unwrap();
        assert_eq!(newest.hash(), Some(Hash::of(b"three")));
        assert_eq!(newest.fields()["cache-control"], "no-cache");
        assert_eq!(&held.body(&Hash::of(b"two")).unwrap()[..], b"two");
        assert_eq!(held.offer("http://a.test/item?id=9").len(), 4);
        assert!(held.offer("http://a.test/other").is_empty());
        assert!(held.holds("http://a.test/item?id=1", &Hash::of(b"two")));
        assert!(!held.holds("http://a.test/item?id=2", &Hash::of(b"two")));
        assert_eq!(
            held.held_for_origin("http://a.test/page"),
            vec![Hash::of(b"other"), Hash::of(b"three")],
            "the newest instance of each URL of the origin"
        );
    }

    #[test]
    fn keeping_none_offers_none() {
        let dir = tempfile::tempdir().unwrap();
        let held = Instances::open(
            &StoreLocation::Embedded(dir.path().to_owned()),
            StoreConfig::default(),
            0,
        )
        .unwrap();
        held.keep(received("http://a.test/x", b"x", &HeaderMap::new()))
            .unwrap();
        assert!(held.offer("http://a.test/x").is_empty());
        assert!(held.newest("http://a.test/x").is_none());
    }

    #[test]
    fn what_may_be_kept() {
        let get = Method::GET;
        let ok = StatusCode::OK;
        let none = HeaderMap::new();
        assert!(may_keep(
            &get,
            &none,
            ok,
            &fields(&[("cache-control", "no-cache")])
        ));
        assert!(may_keep(
            &get,
            &none,
            ok,
            &fields(&[("cache-control", "max-age=0")])
        ));
        assert!(may_keep(&get, &none, ok, &none));
        assert!(!may_keep(&Method::POST, &none, ok, &none));
        assert!(!may_keep(&get, &none, StatusCode::NOT_FOUND, &none));
        assert!(!may_keep(
            &get,
            &fields(&[("authorization", "Basic x")]),
            ok,
            &fields(&[("cache-control", "public")])
        ));
        for shared in ["public, max-age=60", "s-maxage=60", "no-cache"] {
            assert!(
                !may_keep(
                    &get,
                    &fields(&[("cookie", "session=alice")]),
                    ok,
                    &fields(&[("cache-control", shared)])
                ),
                "one user's page is never another's instance: {shared}"
            );
        }
        assert!(!may_keep(
            &get,
            &none,
            ok,
            &fields(&[("set-cookie", "a=b")])
        ));
        assert!(!may_keep(
            &get,
            &none,
            ok,
            &fields(&[("cache-control", "private")])
        ));
        assert!(!may_keep(
            &get,
            &none,
            ok,
            &fields(&[("cache-control", "no-store")])
        ));
        assert!(!may_keep(
            &get,
            &fields(&[("cache-control", "no-store")]),
            ok,
            &none
        ));
    }
}
