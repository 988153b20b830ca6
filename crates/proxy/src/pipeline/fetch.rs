//! Stage 2, fetch: yields the current instance — from the cache while it may be
//! reused, from the origin otherwise (conditionally when a validator is stored), or
//! from the file root. Concurrent misses for one key share one origin request.
//!
//! Errors come back as finished responses (502/504/404/405): there is nothing for
//! later stages to do with them.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use store::Hash;
use wirefold_http::audience::audience;
use wirefold_http::cache_control::CacheControl;
use wirefold_http::caching::{is_storable, may_serve_stale_on_error, reuse, Freshness, Reuse};
use wirefold_http::conditional::EntityTag;
use wirefold_http::dictionary::{use_as_dictionary, USE_AS_DICTIONARY};
use wirefold_http::ContentCoding;

use super::remember::{self, Fetched, StorePlan};
use crate::background::Background;
use crate::body::{self, error_response, Body, IdleTimedOut, Tap};
use crate::cache::{self, resource_of, site_of, Cache, Role, StoredResponse};
use crate::config::Config;
use crate::decode::{self, DecodeBudget, Unheld, WholeDecode, WholeLimits};
use crate::files::{http_date, FileContent, FileSource};
use crate::forward::ForwardOrigins;
use crate::live::LiveConfig;
use crate::metrics::Metrics;
use crate::model::{
    content_etag, etag_value, ClientProfile, ConnInfo, FileMark, Fresh, Instance, InstanceBody,
    OriginEvent, OriginObserver, OriginWait, Provenance, RequestContext, Rests, StreamCoding,
};
use crate::origin::{clean_response_head, is_request_body_error, Origin, OriginError};
use delta::dictionaries::{self, DERIVED_PREFIX};
use delta::DeltaEngine;

/// Where current instances come from.
pub enum Source {
    Origin(Arc<Origin>),
    Files(Box<FileSource>),
    /// The origin each request names in its absolute URI (a server proxy's link).
    Forward(Box<ForwardOrigins>),
}

impl Source {
    /// Whose content a request is for: the upstream host, `root` for the file source,
    /// or the origin a forwarded request names (which must be absolute).
    pub fn site_for(&self, profile: &ClientProfile) -> Result<String, String> {
        Ok(match self {
            Source::Origin(origin) => origin
                .upstream_host(profile.host.as_ref())
                .to_str()
                .unwrap_or_default()
                .to_string(),
            Source::Files(_) => "root".to_string(),
            Source::Forward(_) => ForwardOrigins::site_of(&profile.uri)
                .ok_or("a server proxy needs an absolute http:// or https:// URI")?,
        })
    }
}

/// What `fetch` works with: the source of instances, the cache in front of it, and
/// the limits on what it reads.
pub struct Fetcher {
    live: Arc<LiveConfig>,
    source: Source,
    cache: Arc<Cache>,
    /// For the background revalidations that run `remember` themselves.
    deltas: Arc<DeltaEngine>,
    metrics: Arc<Metrics>,
    background: Background,
    /// Decoded bytes buffered bodies may hold (`limits.max_decoding_memory`).
    decode_budget: Arc<DecodeBudget>,
}

impl Fetcher {
    pub fn new(
        live: Arc<LiveConfig>,
        source: Source,
        cache: Arc<Cache>,
        deltas: Arc<DeltaEngine>,
        metrics: Arc<Metrics>,
        background: Background,
    ) -> Self {
        // Fixed at start: a reload keeps `limits.max_decoding_memory`.
        let decode_budget = DecodeBudget::new(live.current().limits.max_decoding_memory, &metrics);
        Fetcher {
            live,
            source,
            cache,
            deltas,
            metrics,
            background,
            decode_budget,
        }
    }

    /// The configuration in force now.
    fn config(&self) -> Arc<Config> {
        self.live.current()
    }

    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Whether `request_path` still finds the file `mark` names, unchanged: as
    /// `fetch` would find it now (`files.check_interval_ms` applies).
    pub fn finds_unchanged(&self, request_path: &str, mark: &FileMark) -> bool {
        let Source::Files(files) = &self.source else {
            return false;
        };
        let trust = Duration::from_millis(self.config().files.check_interval_ms);
        files.resolve(request_path, trust).is_some_and(|found| {
            found.len == mark.len && found.modified == mark.modified && *found.path() == *mark.path
        })
    }

    /// Whether a response is text (its media type has a compression profile): only
    /// text joins a resource's history.
    fn is_text(&self, headers: &HeaderMap) -> bool {
        headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| self.config().compression.profile_for(ct).is_some())
    }
}

/// Fields that frame a request body; a request sent without one carries neither.
const BODY_FRAMING: [header::HeaderName; 2] = [header::CONTENT_LENGTH, header::TRANSFER_ENCODING];

/// The codings wirefold asks origins for: all it can decode, so the origin may save
/// bytes on its side of the link too.
const UPSTREAM_ACCEPT_ENCODING: &str = "br, zstd, gzip, deflate";

/// Request fields that belong to the client's own cache state; a cache fill must
/// fetch the full response, and `respond` evaluates them afterwards.
const CLIENT_CONDITIONALS: [header::HeaderName; 6] = [
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
    header::IF_RANGE,
    header::RANGE,
];

/// Runs after `classify`: yields the current instance of the resource — from the
/// cache while it may be reused, from the origin otherwise (conditionally when a
/// validator is stored), or from the file root — and plans what `remember` is to
/// keep. May change only the request it sends upstream (hop-by-hop and client
/// conditional fields removed on a cache fill). An `observer` sees an origin's answer
/// arrive when it is read whole. Errors come back as finished responses.
pub async fn fetch<'a>(
    f: &'a Arc<Fetcher>,
    ctx: &RequestContext,
    req: Request<Body>,
    observer: Option<&Arc<dyn OriginObserver>>,
) -> Result<Fetched<'a>, Response<Body>> {
    if let Some(hex) = ctx.profile.uri.path().strip_prefix(DERIVED_PREFIX) {
        return derived_dictionary(f, ctx, hex).await.map(Fetched::plain);
    }
    match &f.source {
        Source::Files(files) => fetch_file(f, files, ctx).await.map(Fetched::plain_file),
        Source::Origin(origin) => fetch_origin(f, origin, ctx, req, observer).await,
        Source::Forward(forward) => {
            if let Some(refusal) = forward.refuse(&ctx.site) {
                return Err(error_response(StatusCode::FORBIDDEN, &refusal));
            }
            let origin = forward.origin(&ctx.site).map_err(|e| {
                error_response(StatusCode::BAD_REQUEST, &format!("cannot forward: {e}"))
            })?;
            fetch_origin(f, &origin, ctx, req, observer).await
        }
    }
}

/// A derived dictionary, served by wirefold itself: long-lived, content addressed,
/// announced for the page or subresource it was derived from (`match`, `match-dest`).
async fn derived_dictionary(
    f: &Fetcher,
    ctx: &RequestContext,
    hex: &str,
) -> Result<Instance, Response<Body>> {
    let not_found = || error_response(StatusCode::NOT_FOUND, "no such dictionary");
    let (Ok(hash), Some(store)) = (hex.parse::<Hash>(), f.cache.store.clone()) else {
        return Err(not_found());
    };
    if !ctx.profile.is_get_or_head() {
        return Err(not_found());
    }
    let site = ctx.site.clone();
    let found =
        tokio::task::spawn_blocking(move || dictionaries::derived(&store, &hash, &site)).await;
    let Ok(Ok(Some(dictionary))) = found else {
        return Err(not_found());
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    headers.insert(
        header::ETAG,
        etag_value(&EntityTag::strong(content_etag(&hash))),
    );
    if let Some(value) =
        use_as_dictionary(&dictionary.pattern, &[dictionary.destination.token()], None)
    {
        headers.insert(USE_AS_DICTIONARY, value);
    }
    Ok(Instance {
        status: StatusCode::OK,
        headers,
        body: InstanceBody::Whole {
            bytes: dictionary.bytes,
            hash,
        },
        provenance: Provenance::File,
        reusable: true,
        last_modified: None,
        origin_coded: None,
    })
    .inspect(|_| {
        // Content-addressed: it rests on the store alone.
        ctx.repeat.vouch(Rests::default());
    })
}

async fn fetch_file(
    f: &Fetcher,
    files: &FileSource,
    ctx: &RequestContext,
) -> Result<(Instance, Option<StorePlan>), Response<Body>> {
    let profile = &ctx.profile;
    if !profile.is_get_or_head() {
        let mut r = error_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET and HEAD are served from a root",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Err(r);
    }
    let trust = Duration::from_millis(f.config().files.check_interval_ms);
    let Some(found) = files.resolve(profile.uri.path(), trust) else {
        return Err(error_response(StatusCode::NOT_FOUND, "not found"));
    };
    let content = files
        .read(
            &found,
            f.config().limits.max_buffered_body,
            f.cache.store.as_ref(),
        )
        .await
        .map_err(|e| {
            tracing::warn!(path = %found.path().display(), error = %e, "file read failed");
            error_response(StatusCode::NOT_FOUND, "not found")
        })?;
    ctx.repeat.vouch(Rests {
        file: Some(found.mark()),
        ..Rests::default()
    });
    let resolution = &found.resolution;
    // Room for what `respond` adds: no rehash midway.
    let mut headers = HeaderMap::with_capacity(16);
    headers.insert(header::CONTENT_TYPE, resolution.content_type_value.clone());
    let config = f.config();
    let files_config = &config.files;
    let cache_control = if resolution.versioned {
        &files_config.versioned_cache_control
    } else {
        &files_config.cache_control
    };
    if let Ok(value) = HeaderValue::from_str(cache_control) {
        headers.insert(header::CACHE_CONTROL, value);
    }
    let (body, store_plan) = match content {
        FileContent::Whole {
            bytes,
            version,
            from_store,
        } => {
            let text = config
                .compression
                .profile_for(&resolution.content_type)
                .is_some();
            let resource = text.then(|| ctx.resource.clone());
            let plan = (!from_store).then(|| StorePlan::Body {
                bytes: bytes.clone(),
                resource,
            });
            if let Some(date) = &version.last_modified {
                headers.insert(header::LAST_MODIFIED, date.clone());
            }
            headers.insert(header::ETAG, version.etag.clone());
            let hash = version.hash;
            (InstanceBody::Whole { bytes, hash }, plan)
        }
        FileContent::Large(file) => {
            let mtime = found
                .modified
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default();
            let etag = EntityTag::strong(format!("{:x}-{:x}", found.len, mtime.as_nanos()));
            if let Some(date) = http_date(found.modified) {
                headers.insert(header::LAST_MODIFIED, date);
            }
            headers.insert(header::ETAG, etag_value(&etag));
            (
                InstanceBody::File {
                    file,
                    len: found.len,
                },
                None,
            )
        }
    };
    Ok((
        Instance {
            status: StatusCode::OK,
            headers,
            body,
            provenance: Provenance::File,
            reusable: true,
            last_modified: Some(found.modified),
            origin_coded: None,
        },
        store_plan,
    ))
}

async fn fetch_origin<'a>(
    f: &'a Arc<Fetcher>,
    origin: &Origin,
    ctx: &RequestContext,
    req: Request<Body>,
    observer: Option<&Arc<dyn OriginObserver>>,
) -> Result<Fetched<'a>, Response<Body>> {
    let profile = &ctx.profile;
    let is_upgrade = wirefold_http::hop_by_hop::is_upgrade_request(&profile.headers).is_some();
    let key = cache::record_key(&ctx.resource);
    // A request with a body is forwarded with it, framing and all (a GET whose
    // `Content-Length` went upstream without its bytes would desync the pooled
    // connection), and what answers it is never a cache fill.
    let uses_cache = f.cache.store.is_some()
        && profile.is_get_or_head()
        && !profile.has_body
        && !profile.has_authorization
        && !profile.cache_control.no_store
        && !is_upgrade;
    if !uses_cache {
        let unsafe_method = !profile.method.is_safe();
        let fetched = pass_through(f, origin, ctx.into(), req).await?;
        if unsafe_method
            && (fetched.instance.status.is_success() || fetched.instance.status.is_redirection())
        {
            f.cache.invalidate(&key).await;
        }
        return Ok(fetched);
    }

    if let Some((stored, headers, bytes, hash)) = f.cache.lookup(&key, &profile.headers).await {
        let now = SystemTime::now();
        let response_cc = CacheControl::from_headers(&headers);
        let freshness = stored.freshness();
        let age = freshness.current_age(now);
        let cached =
            |provenance| cached_instance(&stored, headers.clone(), bytes.clone(), hash, provenance);
        match reuse(&freshness, &response_cc, &profile.cache_control, now) {
            Reuse::Fresh => {
                f.metrics.cache_result("hit");
                // Fresh for as long as the stored response is, when the request adds no
                // directive of its own (`max-age`, `min-fresh`, `Pragma`).
                let directives = [header::CACHE_CONTROL, header::PRAGMA];
                if !directives.iter().any(|d| profile.headers.contains_key(d)) {
                    let read = std::time::Instant::now();
                    ctx.repeat.vouch(Rests {
                        expires: Some(read + freshness.lifetime().saturating_sub(age)),
                        fresh: Some(Fresh { age, read }),
                        ..Rests::default()
                    });
                }
                return Ok(Fetched::plain(cached(Provenance::Hit { age })));
            }
            Reuse::StaleWhileRevalidate => {
                f.metrics.cache_result("stale");
                spawn_revalidation(
                    f.clone(),
                    key,
                    stored.clone(),
                    profile.headers.clone(),
                    ctx.conn,
                );
                return Ok(Fetched::plain(cached(Provenance::Stale { age })));
            }
            Reuse::MustRevalidate if profile.cache_control.only_if_cached => {
                return Err(error_response(
                    StatusCode::GATEWAY_TIMEOUT,
                    "only-if-cached: no fresh stored response",
                ));
            }
            Reuse::MustRevalidate => {
                let request_cc = profile.cache_control.clone();
                return match revalidate(
                    f,
                    origin,
                    &key,
                    &stored,
                    &profile.headers,
                    ctx.into(),
                    observer,
                )
                .await
                {
                    Ok(fetched)
                        if serve_stale_instead(
                            &fetched.instance,
                            &freshness,
                            &response_cc,
                            &request_cc,
                        ) =>
                    {
                        f.metrics.cache_result("stale");
                        Ok(Fetched::plain(cached(Provenance::Stale { age })))
                    }
                    Ok(fetched) => Ok(fetched),
                    Err(e)
                        if may_serve_stale_on_error(
                            &freshness,
                            &response_cc,
                            &request_cc,
                            SystemTime::now(),
                        ) =>
                    {
                        tracing::warn!(key, error = %e, "origin failed; serving stale (stale-if-error)");
                        f.metrics.cache_result("stale");
                        Ok(Fetched::plain(cached(Provenance::Stale { age })))
                    }
                    Err(e) => Err(origin_failure(&e)),
                };
            }
        }
    }

    if profile.cache_control.only_if_cached {
        return Err(error_response(
            StatusCode::GATEWAY_TIMEOUT,
            "only-if-cached: nothing stored",
        ));
    }
    // A range or a HEAD on a miss goes upstream as asked; the next full GET fills the cache.
    if profile.wants_range || profile.method == Method::HEAD {
        f.metrics.cache_result("bypass");
        return pass_through(f, origin, ctx.into(), req).await;
    }
    // A leader abandoned midway (its requester went away) lets one follower lead
    // instead, once: the others keep waiting for that one.
    let mut led_again = false;
    let leader = loop {
        match f.cache.inflight.join(&key) {
            Role::Leader(guard) => break Some(guard),
            Role::Follower(rx) => {
                let led = cache::wait_for_leader(
                    rx,
                    Duration::from_millis(f.config().upstream.header_timeout_ms),
                )
                .await;
                if let Some((stored, headers, bytes, hash)) =
                    f.cache.lookup(&key, &profile.headers).await
                {
                    f.metrics.cache_result("coalesced");
                    let age = stored.age(SystemTime::now());
                    let instance =
                        cached_instance(&stored, headers, bytes, hash, Provenance::Hit { age });
                    return Ok(Fetched::plain(instance));
                }
                if led != cache::Led::Abandoned || std::mem::replace(&mut led_again, true) {
                    break None;
                }
            }
        }
    };
    f.metrics.cache_result("miss");
    let upstream = cache_fill_request(&profile.headers, &profile.uri, None);
    let request_time = SystemTime::now();
    let admitted = match send(f, origin, upstream, ctx.into()).await {
        Ok(response) => {
            admit(
                f,
                Method::GET,
                Some(&key),
                &profile.headers,
                response,
                request_time,
                observer,
            )
            .await
        }
        Err(e) => Err(origin_failure(&e)),
    };
    match admitted {
        Ok(mut fetched) => {
            fetched.leader = leader;
            Ok(fetched)
        }
        Err(failed) => {
            // Tried and failed: the followers do not try again behind it.
            if let Some(leader) = leader {
                leader.finish();
            }
            Err(failed)
        }
    }
}

fn serve_stale_instead(
    fresh: &Instance,
    freshness: &Freshness,
    response_cc: &CacheControl,
    request_cc: &CacheControl,
) -> bool {
    fresh.status.is_server_error()
        && may_serve_stale_on_error(freshness, response_cc, request_cc, SystemTime::now())
}

fn cached_instance(
    stored: &StoredResponse,
    headers: HeaderMap,
    bytes: Bytes,
    hash: Hash,
    provenance: Provenance,
) -> Instance {
    let last_modified = last_modified(&headers);
    Instance {
        status: stored.status(),
        headers,
        body: InstanceBody::Whole { bytes, hash },
        provenance,
        reusable: true,
        last_modified,
        origin_coded: None,
    }
}

fn last_modified(headers: &HeaderMap) -> Option<SystemTime> {
    headers
        .get(header::LAST_MODIFIED)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| httpdate::parse_http_date(s).ok())
}

/// The request a cache fill or revalidation sends: the client's fields without its
/// own conditionals or body framing (it has no body), our accepted codings, and the
/// stored validators if revalidating.
fn cache_fill_request(
    client: &HeaderMap,
    uri: &http::Uri,
    validators_from: Option<&HeaderMap>,
) -> Request<Body> {
    let mut req = Request::new(body::empty());
    *req.method_mut() = Method::GET;
    *req.uri_mut() = uri.clone();
    let headers = req.headers_mut();
    *headers = client.clone();
    for name in CLIENT_CONDITIONALS.iter().chain(&BODY_FRAMING) {
        headers.remove(name);
    }
    headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static(UPSTREAM_ACCEPT_ENCODING),
    );
    if let Some(stored) = validators_from {
        if let Some(etag) = stored.get(header::ETAG) {
            headers.insert(header::IF_NONE_MATCH, etag.clone());
        }
        if let Some(lm) = stored.get(header::LAST_MODIFIED) {
            headers.insert(header::IF_MODIFIED_SINCE, lm.clone());
        }
    }
    req
}

/// Whom an origin exchange is for: the client's connection (for `X-Forwarded-*`) and
/// where the origin's wait is recorded (the request's own, or a background refresh's).
#[derive(Clone, Copy)]
struct Requester<'a> {
    conn: ConnInfo,
    wait: &'a OriginWait,
}

impl<'a> From<&'a RequestContext> for Requester<'a> {
    fn from(ctx: &'a RequestContext) -> Self {
        Requester {
            conn: ctx.conn,
            wait: &ctx.origin_wait,
        }
    }
}

/// Sends a request upstream; counts a failure (of the exchange, or later of its body),
/// and the wait for the response head in the latency histogram and the requester's
/// record.
async fn send(
    f: &Fetcher,
    origin: &Origin,
    req: Request<Body>,
    requester: Requester<'_>,
) -> Result<Response<Body>, OriginError> {
    let (response, latency) = match origin.send(origin.prepare(req, requester.conn)).await {
        Ok(answered) => answered,
        Err(e) => {
            if let Some(kind) = e.origin_kind() {
                f.metrics.origin_error(kind);
            }
            return Err(e);
        }
    };
    f.metrics.origin_latency.observe(latency.as_secs_f64());
    requester.wait.add(latency);
    // A body that fails is counted here, once, whether it was being buffered or had
    // already been streamed on to the client (whose transfer is then aborted).
    let metrics = f.metrics.clone();
    Ok(response.map(|b| {
        body::tapped(b, move |tap| match tap {
            // Cut off with the connection when the client's request body failed.
            Tap::Failed(e) if is_request_body_error(e.as_ref()) => {}
            Tap::Failed(e) => {
                metrics.origin_error(if e.is::<IdleTimedOut>() {
                    "body_timeout"
                } else {
                    "body"
                });
            }
            Tap::Data(_) | Tap::End => {}
        })
    }))
}

/// The response for a failed origin exchange (already counted by `send`).
fn origin_failure(e: &OriginError) -> Response<Body> {
    match e {
        OriginError::RequestBody(_) => tracing::debug!(error = %e, "client request body failed"),
        _ => tracing::warn!(error = %e, "origin exchange failed"),
    }
    error_response(e.status(), &e.to_string())
}

/// Forwards a request as it is and streams the answer back; nothing is stored.
async fn pass_through<'a>(
    f: &Fetcher,
    origin: &Origin,
    requester: Requester<'_>,
    req: Request<Body>,
) -> Result<Fetched<'a>, Response<Body>> {
    let request_headers = req.headers().clone();
    let method = req.method().clone();
    let request_time = SystemTime::now();
    let response = send(f, origin, req, requester)
        .await
        .map_err(|e| origin_failure(&e))?;
    let mut fetched = admit(
        f,
        method,
        None,
        &request_headers,
        response,
        request_time,
        None,
    )
    .await?;
    fetched.instance.provenance = Provenance::Bypass;
    Ok(fetched)
}

/// A whole response that replaces a stored one during revalidation.
async fn admit_replacement<'a>(
    f: &Fetcher,
    key: &str,
    client: &HeaderMap,
    response: Response<Body>,
    request_time: SystemTime,
    observer: Option<&Arc<dyn OriginObserver>>,
) -> Result<Fetched<'a>, OriginError> {
    admit(
        f,
        Method::GET,
        Some(key),
        client,
        response,
        request_time,
        observer,
    )
    .await
    .map_err(|r| OriginError::Protocol(format!("response rejected with status {}", r.status())))
}

/// Conditional request for a stored response: a 304 refreshes and serves it, anything
/// else replaces it.
async fn revalidate<'a>(
    f: &Fetcher,
    origin: &Origin,
    key: &str,
    stored: &StoredResponse,
    client: &HeaderMap,
    requester: Requester<'_>,
    observer: Option<&Arc<dyn OriginObserver>>,
) -> Result<Fetched<'a>, OriginError> {
    let stored_headers = stored.headers();
    // Absolute, so the host forwarded is the keyed one, never the `Host` field of
    // whichever request found the entry stale (absolute form may have keyed it).
    let uri: http::Uri = format!("http://{}", resource_of(key))
        .parse()
        .or_else(|_| key_path(key).parse())
        .unwrap_or_else(|_| http::Uri::from_static("/"));
    let upstream = cache_fill_request(client, &uri, Some(&stored_headers));
    let request_time = SystemTime::now();
    let response = send(f, origin, upstream, requester).await?;
    if response.status() != StatusCode::NOT_MODIFIED {
        f.metrics.cache_result("miss");
        return admit_replacement(f, key, client, response, request_time, observer).await;
    }
    f.metrics.cache_result("revalidated");
    let mut headers = stored_headers;
    let mut update = response.into_parts().0.headers;
    clean_response_head(&mut update);
    let freshness = Freshness::updated_from_304(
        stored.status(),
        &mut headers,
        &update,
        request_time,
        SystemTime::now(),
    );
    let mut refreshed = stored.clone();
    refreshed.set_headers(&headers);
    refreshed.set_freshness(&freshness);
    let held = match f.cache.store.clone().zip(refreshed.body_hash()) {
        Some((store, hash)) => match store.get_blob_in_memory(&hash) {
            Some(bytes) => Some((bytes, hash)),
            // The store may be Redis: its answer is awaited off the reactor.
            None => crate::blocking::run(move || store.get_blob(&hash).ok().flatten())
                .await
                .map(|bytes| (bytes, hash)),
        },
        None => None,
    };
    let Some((bytes, hash)) = held else {
        // The body went since the lookup (evicted, or a shared store that stopped
        // answering): the 304 confirmed what this proxy no longer holds, so ask for
        // the whole response.
        let upstream = cache_fill_request(client, &uri, None);
        let request_time = SystemTime::now();
        let response = send(f, origin, upstream, requester).await?;
        return admit_replacement(f, key, client, response, request_time, observer).await;
    };
    let age = freshness.current_age(SystemTime::now());
    // The 304's fields answer this request: merged into the shared entry only when
    // the result may be shared at all (a 304 to one user's cookie may carry theirs).
    let public_path = f.config().cache.is_public_path(key_path(key));
    let shared = audience(client, &headers, public_path).may_cache();
    let store_plan = shared.then(|| StorePlan::CacheEntry {
        key: key.to_string(),
        response: refreshed.clone(),
        body: None,
        is_version: false,
    });
    let instance = cached_instance(
        &refreshed,
        headers,
        bytes,
        hash,
        Provenance::Revalidated { age },
    );
    Ok(Fetched {
        instance,
        store_plan,
        leader: None,
    })
}

/// The path and query of a record key (`http:<host><path>`).
fn key_path(key: &str) -> &str {
    let rest = key.strip_prefix("http:").unwrap_or(key);
    rest.find('/').map(|i| &rest[i..]).unwrap_or("/")
}

fn spawn_revalidation(
    f: Arc<Fetcher>,
    key: String,
    stored: StoredResponse,
    client: HeaderMap,
    conn: ConnInfo,
) {
    let background = f.background.clone();
    background.spawn(async move {
        let origin = match &f.source {
            Source::Origin(origin) => origin.clone(),
            Source::Forward(forward) => match forward.origin(site_of(resource_of(&key))) {
                Ok(origin) => origin,
                Err(_) => return,
            },
            Source::Files(_) => return,
        };
        let leader = match f.cache.inflight.join(&key) {
            Role::Leader(guard) => guard,
            Role::Follower(_) => return, // someone is already refreshing it
        };
        // Nobody waits for a background refresh: its origin wait goes in no record.
        let requester = Requester {
            conn,
            wait: &OriginWait::default(),
        };
        match revalidate(&f, &origin, &key, &stored, &client, requester, None).await {
            Ok(mut fetched) => {
                fetched.leader = Some(leader);
                // Drain a streamed body so a storable one completes; the client got the stale copy.
                remember::remember(&f.cache, &f.deltas, &f.metrics, fetched).await;
            }
            Err(e) => tracing::warn!(key, error = %e, "background revalidation failed"),
        }
    });
}

/// Turns an origin response into an instance: reads bodies up to the buffer limit
/// whole (decoding the origin's coding, so the store keeps content and `encode`
/// negotiates afresh), streams larger ones, and plans storage when the response is
/// storable under RFC 9111 and wirefold's sharing rules.
async fn admit<'a>(
    f: &Fetcher,
    method: Method,
    key: Option<&str>,
    request: &HeaderMap,
    response: Response<Body>,
    request_time: SystemTime,
    observer: Option<&Arc<dyn OriginObserver>>,
) -> Result<Fetched<'a>, Response<Body>> {
    let response_time = SystemTime::now();
    let (mut parts, body) = response.into_parts();
    clean_response_head(&mut parts.headers);
    let status = parts.status;
    let headers = &mut parts.headers;
    let last_modified = last_modified(headers);
    let secondary_key = cache::secondary_key(headers, request);
    let public_path = key.is_some_and(|k| f.config().cache.is_public_path(key_path(k)));
    let audience = audience(request, headers, public_path);
    let storable = key.is_some()
        && secondary_key.is_some()
        && audience.may_cache()
        && is_storable(&method, request, status, headers);

    let bodiless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
        || method == Method::HEAD;
    if bodiless {
        return Ok(Fetched::plain(Instance {
            status,
            headers: parts.headers,
            body: InstanceBody::Empty,
            provenance: Provenance::Fetched { stored: false },
            reusable: false,
            last_modified,
            origin_coded: None,
        }));
    }

    let declared_length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<u64>().ok());
    let coding = stream_coding(headers.get(header::CONTENT_ENCODING));
    headers.remove(header::CONTENT_LENGTH);
    headers.remove(header::CONTENT_ENCODING);
    let limit = f.config().limits.max_buffered_body;
    let fits = declared_length.is_none_or(|len| len <= limit as u64);
    if !fits || status == StatusCode::PARTIAL_CONTENT || matches!(coding, StreamCoding::Unknown(_))
    {
        return Ok(Fetched::plain(stream_instance(
            parts,
            body,
            coding,
            declared_length,
            last_modified,
        )));
    }
    let decoded_coding = match coding {
        StreamCoding::Known(c) => Some(c),
        _ => None,
    };
    let body = match observer {
        Some(observer) => {
            let mut fields = headers.clone();
            if decoded_coding.is_some() {
                weaken_etag(&mut fields);
            }
            observer.observe(OriginEvent::Head {
                status,
                fields,
                decode: decoded_coding,
                length: declared_length,
            });
            let observer = observer.clone();
            body::tapped(body, move |tap| match tap {
                Tap::Data(data) => observer.observe(OriginEvent::Data(data.clone())),
                Tap::End => observer.observe(OriginEvent::End),
                // Counted where the body was tapped first (`send`), and answered below.
                Tap::Failed(_) => {}
            })
        }
        None => body,
    };
    let bytes = match body::read_up_to(body, limit, declared_length).await {
        Ok(body::ReadUpTo::Complete(bytes)) => bytes,
        Ok(body::ReadUpTo::Partial(prefix, rest)) => {
            let body = body::prepend(prefix, rest);
            return Ok(Fetched::plain(stream_instance(
                parts,
                body,
                coding,
                declared_length,
                last_modified,
            )));
        }
        // Nothing has gone to the client yet: a stall is a timeout, an answer cut off
        // because the client's request body failed is the client's fault, anything
        // else a broken answer (the failure is counted by `send`).
        Err(e) if e.is::<IdleTimedOut>() => {
            tracing::warn!(error = %e, "origin stopped sending its response body");
            return Err(error_response(
                StatusCode::GATEWAY_TIMEOUT,
                &format!("origin stopped sending its body: {e}"),
            ));
        }
        Err(e) if is_request_body_error(e.as_ref()) => {
            return Err(origin_failure(&OriginError::RequestBody(e.to_string())));
        }
        Err(e) => {
            tracing::warn!(error = %e, "origin response body failed");
            return Err(error_response(
                StatusCode::BAD_GATEWAY,
                &format!("origin response body failed: {e}"),
            ));
        }
    };
    let limits = WholeLimits {
        hold: f.config().limits.max_buffered_body,
        total: f.config().limits.max_decoded_body,
    };
    let origin_coded = decoded_coding.map(|c| (c, bytes.clone()));
    let (budget, coded) = (f.decode_budget.clone(), bytes.clone());
    let decoded =
        delta::blocking::run(move || decode_and_hash(&budget, decoded_coding, coded, limits))
            .await
            .map_err(|e| {
                f.metrics.origin_error("body");
                tracing::warn!(error = %e, "origin body failed to decode");
                error_response(
                    StatusCode::BAD_GATEWAY,
                    &format!("origin sent an undecodable body: {}", explain(&e)),
                )
            })?;
    let (bytes, hash) = match decoded {
        Decoded::Whole(bytes, hash) => (bytes, hash),
        // A correct body without room in memory goes on as a stream of what was read.
        Decoded::Unheld(reason) => {
            tracing::debug!(
                reason = reason.label(),
                "decoded body not buffered: streaming it"
            );
            let body = body::full(bytes);
            return Ok(Fetched::plain(stream_instance(
                parts,
                body,
                coding,
                declared_length,
                last_modified,
            )));
        }
    };
    if decoded_coding.is_some() {
        weaken_etag(headers);
    }
    let store_plan = match (storable, key, secondary_key) {
        (true, Some(key), Some(secondary_key)) => {
            let freshness = Freshness::new(status, headers, request_time, response_time);
            let response = StoredResponse::new(secondary_key, status, headers, hash, &freshness);
            Some(StorePlan::CacheEntry {
                key: key.to_string(),
                response,
                body: Some(bytes.clone()),
                is_version: audience.may_derive() && f.is_text(headers),
            })
        }
        _ => None,
    };
    Ok(Fetched {
        instance: Instance {
            status,
            headers: parts.headers,
            body: InstanceBody::Whole { bytes, hash },
            provenance: Provenance::Fetched {
                stored: store_plan.is_some(),
            },
            reusable: store_plan.is_some(),
            last_modified,
            origin_coded,
        },
        store_plan,
        leader: None,
    })
}

fn stream_instance(
    parts: http::response::Parts,
    body: Body,
    coding: StreamCoding,
    length: Option<u64>,
    last_modified: Option<SystemTime>,
) -> Instance {
    Instance {
        status: parts.status,
        headers: parts.headers,
        body: InstanceBody::Stream {
            body,
            coding,
            length,
        },
        provenance: Provenance::Fetched { stored: false },
        reusable: false,
        last_modified,
        origin_coded: None,
    }
}

fn stream_coding(value: Option<&HeaderValue>) -> StreamCoding {
    let Some(value) = value else {
        return StreamCoding::Identity;
    };
    let Ok(text) = value.to_str() else {
        return StreamCoding::Unknown(value.clone());
    };
    let codings: Vec<&str> = text
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect();
    match codings.as_slice() {
        [] => StreamCoding::Identity,
        [one] if one.eq_ignore_ascii_case("identity") => StreamCoding::Identity,
        [one] => ContentCoding::from_token(one)
            .map_or_else(|| StreamCoding::Unknown(value.clone()), StreamCoding::Known),
        _ => StreamCoding::Unknown(value.clone()),
    }
}

/// A buffered body after decoding.
enum Decoded {
    /// Its content and the content's hash.
    Whole(Bytes, Hash),
    /// Correctly coded, but not kept in memory.
    Unheld(Unheld),
}

fn decode_and_hash(
    budget: &Arc<DecodeBudget>,
    coding: Option<ContentCoding>,
    bytes: Bytes,
    limits: WholeLimits,
) -> Result<Decoded, codec::DecodeError> {
    let bytes = match coding {
        Some(c) => match decode::decode_whole(budget, c, &bytes, limits)? {
            WholeDecode::Held(bytes) => bytes,
            WholeDecode::Unheld(reason) => return Ok(Decoded::Unheld(reason)),
        },
        None => bytes,
    };
    let hash = Hash::of(&bytes);
    Ok(Decoded::Whole(bytes, hash))
}

/// A decoding failure for a 502, naming the limit a bomb ran into.
fn explain(e: &codec::DecodeError) -> String {
    match e {
        codec::DecodeError::TooLarge { .. } => format!("{e} (limits.max_decoded_body)"),
        _ => e.to_string(),
    }
}

/// The origin's strong validator named its encoded bytes; after decoding, only a weak
/// claim of equivalence remains true.
fn weaken_etag(headers: &mut HeaderMap) {
    let Some(tag) = headers
        .get(header::ETAG)
        .and_then(|v| v.to_str().ok())
        .and_then(EntityTag::parse)
    else {
        return;
    };
    if !tag.weak {
        let weak = EntityTag {
            weak: true,
            opaque: tag.opaque,
        };
        headers.insert(header::ETAG, etag_value(&weak));
    }
}
