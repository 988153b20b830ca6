//! Delta encoding: send only what changed since an instance the client holds.
//!
//! - RFC 3229: a client lists the validators of instances it holds (`If-None-Match`)
//!   and accepts `A-IM: vcdiff`; wirefold answers `226 IM Used` with a VCDIFF delta
//!   against a version from the resource's [`history`].
//! - RFC 9842: a client names the dictionary it holds (`Available-Dictionary`) and
//!   accepts `dcb`/`dcz`; wirefold compresses against it if that content is this
//!   site's ([`dictionaries`]). Reusable text responses announce themselves as
//!   dictionaries with `Use-As-Dictionary`; pages a browser will not keep get a
//!   derived dictionary announced with `Link: rel="compression-dictionary"`, and so
//!   do the scripts and stylesheets it will not keep, linked from the pages that
//!   reference them ([`subresources`]).
//!
//! A delta is sent only when it is smaller than the plain encoding; the cost model
//! decides whether one is worth making now or only in the background.

pub mod blocking;
pub mod config;
pub mod derived;
pub mod dictionaries;
pub mod history;
pub mod subresources;
pub mod training;

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;

use bytes::Bytes;
use codec::cost::{NetworkPath, Work};
use codec::dictionary::DictionaryCoding;
use http::header::{self, HeaderMap, HeaderValue};
use store::{Hash, Store};
use wirefold_http::accept_encoding::AcceptEncoding;
use wirefold_http::audience::audience;
use wirefold_http::cache_control::CacheControl;
use wirefold_http::conditional::{EntityTag, IfNoneMatch};
use wirefold_http::delta::AcceptedManipulations;
use wirefold_http::dictionary::{dictionary_allowed, use_as_dictionary};

use crate::config::DeltaConfig;
use crate::derived::{DerivedBodies, Produce, Variant};
use crate::dictionaries::Destination;
use crate::subresources::PageSubresources;
use store::memo::{Bounded, Equivalent};

/// What the delta engine reads of a request, parsed once by the server's `classify`.
pub struct DeltaRequest<'a> {
    /// Whose content this is: dictionaries are used only within one site.
    pub site: &'a str,
    /// Site, path and query: histories are kept per resource.
    pub resource: &'a str,
    pub uri: &'a http::Uri,
    /// The request's fields, for the rules that weigh them against the response's
    /// (audience, dictionary readability).
    pub headers: &'a HeaderMap,
    pub accept_encoding: &'a AcceptEncoding,
    pub if_none_match: Option<&'a IfNoneMatch>,
    pub accepted_manipulations: Option<&'a AcceptedManipulations>,
    pub available_dictionary: Option<Hash>,
    /// The path is configured public: a cookie does not make it personal.
    pub public_path: bool,
}

/// The delta engine: chooses and makes deltas for a request, announces dictionaries,
/// and records the versions deltas are made from.
pub struct DeltaEngine {
    /// Swapped whole by a configuration reload; each call reads one version.
    config: ArcSwap<DeltaConfig>,
    /// Absent when caching is disabled: no history, no dictionaries, no deltas.
    store: Option<Store>,
    bodies: Arc<DerivedBodies>,
    announcements: DictionaryAnnouncements,
    subresources: PageSubresources,
}

/// A delta the client can apply.
pub enum DeltaChoice {
    /// RFC 3229: answered as `226 IM Used`, `IM: vcdiff`, `Delta-Base: base_etag`.
    Vcdiff { body: Bytes, base_etag: String },
    /// RFC 9842: `Content-Encoding: dcb|dcz` against the client's dictionary.
    Dictionary {
        coding: DictionaryCoding,
        body: Bytes,
    },
}

impl DeltaChoice {
    /// Bytes of the body to send.
    pub fn body_len(&self) -> usize {
        match self {
            DeltaChoice::Vcdiff { body, .. } | DeltaChoice::Dictionary { body, .. } => body.len(),
        }
    }
}

impl DeltaEngine {
    pub fn new(config: DeltaConfig, store: Option<Store>, bodies: Arc<DerivedBodies>) -> Self {
        DeltaEngine {
            config: ArcSwap::from_pointee(config),
            store,
            bodies,
            announcements: DictionaryAnnouncements::default(),
            subresources: PageSubresources::default(),
        }
    }

    /// The configuration deltas are made under now.
    pub fn config(&self) -> Arc<DeltaConfig> {
        self.config.load_full()
    }

    /// Makes later deltas and announcements under `config`, forgetting the
    /// announcements memoized under the previous one.
    pub fn set_config(&self, config: DeltaConfig) {
        self.config.store(Arc::new(config));
        self.announcements.clear();
    }

    /// The smallest delta the client can use that beats `plain_len`, if any.
    /// `headers` are the instance's response fields.
    pub async fn choose(
        &self,
        request: &DeltaRequest<'_>,
        headers: &HeaderMap,
        hash: Hash,
        content: &Bytes,
        plain_len: usize,
    ) -> Option<DeltaChoice> {
        // A delta needs a base the client holds: an instance it lists or a dictionary.
        if request.if_none_match.is_none() && request.available_dictionary.is_none() {
            return None;
        }
        let config = &*self.config.load();
        let store = self.store.clone()?;
        let path = NetworkPath::from_bits_per_second(config.assumed_bandwidth_bps);
        let mut best: Option<DeltaChoice> = None;

        let held = match request.if_none_match {
            Some(IfNoneMatch::Tags(listed)) => with_codings_removed(listed.clone()),
            _ => Vec::new(),
        };
        let accepted = request.accepted_manipulations;
        let delta_aware = accepted.is_some();
        let current = EntityTag::from_headers(headers);
        if delta_aware && current.is_some_and(|c| held.iter().any(|h| h.weak_eq(&c))) {
            return None; // it holds the current instance: `respond` answers 304
        }
        if config.vcdiff && !held.is_empty() && accepted.is_some_and(|a| a.accepts("vcdiff")) {
            best = self
                .vcdiff(
                    &store,
                    request.resource,
                    hash,
                    content,
                    &held,
                    plain_len,
                    path,
                )
                .await;
        }

        let offered = config
            .dictionary_preference()
            .into_iter()
            .find(|c| request.accept_encoding.accepts_token(c.token()));
        if let (true, Some(coding), Some(dictionary_hash)) =
            (config.dictionaries, offered, request.available_dictionary)
        {
            if dictionary_allowed(request.headers, headers) {
                let limit = best.as_ref().map_or(plain_len, DeltaChoice::body_len);
                let found = self
                    .dictionary(
                        &store,
                        request.site,
                        hash,
                        content,
                        dictionary_hash,
                        coding,
                        limit,
                        path,
                    )
                    .await;
                if found.is_some() {
                    best = found;
                }
            }
        }
        best
    }

    #[allow(clippy::too_many_arguments)]
    async fn vcdiff(
        &self,
        store: &store::Store,
        resource: &str,
        hash: Hash,
        content: &Bytes,
        held: &[EntityTag],
        plain_len: usize,
        path: NetworkPath,
    ) -> Option<DeltaChoice> {
        let (store_ref, resource) = (store.clone(), resource.to_string());
        let held_tags = held.to_vec();
        let base = tokio::task::spawn_blocking(move || -> Option<(Hash, String, Bytes)> {
            let history = history::load(&store_ref, &resource).ok()?;
            let version = history.base_for(&held_tags, &hash)?;
            let base_hash = version.hash()?;
            let bytes = store_ref.get_blob(&base_hash).ok()??;
            Some((base_hash, version.etag.clone()?, bytes))
        })
        .await
        .ok()??;
        let (base_hash, base_etag, base) = base;
        let input = (base.len() + content.len()) as u64;
        let variant = Variant::Vcdiff { base: base_hash };
        if !path.worth_computing(Work::Vcdiff, input, plain_len as u64)
            && !self.bodies.in_memory(&hash, &variant)
        {
            return None;
        }
        let produce = move || -> Produce {
            let target = content.clone();
            Arc::new(move |_| codec::vcdiff::encode(&base, &target))
        };
        let body = self
            .bodies
            .get_or_make(hash, input as usize, &variant, None, 0, produce)
            .await;
        (body.len() < plain_len).then_some(DeltaChoice::Vcdiff { body, base_etag })
    }

    #[allow(clippy::too_many_arguments)]
    async fn dictionary(
        &self,
        store: &store::Store,
        site: &str,
        hash: Hash,
        content: &Bytes,
        dictionary_hash: Hash,
        coding: DictionaryCoding,
        limit: usize,
        path: NetworkPath,
    ) -> Option<DeltaChoice> {
        let (store_ref, site) = (store.clone(), site.to_string());
        let dictionary = tokio::task::spawn_blocking(move || {
            dictionaries::dictionary_for(&store_ref, &dictionary_hash, &site)
        })
        .await
        .ok()?
        .ok()??;
        let (quick, best) = dictionary_levels(coding);
        let input = (dictionary.len() + content.len()) as u64;
        let quick_work = Work::Dictionary {
            coding,
            level: quick,
        };
        // The first answer after a change: as strong a level as the cost model says
        // pays now (the kept level is made in the background unless this is it).
        let now = path.dictionary_level_now(coding, quick, best, input, limit as u64);
        let variant = Variant::DictionaryCoded {
            coding,
            dictionary: dictionary_hash,
            level: best,
        };
        let already = self.bodies.in_memory(&hash, &variant)
            || self.bodies.in_memory(&hash, &variant.at_level(now));
        if !already && !path.worth_computing(quick_work, input, limit as u64) {
            return None;
        }
        let produce = move || -> Produce {
            let target = content.clone();
            Arc::new(move |level| codec::dictionary::encode(coding, level, &dictionary, &target))
        };
        let body = self
            .bodies
            .get_or_make(hash, input as usize, &variant, Some(now), best, produce)
            .await;
        (body.len() < limit).then_some(DeltaChoice::Dictionary { coding, body })
    }

    /// Adds `Use-As-Dictionary` to a reusable text response a browser may keep. For
    /// what it will not keep (instantly stale): a page gets a `Link` to its derived
    /// dictionary, and a script or stylesheet gets one published, which the pages that
    /// reference it link (`Link` fields to the derived dictionaries of their
    /// same-site subresources, at most `delta.subresource_dictionaries`). A response
    /// that is not the same for everyone (`audience`) is neither announced nor derived
    /// from and links no derived dictionary; it still links the site's trained
    /// dictionaries, which are public. `content` is the instance's body (`hash`), `cc`
    /// its `Cache-Control` as parsed from `headers`. Returns when the page links added
    /// are next read again from the store (their memo expires), if any were.
    pub async fn announce(
        &self,
        request: &DeltaRequest<'_>,
        headers: &mut HeaderMap,
        cc: &CacheControl,
        hash: Hash,
        content: &Bytes,
    ) -> Option<Instant> {
        let config = self.config.load_full();
        let store = self.store.clone()?;
        if !config.enabled
            || !config.dictionaries
            || headers.contains_key(wirefold_http::dictionary::USE_AS_DICTIONARY)
        {
            return None;
        }
        let uri = request.uri;
        let for_everyone = audience(request.headers, headers, request.public_path).may_derive();
        let pattern = || dictionaries::pattern_for(&config, uri.path(), uri.query());
        let keeps = browser_keeps(cc, headers);
        let html = is_html(headers);
        if keeps && for_everyone {
            // The value depends only on the resource (path and query) and the configuration:
            // memoized, so a hot resource costs no pattern inference per request.
            let value = match self.announcements.use_as(request.resource, html) {
                Some(value) => value,
                None => {
                    let dest: &[&str] = if html { &["document"] } else { &[] };
                    let value = use_as_dictionary(&pattern(), dest, None);
                    self.announcements
                        .put_use_as(request.resource, html, value.clone());
                    value
                }
            };
            if let Some(value) = value {
                headers.insert(wirefold_http::dictionary::USE_AS_DICTIONARY, value);
            }
        }
        let derive = for_everyone && config.derived_dictionaries;
        if !html {
            if derive && !keeps && content.len() <= MAX_DERIVED_SUBRESOURCE_BYTES {
                let destination = headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(Destination::of_subresource_type);
                if let Some(destination) = destination {
                    self.publish_subresource(&store, request.site, pattern(), destination, hash)
                        .await;
                }
            }
            return None;
        }
        // Pages get links to the dictionaries that serve them: a trained one (first
        // visits to any page it covers); for pages a browser will not keep, one derived
        // from the page itself (later visits to this page); and those derived from the
        // scripts and stylesheets it references (their next change).
        let page_derived = derive && !keeps;
        let subresource_limit = if derive {
            config.subresource_dictionaries
        } else {
            0
        };
        let page = PageKeyRef {
            site: request.site,
            path: uri.path(),
            page_derived,
            subresources: subresource_limit > 0,
        };
        let (links, until) = match self.announcements.page_links(&page) {
            Some(links) => links,
            None => {
                // The page's URL (a parse) is needed only to read its references.
                let page_url = (subresource_limit > 0).then(|| page_url(request)).flatten();
                let subresources = match &page_url {
                    Some(url) => self.subresources.of(hash, url, content).await,
                    None => Arc::default(),
                };
                let (site, path, pattern) =
                    (request.site.to_string(), uri.path().to_string(), pattern());
                let config = config.clone();
                let links = tokio::task::spawn_blocking(move || {
                    let mut links = Vec::new();
                    links.extend(training::trained_for(&store, &site, &path));
                    if page_derived {
                        let derived = dictionaries::current_derived(
                            &store,
                            &site,
                            &pattern,
                            Destination::Document,
                            &hash,
                        );
                        links.extend(derived.ok().flatten().map(|link| link.url));
                    }
                    let published = subresources.iter().filter_map(|s| {
                        let pattern =
                            dictionaries::pattern_for(&config, &s.path, s.query.as_deref());
                        dictionaries::published_derived(&store, &site, &pattern, s.destination)
                            .ok()
                            .flatten()
                    });
                    links.extend(published.take(subresource_limit));
                    let mut seen = std::collections::HashSet::new();
                    links.retain(|url| seen.insert(url.clone()));
                    links
                })
                .await
                .unwrap_or_default();
                let values: Arc<[HeaderValue]> = links
                    .iter()
                    .filter_map(|url| {
                        HeaderValue::from_str(&format!("<{url}>; rel=\"compression-dictionary\""))
                            .ok()
                    })
                    .collect();
                self.announcements
                    .put_page_links(page.owned(), values.clone());
                (values, Some(Instant::now() + PAGE_LINKS_TTL))
            }
        };
        for value in links.iter() {
            headers.append(header::LINK, value.clone());
        }
        until
    }

    /// Publishes the derived dictionary of an instantly stale script or stylesheet
    /// (kept while stored), so the pages referencing it can link it. A new publication
    /// makes pages' memoized links stale: they are recomputed at their next request.
    async fn publish_subresource(
        &self,
        store: &Store,
        site: &str,
        pattern: String,
        destination: Destination,
        hash: Hash,
    ) {
        let key = (site.to_string(), pattern, destination);
        if self.announcements.published(&key) {
            return;
        }
        let (store, (site, pattern, _)) = (store.clone(), key.clone());
        let link = tokio::task::spawn_blocking(move || {
            dictionaries::current_derived(&store, &site, &pattern, destination, &hash)
        })
        .await;
        match link {
            Ok(Ok(Some(link))) => {
                self.announcements.put_published(key);
                if link.newly_published {
                    self.announcements.links.clear();
                }
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "subresource dictionary not published"),
            _ => {}
        }
    }
}

/// Scripts and stylesheets above this size get no derived dictionary: a browser
/// fetches a linked dictionary whole, beside the resource itself, and every later
/// delta indexes all of it.
pub const MAX_DERIVED_SUBRESOURCE_BYTES: usize = 4 << 20;

/// The absolute URL the client asked for the page at (`http://host/path`), from the
/// request's authority or `Host`: relative references resolve against it and
/// same-site references share its origin.
fn page_url(request: &DeltaRequest<'_>) -> Option<String> {
    let authority = match request.uri.authority() {
        Some(authority) => authority.as_str().to_string(),
        None => request
            .headers
            .get(header::HOST)?
            .to_str()
            .ok()?
            .to_string(),
    };
    let url = format!("http://{authority}{}", request.uri.path());
    url::Url::parse(&url).ok().map(String::from)
}

/// The validators a client listed, plus each with wirefold's coding suffix removed:
/// a client that decoded our `W/"abc-br"` holds the instance `"abc"`.
fn with_codings_removed(listed: Vec<EntityTag>) -> Vec<EntityTag> {
    let suffixes: Vec<String> = wirefold_http::ContentCoding::ALL
        .iter()
        .map(|c| c.token())
        .chain(DictionaryCoding::ALL.iter().map(|c| c.token()))
        .map(|t| format!("-{t}"))
        .collect();
    let mut held = listed.clone();
    for tag in listed {
        if let Some(opaque) = suffixes
            .iter()
            .find_map(|s| tag.opaque.strip_suffix(s.as_str()))
        {
            held.push(EntityTag {
                weak: tag.weak,
                opaque: opaque.to_string(),
            });
        }
    }
    held
}

/// (quickest answer now, make in the background and keep) levels per dictionary
/// coding; the level answered now is chosen between them by the cost model.
pub fn dictionary_levels(coding: DictionaryCoding) -> (u32, u32) {
    match coding {
        DictionaryCoding::Dcz => (3, 19),
        DictionaryCoding::Dcb => (5, 11),
    }
}

/// The dictionary announcements of recently served responses, so a hot resource costs
/// no pattern inference and a hot page no index reads: pages' `Link` fields to their
/// dictionaries change only when a dictionary is trained or its body evicted, and a
/// few seconds late is harmless; a resource's `Use-As-Dictionary` value is a function
/// of the resource and the configuration.
pub struct DictionaryAnnouncements {
    /// Pages' `Link: <url>; rel="compression-dictionary"` values.
    links: Bounded<PageKey, Arc<[HeaderValue]>>,
    /// resource → (whether it was HTML, the `Use-As-Dictionary` value).
    use_as: Bounded<String, (bool, Option<HeaderValue>)>,
    /// Subresources whose derived dictionary is published: no store read per request.
    published: Bounded<PublishedKey, ()>,
}

/// A page's links are kept by its site and path, whether the page's own derived
/// dictionary applies and whether its subresources' do.
#[derive(Clone, PartialEq, Eq, Hash)]
struct PageKey {
    site: String,
    path: String,
    page_derived: bool,
    subresources: bool,
}

/// A [`PageKey`] borrowed from the request, to look one up without copying the site
/// and path. Its fields are in the same order and hash alike (a `String` hashes as its
/// `str`), as a lookup by an equivalent key needs.
#[derive(Hash)]
struct PageKeyRef<'a> {
    site: &'a str,
    path: &'a str,
    page_derived: bool,
    subresources: bool,
}

impl PageKeyRef<'_> {
    fn owned(&self) -> PageKey {
        PageKey {
            site: self.site.to_string(),
            path: self.path.to_string(),
            page_derived: self.page_derived,
            subresources: self.subresources,
        }
    }
}

impl Equivalent<PageKey> for PageKeyRef<'_> {
    fn equivalent(&self, key: &PageKey) -> bool {
        self.site == key.site
            && self.path == key.path
            && self.page_derived == key.page_derived
            && self.subresources == key.subresources
    }
}

/// (site, `match` pattern, destination) of a subresource's derived dictionary.
type PublishedKey = (String, String, Destination);

const PAGE_LINKS_TTL: std::time::Duration = std::time::Duration::from_secs(5);
const ANNOUNCEMENTS_CAPACITY: usize = 16_384;

impl Default for DictionaryAnnouncements {
    fn default() -> Self {
        DictionaryAnnouncements {
            links: Bounded::with_entries(ANNOUNCEMENTS_CAPACITY).expiring_after(PAGE_LINKS_TTL),
            use_as: Bounded::with_entries(ANNOUNCEMENTS_CAPACITY),
            published: Bounded::with_entries(ANNOUNCEMENTS_CAPACITY).expiring_after(PAGE_LINKS_TTL),
        }
    }
}

impl DictionaryAnnouncements {
    /// The `Link` field values (`<url>; rel="compression-dictionary"`) for a page, and
    /// when they are next read from the store.
    fn page_links(&self, page: &PageKeyRef<'_>) -> Option<(Arc<[HeaderValue]>, Option<Instant>)> {
        self.links.get_until(page)
    }

    fn clear(&self) {
        self.links.clear();
        self.use_as.clear();
        self.published.clear();
    }

    fn published(&self, key: &PublishedKey) -> bool {
        self.published.get(key).is_some()
    }

    fn put_published(&self, key: PublishedKey) {
        self.published.insert(key, ());
    }

    fn put_page_links(&self, page: PageKey, links: Arc<[HeaderValue]>) {
        self.links.insert(page, links);
    }

    /// The memoized `Use-As-Dictionary` value of (resource, is HTML), if known.
    fn use_as(&self, resource: &str, html: bool) -> Option<Option<HeaderValue>> {
        self.use_as
            .get(resource)
            .filter(|(was_html, _)| *was_html == html)
            .map(|(_, value)| value)
    }

    fn put_use_as(&self, resource: &str, html: bool, value: Option<HeaderValue>) {
        self.use_as.insert(resource.to_string(), (html, value));
    }
}

/// Chromium keeps a dictionary only while the response is fresh or may be served
/// stale (field notes): explicit positive freshness, or stale-while-revalidate.
fn browser_keeps(cc: &CacheControl, headers: &HeaderMap) -> bool {
    if cc.no_store || cc.private {
        return false;
    }
    if cc.stale_while_revalidate.is_some_and(|s| s > 0) {
        return true;
    }
    if cc.no_cache {
        return false;
    }
    match cc.max_age {
        Some(age) => age > 0,
        None => headers.contains_key(header::EXPIRES),
    }
}

fn is_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            ct.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/html")
        })
}

/// Appends a new instance to its resource's history and registers it as a possible
/// dictionary for its site.
pub fn record_version(
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
        Some(hash) if delta.dictionaries => {
            dictionaries::register(store, &hash, history::site_of(resource))
        }
        _ => Ok(()),
    }
}

pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pages_links_are_found_by_the_key_borrowed_from_its_request() {
        let announcements = DictionaryAnnouncements::default();
        let links: Arc<[HeaderValue]> = Arc::from([HeaderValue::from_static(
            "</d>; rel=\"compression-dictionary\"",
        )]);
        let key = |site, path, page_derived| PageKeyRef {
            site,
            path,
            page_derived,
            subresources: true,
        };
        announcements.put_page_links(key("e.com", "/a", true).owned(), links.clone());
        // Found only if the borrowed key hashes as the owned one it was kept under.
        assert_eq!(
            announcements
                .page_links(&key("e.com", "/a", true))
                .map(|(found, _)| found)
                .as_deref(),
            Some(&*links)
        );
        for other in [
            key("e.com", "/b", true),
            key("f.com", "/a", true),
            key("e.com", "/a", false),
        ] {
            assert!(announcements.page_links(&other).is_none());
        }
    }
}
