//! `wirefold get`: a client that speaks every encoding and delta wirefold serves —
//! br/zstd/gzip/deflate, RFC 9842 `dcb`/`dcz` against dictionaries it keeps, RFC 3229
//! `226 IM Used` with VCDIFF against instances it keeps — and reports bytes on the
//! wire against bytes delivered.
//!
//! Nothing wrong is ever delivered: a response that fails to decode, names a base or
//! dictionary that was not offered, or reconstructs to content whose
//! `Wirefold-Digest` differs is discarded, and the URL is fetched once more plain
//! (no delta, no dictionary). The report says when that happened.
//!
//! The cache directory holds `index.json` (instances per URL, newest first, and
//! dictionaries with their origin and `match` pattern) and `blobs/<sha256>`, the
//! decoded contents; every file is written to a temporary name and renamed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use codec::dictionary::DictionaryCoding;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use store::Hash;
use wirefold_http::cache_control::CacheControl;
use wirefold_http::conditional::EntityTag;
use wirefold_http::delta::{A_IM, DELTA_BASE, IM};
use wirefold_http::dictionary::{
    available_dictionary_value, use_as_dictionary_match, AVAILABLE_DICTIONARY,
};
use wirefold_http::digest::instance_digest;
use wirefold_http::ContentCoding;

/// Instances kept per URL: the bases offered for a delta.
const KEEP_INSTANCES: usize = 4;
/// Dictionaries kept in all; the oldest goes first.
const KEEP_DICTIONARIES: usize = 64;
const PLAIN_CODINGS: &str = "br, zstd, gzip, deflate";

pub struct GetOptions {
    pub url: String,
    pub cache_dir: PathBuf,
    /// Extra PEM roots trusted for https, besides the webpki roots.
    pub ca_file: Option<PathBuf>,
    /// Follow `Link: rel="compression-dictionary"`.
    pub fetch_dictionaries: bool,
    /// Per exchange, from connecting to the end of the body.
    pub timeout: Duration,
    /// Bound on a body, on the wire and decoded.
    pub max_body: usize,
}

impl GetOptions {
    pub fn new(url: impl Into<String>, cache_dir: impl Into<PathBuf>) -> Self {
        GetOptions {
            url: url.into(),
            cache_dir: cache_dir.into(),
            ca_file: None,
            fetch_dictionaries: true,
            timeout: Duration::from_secs(30),
            max_body: 256 * 1024 * 1024,
        }
    }
}

/// `$XDG_CACHE_HOME/wirefold`, else `~/.cache/wirefold`, else `./wirefold-cache`.
pub fn default_cache_dir() -> PathBuf {
    let non_empty = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    non_empty("XDG_CACHE_HOME")
        .map(|d| d.join("wirefold"))
        .or_else(|| non_empty("HOME").map(|h| h.join(".cache/wirefold")))
        .unwrap_or_else(|| PathBuf::from("wirefold-cache"))
}

/// Bytes received for one or more exchanges. Header bytes are approximate: the
/// response head as HTTP/1.1 text (status line, fields, blank line), whatever the
/// protocol. Body bytes are counted after transfer framing (chunking) is removed.
#[derive(Serialize, Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wire {
    pub body_bytes: u64,
    pub header_bytes: u64,
}

impl Wire {
    pub fn total(&self) -> u64 {
        self.body_bytes + self.header_bytes
    }
    fn add(&mut self, other: Wire) {
        self.body_bytes += other.body_bytes;
        self.header_bytes += other.header_bytes;
    }
}

#[derive(Serialize)]
pub struct Report {
    pub url: String,
    /// The status of the response that delivered the instance.
    pub status: u16,
    /// How: `br`, `identity`, `dcz against 1a2b3c4d`, `vcdiff against "tag"`, `cached`.
    pub delivery: String,
    /// The instance matched the response's `Wirefold-Digest`.
    pub verified: bool,
    /// The request's exchanges, a plain refetch included; dictionary fetches apart.
    pub wire: Wire,
    pub delivered_bytes: u64,
    /// `1 - wire.total() / delivered_bytes`, in percent.
    pub saved_percent: f64,
    /// Why the first answer was discarded and the URL fetched plain, if it was.
    pub refetched_after: Option<String>,
    pub dictionary_fetches: Vec<DictionaryFetch>,
    #[serde(skip)]
    pub body: Bytes,
}

#[derive(Serialize, Debug)]
pub struct DictionaryFetch {
    pub url: String,
    pub status: u16,
    pub wire: Wire,
    /// Kept as a dictionary (it carried `Use-As-Dictionary` and decoded cleanly).
    pub stored: bool,
}

impl Report {
    /// The report without the body, for `--json`.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("reports serialize")
    }

    /// One line for humans: status, delivery, bytes, savings, verification.
    pub fn summary(&self) -> String {
        let mut line = format!(
            "{} {} · wire {} B (body {} + headers ~{}) · delivered {} B · saved {:.1}% · {}",
            self.status,
            self.delivery,
            self.wire.total(),
            self.wire.body_bytes,
            self.wire.header_bytes,
            self.delivered_bytes,
            self.saved_percent,
            if self.verified {
                "sha-256 verified"
            } else {
                "unverified (no Wirefold-Digest)"
            },
        );
        if let Some(reason) = &self.refetched_after {
            line.push_str(&format!(
                " · first answer discarded ({reason}), refetched plain"
            ));
        }
        for fetch in &self.dictionary_fetches {
            let kept = if fetch.stored { "kept" } else { "not kept" };
            line.push_str(&format!(
                " · dictionary {} {kept}: {} B on the wire",
                fetch.url,
                fetch.wire.total()
            ));
        }
        line
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GetError {
    #[error(
        "`{url}` is not a usable URL: {reason} (expected http://host[:port]/path or https://…)"
    )]
    Url { url: String, reason: String },
    #[error("--ca-file {0}")]
    Tls(String),
    #[error("cache {path}: {detail}")]
    Cache { path: PathBuf, detail: String },
    #[error("{url}: {detail}")]
    Transfer { url: String, detail: String },
    #[error("{url}: no verified instance (first answer: {first}; plain refetch: {plain})")]
    Unverifiable {
        url: String,
        first: String,
        plain: String,
    },
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// Fetches `options.url` with every delta the cache makes possible, verifies and
/// stores the result, and returns it with the byte accounting.
pub async fn run(options: &GetOptions) -> Result<Report, GetError> {
    let target = Target::parse(&options.url)?;
    let connector =
        connect::connector(options.ca_file.as_deref(), options.timeout).map_err(GetError::Tls)?;
    let client: HttpClient = Client::builder(TokioExecutor::new()).build(connector);
    let mut cache = Cache::open(&options.cache_dir)?;

    let offer = Offer::from_cache(&cache, &target);
    let first = exchange(&client, &target.uri, offer.request_headers(), options).await?;
    let mut wire = first.wire;
    let (outcome, refetched_after) = match interpret(&cache, &offer, &first, options.max_body) {
        Ok(outcome) => (outcome, None),
        Err(reason) => {
            let plain_offer = Offer::default();
            let plain =
                exchange(&client, &target.uri, plain_offer.request_headers(), options).await?;
            wire.add(plain.wire);
            let outcome =
                interpret(&cache, &plain_offer, &plain, options.max_body).map_err(|plain| {
                    GetError::Unverifiable {
                        url: options.url.clone(),
                        first: reason.clone(),
                        plain,
                    }
                })?;
            (outcome, Some(reason))
        }
    };

    cache.remember(&target, &outcome)?;
    let mut dictionary_fetches = Vec::new();
    if options.fetch_dictionaries {
        for link in dictionary_links(&outcome.headers, &target) {
            if !cache
                .index
                .dictionaries
                .iter()
                .any(|d| d.source == link.url)
            {
                dictionary_fetches.push(fetch_dictionary(&client, &mut cache, link, options).await);
            }
        }
    }
    cache.save()?;

    let delivered = outcome.instance.len() as u64;
    let saved_percent = match delivered {
        0 => 0.0,
        n => 100.0 * (1.0 - wire.total() as f64 / n as f64),
    };
    Ok(Report {
        url: options.url.clone(),
        status: outcome.status.as_u16(),
        delivery: outcome.delivery,
        verified: outcome.verified,
        wire,
        delivered_bytes: delivered,
        saved_percent,
        refetched_after,
        dictionary_fetches,
        body: outcome.instance,
    })
}

/// The URL and the parts dictionaries are scoped by.
struct Target {
    uri: Uri,
    /// `scheme://host:port`: dictionaries are used only within one origin.
    origin: String,
    url: String,
}

impl Target {
    fn parse(url: &str) -> Result<Target, GetError> {
        let bad = |reason: &str| GetError::Url {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        let scheme = match uri.scheme_str() {
            Some(s @ ("http" | "https")) => s.to_string(),
            Some(_) => return Err(bad("only http and https are supported")),
            None => return Err(bad("it has no scheme")),
        };
        let host = uri.host().ok_or_else(|| bad("it has no host"))?;
        let port = uri
            .port_u16()
            .unwrap_or(if scheme == "https" { 443 } else { 80 });
        let origin = format!("{scheme}://{host}:{port}");
        Ok(Target {
            url: uri.to_string(),
            origin,
            uri,
        })
    }

    /// The request URL as a `match` pattern sees it: the path, with the query when
    /// the pattern names one.
    fn matched_by(&self, pattern: &str) -> bool {
        let subject = match pattern.contains('?') {
            true => self.uri.path_and_query().map_or("/", |pq| pq.as_str()),
            false => self.uri.path(),
        };
        wirefold_http::url_pattern::matches(pattern, subject)
    }
}

/// What the request tells the server the client holds.
#[derive(Default)]
struct Offer {
    /// Instances of this URL, newest first.
    held: Vec<InstanceEntry>,
    /// The best matching dictionary and its bytes.
    dictionary: Option<(Hash, Bytes)>,
}

impl Offer {
    fn from_cache(cache: &Cache, target: &Target) -> Offer {
        let held = cache
            .index
            .resources
            .get(&target.url)
            .cloned()
            .unwrap_or_default();
        let held = held
            .into_iter()
            .filter(|i| i.hash().is_some_and(|h| cache.has_blob(&h)))
            .collect();
        // RFC 9842 §2.2.2: the longest match wins, then the most recent.
        let dictionary = cache
            .index
            .dictionaries
            .iter()
            .filter(|d| d.origin == target.origin && target.matched_by(&d.pattern))
            .max_by_key(|d| (d.pattern.len(), d.time))
            .and_then(|d| d.hash())
            .and_then(|hash| cache.blob(&hash).map(|bytes| (hash, bytes)));
        Offer { held, dictionary }
    }

    fn request_headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let user_agent = concat!("wirefold-get/", env!("CARGO_PKG_VERSION"));
        headers.insert(header::USER_AGENT, HeaderValue::from_static(user_agent));
        let accept = match self.dictionary {
            Some(_) => HeaderValue::from_static("br, zstd, gzip, deflate, dcb, dcz"),
            None => HeaderValue::from_static(PLAIN_CODINGS),
        };
        headers.insert(header::ACCEPT_ENCODING, accept);
        if let Some((hash, _)) = &self.dictionary {
            headers.insert(AVAILABLE_DICTIONARY, available_dictionary_value(&hash.0));
        }
        let tags: Vec<&str> = self.held.iter().map(|i| i.etag.as_str()).collect();
        // RFC 3229 §10.5.3: a delta request names the instances it could be based on.
        if let (false, Ok(list)) = (tags.is_empty(), HeaderValue::from_str(&tags.join(", "))) {
            headers.insert(A_IM, HeaderValue::from_static("vcdiff"));
            headers.insert(header::IF_NONE_MATCH, list);
        }
        headers
    }

    fn held_by_tag(&self, tag: &str) -> Option<&InstanceEntry> {
        let tag = EntityTag::parse(tag)?;
        self.held
            .iter()
            .find(|i| EntityTag::parse(&i.etag).is_some_and(|t| t.weak_eq(&tag)))
    }
}

/// One response, read whole.
struct Exchange {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    wire: Wire,
}

async fn exchange(
    client: &HttpClient,
    uri: &Uri,
    headers: HeaderMap,
    options: &GetOptions,
) -> Result<Exchange, GetError> {
    let failed = |detail: String| GetError::Transfer {
        url: uri.to_string(),
        detail,
    };
    let mut request = Request::get(uri.clone())
        .body(Empty::new())
        .expect("a GET of a parsed URI is valid");
    *request.headers_mut() = headers;
    let transfer = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| failed(error_chain(&e)))?;
        let (head, mut body) = response.into_parts();
        let mut received = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| failed(format!("body: {}", error_chain(&e))))?;
            if let Ok(data) = frame.into_data() {
                if received.len() + data.len() > options.max_body {
                    return Err(failed(format!(
                        "body over the limit of {} bytes",
                        options.max_body
                    )));
                }
                received.extend_from_slice(&data);
            }
        }
        let header_bytes = head_size(head.status, &head.headers);
        let wire = Wire {
            body_bytes: received.len() as u64,
            header_bytes,
        };
        Ok(Exchange {
            status: head.status,
            headers: head.headers,
            body: Bytes::from(received),
            wire,
        })
    };
    tokio::time::timeout(options.timeout, transfer)
        .await
        .map_err(|_| failed(format!("no complete answer within {:?}", options.timeout)))?
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

/// The head's size as HTTP/1.1 text: `HTTP/1.1 200 OK\r\n`, `name: value\r\n` each, `\r\n`.
fn head_size(status: StatusCode, headers: &HeaderMap) -> u64 {
    let status_line = "HTTP/1.1 200 \r\n".len() + status.canonical_reason().unwrap_or("").len();
    let fields: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + 2 + value.len() + 2)
        .sum();
    (status_line + fields + 2) as u64
}

/// A response turned into the instance it stands for.
struct Outcome {
    status: StatusCode,
    headers: HeaderMap,
    instance: Bytes,
    hash: Hash,
    delivery: String,
    verified: bool,
    /// The instance came from the cache (304): nothing new to keep but its recency.
    cached: bool,
}

/// Decodes, applies and verifies a response against what was offered; `Err` says why
/// it must not be delivered.
fn interpret(
    cache: &Cache,
    offer: &Offer,
    exchange: &Exchange,
    limit: usize,
) -> Result<Outcome, String> {
    let headers = &exchange.headers;
    let (instance, delivery, cached) = match exchange.status {
        StatusCode::NOT_MODIFIED => {
            let held =
                held_for_304(offer, headers).ok_or("304 for an instance that was not offered")?;
            let hash = held.hash().ok_or("cache index names a malformed hash")?;
            let bytes = cache.blob(&hash).ok_or("the cached instance is gone")?;
            (bytes, "cached".to_string(), true)
        }
        StatusCode::IM_USED => {
            let base_tag = field(headers, &DELTA_BASE).ok_or("226 without Delta-Base")?;
            let base = offer.held_by_tag(&base_tag).ok_or_else(|| {
                format!("226 against Delta-Base {base_tag}, which was not offered")
            })?;
            let base_bytes = base
                .hash()
                .and_then(|h| cache.blob(&h))
                .ok_or("the delta base is gone from the cache")?;
            let (mut data, _) = decode_content(headers, &exchange.body, offer, limit)?;
            let ims = field(headers, &IM).ok_or("226 without IM")?;
            for im in ims.split(',').map(|t| t.trim().to_ascii_lowercase()).rev() {
                data = match (im.as_str(), ContentCoding::from_token(&im)) {
                    ("vcdiff", _) => codec::vcdiff::decode(&base_bytes, &data, limit)
                        .map_err(|e| format!("vcdiff: {e}"))?,
                    (_, Some(coding)) => {
                        codec::decompress(coding, &data, limit).map_err(|e| e.to_string())?
                    }
                    _ => return Err(format!("unsupported instance manipulation `{im}`")),
                };
            }
            (
                Bytes::from(data),
                format!("{ims} against {base_tag}"),
                false,
            )
        }
        _ => {
            let (data, delivery) = decode_content(headers, &exchange.body, offer, limit)?;
            (Bytes::from(data), delivery, false)
        }
    };
    let hash = Hash::of(&instance);
    let verified = match instance_digest(headers) {
        Some(expected) if expected != hash.0 => {
            return Err(format!("digest mismatch after {delivery}"))
        }
        Some(_) => true,
        None => false,
    };
    Ok(Outcome {
        status: exchange.status,
        headers: headers.clone(),
        instance,
        hash,
        delivery,
        verified,
        cached,
    })
}

/// The offered instance a 304 confirms: named by digest when the server sends one,
/// else by validator.
fn held_for_304<'a>(offer: &'a Offer, headers: &HeaderMap) -> Option<&'a InstanceEntry> {
    match instance_digest(headers) {
        Some(digest) => offer
            .held
            .iter()
            .find(|i| i.hash().is_some_and(|h| h.0 == digest)),
        None => offer.held_by_tag(&field(headers, &header::ETAG)?),
    }
}

/// Removes the content codings in reverse order of application; returns the
/// content and a description (`br`, `dcz against 1a2b3c4d`, `identity`).
fn decode_content(
    headers: &HeaderMap,
    body: &[u8],
    offer: &Offer,
    limit: usize,
) -> Result<(Vec<u8>, String), String> {
    let codings: Vec<String> = field(headers, &header::CONTENT_ENCODING)
        .unwrap_or_default()
        .split(',')
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty() && t != "identity")
        .collect();
    let mut data = body.to_vec();
    let mut described = Vec::new();
    for token in codings.iter().rev() {
        if let Some(coding) = ContentCoding::from_token(token) {
            data = codec::decompress(coding, &data, limit).map_err(|e| e.to_string())?;
            described.push(token.clone());
        } else if let Some(coding) = DictionaryCoding::from_token(token) {
            let (hash, dictionary) = offer
                .dictionary
                .as_ref()
                .ok_or_else(|| format!("{token} without a dictionary offered"))?;
            // The decoder checks that the body's header names this dictionary.
            data = codec::dictionary::decode(coding, dictionary, &data, limit)
                .map_err(|e| e.to_string())?;
            described.push(format!("{token} against {}", &hash.to_hex()[..8]));
        } else {
            return Err(format!("unsupported content coding `{token}`"));
        }
    }
    described.reverse();
    let description = if described.is_empty() {
        "identity".to_string()
    } else {
        described.join(", ")
    };
    Ok((data, description))
}

fn field(headers: &HeaderMap, name: &header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_string())
}

/// `Link: <url>; rel="compression-dictionary"` targets on the same origin.
fn dictionary_links(headers: &HeaderMap, target: &Target) -> Vec<Target> {
    let mut links = Vec::new();
    for value in headers
        .get_all(header::LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
    {
        for link in value.split(',') {
            let Some((reference, params)) = link
                .trim()
                .strip_prefix('<')
                .and_then(|l| l.split_once('>'))
            else {
                continue;
            };
            let is_dictionary = params.split(';').any(|p| {
                p.trim().split_once('=').is_some_and(|(k, v)| {
                    k.trim().eq_ignore_ascii_case("rel")
                        && v.trim()
                            .trim_matches('"')
                            .eq_ignore_ascii_case("compression-dictionary")
                })
            });
            let resolved = match (
                reference.starts_with('/') && !reference.starts_with("//"),
                target.uri.authority(),
            ) {
                (true, Some(authority)) => format!(
                    "{}://{authority}{reference}",
                    target.uri.scheme_str().unwrap_or("http")
                ),
                _ => reference.to_string(),
            };
            if let (true, Ok(link)) = (is_dictionary, Target::parse(&resolved)) {
                if link.origin == target.origin {
                    links.push(link);
                }
            }
        }
    }
    links
}

/// Fetches a dictionary a response pointed at, plain, and keeps it when it declares
/// itself one (`Use-As-Dictionary`) and verifies.
async fn fetch_dictionary(
    client: &HttpClient,
    cache: &mut Cache,
    target: Target,
    options: &GetOptions,
) -> DictionaryFetch {
    let url = target.url.clone();
    let fetched = exchange(
        client,
        &target.uri,
        Offer::default().request_headers(),
        options,
    )
    .await;
    // A failed dictionary fetch costs the request nothing but the attempt.
    let Ok(response) = fetched else {
        return DictionaryFetch {
            url,
            status: 0,
            wire: Wire::default(),
            stored: false,
        };
    };
    let stored = response.status == StatusCode::OK
        && interpret(cache, &Offer::default(), &response, options.max_body).is_ok_and(|outcome| {
            cache
                .remember_dictionary(&target, &outcome)
                .unwrap_or(false)
        });
    DictionaryFetch {
        url,
        status: response.status.as_u16(),
        wire: response.wire,
        stored,
    }
}

#[derive(Serialize, Deserialize, Default)]
struct Index {
    /// Per URL, its instances newest first (at most `KEEP_INSTANCES`).
    resources: BTreeMap<String, Vec<InstanceEntry>>,
    /// Newest first.
    dictionaries: Vec<DictionaryEntry>,
}

#[derive(Serialize, Deserialize, Clone)]
struct InstanceEntry {
    etag: String,
    sha256: String,
    time: u64,
}

#[derive(Serialize, Deserialize, Clone)]
struct DictionaryEntry {
    origin: String,
    pattern: String,
    sha256: String,
    /// The URL it came from.
    source: String,
    time: u64,
}

impl InstanceEntry {
    fn hash(&self) -> Option<Hash> {
        self.sha256.parse().ok()
    }
}

impl DictionaryEntry {
    fn hash(&self) -> Option<Hash> {
        self.sha256.parse().ok()
    }
}

struct Cache {
    dir: PathBuf,
    index: Index,
}

impl Cache {
    fn open(dir: &Path) -> Result<Cache, GetError> {
        let failed = |path: &Path, detail: String| GetError::Cache {
            path: path.to_path_buf(),
            detail,
        };
        std::fs::create_dir_all(dir.join("blobs")).map_err(|e| failed(dir, e.to_string()))?;
        let index_path = dir.join("index.json");
        let index = match std::fs::read(&index_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                failed(
                    &index_path,
                    format!("unreadable ({e}); remove it to start with an empty cache"),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Index::default(),
            Err(e) => return Err(failed(&index_path, e.to_string())),
        };
        Ok(Cache {
            dir: dir.to_path_buf(),
            index,
        })
    }

    fn blob_path(&self, hash: &Hash) -> PathBuf {
        self.dir.join("blobs").join(hash.to_hex())
    }

    fn has_blob(&self, hash: &Hash) -> bool {
        self.blob_path(hash).is_file()
    }

    /// The content, if present and intact (a damaged file is never offered or served).
    fn blob(&self, hash: &Hash) -> Option<Bytes> {
        let bytes = std::fs::read(self.blob_path(hash)).ok()?;
        (Hash::of(&bytes) == *hash).then(|| Bytes::from(bytes))
    }

    fn put_blob(&self, hash: &Hash, bytes: &[u8]) -> Result<(), GetError> {
        let path = self.blob_path(hash);
        if self.blob(hash).is_some() {
            return Ok(());
        }
        write_atomically(&path, bytes)
    }

    /// Keeps a delivered instance under its URL and, when it declares itself one, as
    /// a dictionary. A 304 only makes its instance the newest.
    fn remember(&mut self, target: &Target, outcome: &Outcome) -> Result<(), GetError> {
        if !keepable(&outcome.headers) || !(outcome.status.is_success() || outcome.cached) {
            return Ok(());
        }
        let held = self.index.resources.entry(target.url.clone()).or_default();
        let previous = held
            .iter()
            .position(|i| i.sha256 == outcome.hash.to_hex())
            .map(|at| held.remove(at));
        let etag = field(&outcome.headers, &header::ETAG).filter(|t| EntityTag::parse(t).is_some());
        if let Some(etag) = etag.or(previous.map(|p| p.etag)) {
            held.insert(
                0,
                InstanceEntry {
                    etag,
                    sha256: outcome.hash.to_hex(),
                    time: now(),
                },
            );
            held.truncate(KEEP_INSTANCES);
        }
        if !outcome.cached {
            self.put_blob(&outcome.hash, &outcome.instance)?;
            self.remember_dictionary(target, outcome)?;
        }
        Ok(())
    }

    /// Keeps the outcome as a dictionary for its origin if it carries
    /// `Use-As-Dictionary` with a path pattern. Returns whether it did.
    fn remember_dictionary(
        &mut self,
        target: &Target,
        outcome: &Outcome,
    ) -> Result<bool, GetError> {
        let Some(pattern) =
            use_as_dictionary_match(&outcome.headers).filter(|p| p.starts_with('/'))
        else {
            return Ok(false);
        };
        if !keepable(&outcome.headers) {
            return Ok(false);
        }
        self.put_blob(&outcome.hash, &outcome.instance)?;
        // One dictionary per (origin, pattern): a newer one replaces it.
        self.index
            .dictionaries
            .retain(|d| !(d.origin == target.origin && d.pattern == pattern));
        self.index.dictionaries.insert(
            0,
            DictionaryEntry {
                origin: target.origin.clone(),
                pattern,
                sha256: outcome.hash.to_hex(),
                source: target.url.clone(),
                time: now(),
            },
        );
        self.index.dictionaries.truncate(KEEP_DICTIONARIES);
        Ok(true)
    }

    /// Writes the index, then removes blobs it no longer names.
    fn save(&self) -> Result<(), GetError> {
        let index = serde_json::to_vec_pretty(&self.index).expect("the index serializes");
        write_atomically(&self.dir.join("index.json"), &index)?;
        let named: std::collections::HashSet<&str> = self
            .index
            .resources
            .values()
            .flatten()
            .map(|i| i.sha256.as_str())
            .chain(self.index.dictionaries.iter().map(|d| d.sha256.as_str()))
            .collect();
        let Ok(entries) = std::fs::read_dir(self.dir.join("blobs")) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            // Temporary files of a concurrent run are left alone; they are renamed or gone soon.
            if name
                .to_str()
                .is_some_and(|n| n.len() == 64 && !named.contains(n))
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(())
    }
}

/// A private cache may keep anything but `no-store`; `no-store, im` on a 226 lets a
/// delta-aware cache keep the result (RFC 3229 §10.8).
fn keepable(headers: &HeaderMap) -> bool {
    let im = headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|d| d.trim().eq_ignore_ascii_case("im"));
    !CacheControl::from_headers(headers).no_store || im
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), GetError> {
    let failed = |e: std::io::Error| GetError::Cache {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let temporary = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&temporary, bytes).map_err(failed)?;
    std::fs::rename(&temporary, path).map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        failed(e)
    })
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str) -> Target {
        Target::parse(url).unwrap()
    }

    #[test]
    fn targets_know_their_origin_and_patterns() {
        let t = target("http://example.com/js/app.v2.js?x=1");
        assert_eq!(t.origin, "http://example.com:80");
        assert!(t.matched_by("/js/app.*.js"));
        assert!(!t.matched_by("/js/app.*.js?y=*"));
        assert!(t.matched_by("/js/*?x=*"));
        assert!(Target::parse("ftp://example.com/").is_err());
        assert!(Target::parse("/relative").is_err());
    }

    #[test]
    fn dictionary_links_stay_on_the_origin() {
        let mut headers = HeaderMap::new();
        headers.append(
            header::LINK,
            HeaderValue::from_static(
                "</d/1>; rel=\"compression-dictionary\", </style.css>; rel=preload",
            ),
        );
        headers.append(
            header::LINK,
            HeaderValue::from_static("<http://other.example/d/2>; rel=compression-dictionary"),
        );
        headers.append(
            header::LINK,
            HeaderValue::from_static("<https://a.example:443/d/3>; rel=\"compression-dictionary\""),
        );
        let links = dictionary_links(&headers, &target("https://a.example/page"));
        let links: Vec<&str> = links.iter().map(|t| t.url.as_str()).collect();
        assert_eq!(
            links,
            ["https://a.example/d/1", "https://a.example:443/d/3"]
        );
    }

    #[test]
    fn head_size_counts_http1_text() {
        let mut headers = HeaderMap::new();
        headers.insert(header::ETAG, HeaderValue::from_static("\"a\""));
        assert_eq!(
            head_size(StatusCode::OK, &headers),
            ("HTTP/1.1 200 OK\r\n".len() + "etag: \"a\"\r\n".len() + 2) as u64
        );
    }

    #[test]
    fn a_corrupt_index_is_reported_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.json"), b"{not json").unwrap();
        let err = Cache::open(dir.path()).err().unwrap().to_string();
        assert!(
            err.contains("index.json") && err.contains("remove it"),
            "{err}"
        );
        assert_eq!(
            std::fs::read(dir.path().join("index.json")).unwrap(),
            b"{not json"
        );
    }
}
