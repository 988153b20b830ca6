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
//! Modules: `exchange` (the URL, one request and its response, bytes on the wire),
//! `delta` (what a request offers and how an answer is decoded and verified against
//! it), `cache` (what is kept between runs, on disk), `report` and `error`.

mod cache;
mod delta;
mod error;
mod exchange;
mod report;

use std::path::PathBuf;
use std::time::Duration;

use http::StatusCode;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub use error::GetError;
pub use report::{DictionaryFetch, Report, Wire};

use cache::Cache;
use delta::{interpret, Offer};
use exchange::{announced_dictionaries, exchange, HttpClient, Target};

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

/// Fetches `options.url` with every delta the cache makes possible, verifies and
/// stores the result, and returns it with the byte accounting.
pub async fn run(options: &GetOptions) -> Result<Report, GetError> {
    let target = Target::parse(&options.url)?;
    let connector =
        connect::connector(options.ca_file.as_deref(), options.timeout).map_err(GetError::Tls)?;
    let client: HttpClient = Client::builder(TokioExecutor::new()).build(connector);
    let mut cache = Cache::open(&options.cache_dir)?;

    let offer = Offer::from_cache(&cache, &target);
    let first = exchange(
        &client,
        &target.uri,
        offer.request_headers(),
        options.timeout,
        options.max_body,
    )
    .await?;
    let mut wire = first.wire;
    let (outcome, refetched_after) = match interpret(&cache, &offer, &first, options.max_body) {
        Ok(outcome) => (outcome, None),
        Err(reason) => {
            let plain_offer = Offer::default();
            let plain = exchange(
                &client,
                &target.uri,
                plain_offer.request_headers(),
                options.timeout,
                options.max_body,
            )
            .await?;
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
        for link in announced_dictionaries(&outcome.headers, &target) {
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
        options.timeout,
        options.max_body,
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
