//! The upstream client: pooled connections to one origin (HTTP/1.1, and HTTP/2 when a
//! TLS origin offers it by ALPN), forwarding rules and timeouts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{HeaderName, HeaderValue, HOST, VIA};
use http::uri::Authority;
use http::{Request, Response, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use wirefold_http::hop_by_hop::remove_hop_by_hop;

use http_body_util::BodyExt;

use crate::body::{self, Body, BoxError, IdleTimeout};
use crate::config::UpstreamConfig;
use crate::destinations::{Destinations, Resolver};
use crate::model::ConnInfo;

/// The link client's TLS configuration is the origin client's (`wirefold-connect`).
pub use connect::tls_client_config;

/// What the proxy appends to `Via` (RFC 9110 §7.6.3).
pub const VIA_VALUE: &str = "1.1 wirefold";

/// Request fields frameworks read to rebuild the request's host, path or method
/// (the classic unkeyed inputs of cache poisoning). A client's values never reach
/// the origin; wirefold sets the ones it means.
const UNKEYED_OVERRIDES: [&str; 16] = [
    "forwarded",
    "x-forwarded-host",
    "x-forwarded-server",
    "x-forwarded-port",
    "x-forwarded-prefix",
    "x-forwarded-path",
    "x-forwarded-uri",
    "x-forwarded-scheme",
    "x-forwarded-ssl",
    "x-original-host",
    "x-host",
    "x-original-url",
    "x-rewrite-url",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

pub struct Origin {
    client: UpstreamClient,
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    /// The origin URL's path, prefixed to every request path (no trailing slash).
    base_path: String,
    host: HostRule,
    header_timeout: Duration,
    body_idle_timeout: Duration,
}

enum HostRule {
    Origin,
    Client,
    Literal(HeaderValue),
}

/// Why an exchange with the origin failed; each maps to a status and a short text.
#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    #[error("origin unreachable: {0}")]
    Connect(String),
    #[error("origin did not answer within {0:?}")]
    Timeout(Duration),
    #[error("origin sent an invalid response: {0}")]
    Protocol(String),
    /// The client's request body failed while it was being forwarded (a malformed
    /// chunk, a connection closed early): the client's fault, not the origin's.
    #[error("request body: {0}")]
    RequestBody(String),
}

/// Marks an error of the client's request body, so a failed exchange can tell it
/// from an origin failure.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RequestBodyError(body::BoxError);

/// Whether `e` is, or was caused by, a failure of the client's request body.
pub fn is_request_body_error(e: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(e), |s| s.source()).any(|s| s.is::<RequestBodyError>())
}

/// Set once the client's request body failed while it was forwarded. The failure
/// takes the origin connection down, which may cut off an answer the origin had
/// begun: that answer's failure is then the client's too.
#[derive(Clone, Default)]
struct RequestBodyFailed(Arc<AtomicBool>);

impl OriginError {
    pub fn status(&self) -> http::StatusCode {
        match self {
            OriginError::Timeout(_) => http::StatusCode::GATEWAY_TIMEOUT,
            OriginError::RequestBody(_) => http::StatusCode::BAD_REQUEST,
            _ => http::StatusCode::BAD_GATEWAY,
        }
    }
    /// The metric label of an origin failure; `None` when the client failed.
    pub fn origin_kind(&self) -> Option<&'static str> {
        match self {
            OriginError::Connect(_) => Some("connect"),
            OriginError::Timeout(_) => Some("timeout"),
            OriginError::Protocol(_) => Some("protocol"),
            OriginError::RequestBody(_) => None,
        }
    }
}

/// The pooled upstream client all origins of one server share.
pub type UpstreamClient = Client<HttpsConnector<HttpConnector<Resolver>>, Body>;

/// A pooled client configured by `cfg` (timeouts, extra roots), connecting only to
/// the addresses `destinations` permits.
pub fn upstream_client(
    cfg: &UpstreamConfig,
    destinations: Destinations,
) -> Result<UpstreamClient, String> {
    let connector = connect::connector_resolving(
        cfg.ca_file.as_deref(),
        Duration::from_millis(cfg.connect_timeout_ms),
        Resolver(destinations),
    )
    .map_err(|e| format!("upstream.ca_file {e}"))?;
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .build(connector))
}

impl Origin {
    pub fn new(origin: &str, cfg: &UpstreamConfig) -> Result<Origin, String> {
        // An origin the operator configured: any address.
        Origin::with_client(origin, cfg, upstream_client(cfg, Destinations::Any)?)
    }

    /// An origin reached through an existing pool (a server proxy fetching from many).
    pub fn with_client(
        origin: &str,
        cfg: &UpstreamConfig,
        client: UpstreamClient,
    ) -> Result<Origin, String> {
        let uri: Uri = origin
            .parse()
            .map_err(|e| format!("origin `{origin}`: {e}"))?;
        let scheme = uri.scheme().cloned().ok_or("origin needs a scheme")?;
        let authority = uri.authority().cloned().ok_or("origin needs a host")?;
        let base_path = uri.path().trim_end_matches('/').to_string();

        let host = match cfg.host.as_str() {
            "origin" => HostRule::Origin,
            "client" => HostRule::Client,
            literal => {
                HostRule::Literal(HeaderValue::from_str(literal).map_err(|e| e.to_string())?)
            }
        };
        Ok(Origin {
            client,
            scheme,
            authority,
            base_path,
            host,
            header_timeout: Duration::from_millis(cfg.header_timeout_ms),
            body_idle_timeout: Duration::from_millis(cfg.body_idle_timeout_ms),
        })
    }

    /// The `Host` the origin sees for a request to `client_host` (also the site part
    /// of the cache key, so what is forwarded is what is keyed).
    #[allow(
        clippy::expect_used,
        reason = "an authority holds only URI characters, all visible ASCII"
    )]
    pub fn upstream_host(&self, client_host: Option<&Authority>) -> HeaderValue {
        let authority = match &self.host {
            HostRule::Origin => &self.authority,
            HostRule::Client => client_host.unwrap_or(&self.authority),
            HostRule::Literal(v) => return v.clone(),
        };
        HeaderValue::from_str(authority.as_str()).expect("an authority is a valid header")
    }

    /// The origin URI for a client request URI.
    #[allow(
        clippy::expect_used,
        reason = "scheme and authority are parsed; the base path (a parsed path without \
                  its trailing `/`) followed by a parsed path and query is a path and query"
    )]
    pub fn target(&self, client_uri: &Uri) -> Uri {
        let pq = client_uri
            .path_and_query()
            .map(|pq| pq.as_str())
            .unwrap_or("/");
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(format!("{}{}", self.base_path, pq))
            .build()
            .expect("scheme, authority and a path from a valid URI")
    }

    /// Rewrites a client request for the origin: hop-by-hop fields removed, `Via` and
    /// `X-Forwarded-For`/`-Proto` added, `Host` set by the configured rule, and the
    /// fields a client could use to make the origin answer for another host, path or
    /// method removed: none of them is part of the cache key. `X-Forwarded-Host` is
    /// sent only under the `client` rule, where it repeats the keyed `Host`.
    pub fn prepare(&self, mut req: Request<Body>, conn: ConnInfo) -> Request<Body> {
        let client_host = req
            .uri()
            .authority()
            .cloned()
            .or_else(|| req.headers().get(HOST)?.to_str().ok()?.parse().ok());
        let host = self.upstream_host(client_host.as_ref());
        let upgrade = wirefold_http::hop_by_hop::is_upgrade_request(req.headers());
        let headers = req.headers_mut();
        remove_hop_by_hop(headers);
        for name in UNKEYED_OVERRIDES {
            headers.remove(name);
        }
        if let Some(protocol) = upgrade {
            headers.insert(
                http::header::CONNECTION,
                HeaderValue::from_static("upgrade"),
            );
            headers.insert(http::header::UPGRADE, protocol);
        }
        if matches!(self.host, HostRule::Client) {
            headers.insert(HeaderName::from_static("x-forwarded-host"), host.clone());
        }
        headers.insert(HOST, host);
        headers.append(VIA, HeaderValue::from_static(VIA_VALUE));
        let xff = HeaderName::from_static("x-forwarded-for");
        let peer = conn.peer.ip().to_string();
        let forwarded_for = match headers.get(&xff).and_then(|v| v.to_str().ok()) {
            Some(prior) => format!("{prior}, {peer}"),
            None => peer,
        };
        if let Ok(v) = HeaderValue::from_str(&forwarded_for) {
            headers.insert(xff, v);
        }
        headers.insert(
            HeaderName::from_static("x-forwarded-proto"),
            HeaderValue::from_static(if conn.tls { "https" } else { "http" }),
        );
        *req.uri_mut() = self.target(req.uri());
        if !http_body::Body::is_end_stream(req.body()) {
            let failed = RequestBodyFailed::default();
            req.extensions_mut().insert(failed.clone());
            req = req.map(|b| {
                body::boxed(b.map_err(move |e| {
                    failed.0.store(true, Ordering::Relaxed);
                    RequestBodyError(e)
                }))
            });
        }
        // The pooled client picks the version per connection (ALPN); a request must not pin one.
        *req.version_mut() = http::Version::HTTP_11;
        req
    }

    /// Sends a prepared request. Returns the response head within the header timeout;
    /// its body fails if the origin stalls longer than the idle timeout. The second
    /// value is the time to the response head.
    pub async fn send(
        &self,
        req: Request<Body>,
    ) -> Result<(Response<Body>, Duration), OriginError> {
        let started = Instant::now();
        let request_body = req.extensions().get::<RequestBodyFailed>().cloned();
        let response = tokio::time::timeout(self.header_timeout, self.client.request(req))
            .await
            .map_err(|_| OriginError::Timeout(self.header_timeout))?
            .map_err(classify_client_error)?;
        let elapsed = started.elapsed();
        let idle = self.body_idle_timeout;
        let response = response.map(|b| {
            let body = body::boxed(IdleTimeout::new(b, idle));
            match request_body {
                Some(failed) => body::boxed(body.map_err(move |e| -> BoxError {
                    if failed.0.load(Ordering::Relaxed) {
                        Box::new(RequestBodyError(e))
                    } else {
                        e
                    }
                })),
                None => body,
            }
        });
        Ok((response, elapsed))
    }
}

fn classify_client_error(e: hyper_util::client::legacy::Error) -> OriginError {
    let mut detail = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        detail = format!("{detail}: {s}");
        source = s.source();
    }
    if std::error::Error::source(&e).is_some_and(is_request_body_error) {
        OriginError::RequestBody(detail)
    } else if e.is_connect() {
        OriginError::Connect(detail)
    } else {
        OriginError::Protocol(detail)
    }
}

/// Removes hop-by-hop fields from an origin response and adds `Via`.
pub fn clean_response_head(headers: &mut http::HeaderMap) {
    remove_hop_by_hop(headers);
    headers.append(VIA, HeaderValue::from_static(VIA_VALUE));
}
