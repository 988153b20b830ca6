//! One HTTP exchange: the URL and the origin its dictionaries are scoped by, the
//! request sent and the response read whole with its bytes on the wire, and the
//! instance a response stands for once decoded ([`Outcome`], made by `delta`).

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use store::Hash;

use crate::error::GetError;
use crate::report::Wire;

/// One pooled client per run: its exchanges and the dictionary fetches reuse connections.
pub(crate) type HttpClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// The URL and the parts dictionaries are scoped by.
pub(crate) struct Target {
    pub(crate) uri: Uri,
    /// `scheme://host:port`: dictionaries are used only within one origin.
    pub(crate) origin: String,
    pub(crate) url: String,
}

impl Target {
    pub(crate) fn parse(url: &str) -> Result<Target, GetError> {
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
    pub(crate) fn matched_by(&self, pattern: &str) -> bool {
        let subject = match pattern.contains('?') {
            true => self.uri.path_and_query().map_or("/", |pq| pq.as_str()),
            false => self.uri.path(),
        };
        wirefold_http::url_pattern::matches(pattern, subject)
    }
}

/// `Link: <url>; rel="compression-dictionary"` targets on the same origin.
pub(crate) fn announced_dictionaries(headers: &HeaderMap, target: &Target) -> Vec<Target> {
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

/// One response, read whole.
pub(crate) struct Exchange {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) wire: Wire,
}

pub(crate) async fn exchange(
    client: &HttpClient,
    uri: &Uri,
    headers: HeaderMap,
    timeout: Duration,
    max_body: usize,
) -> Result<Exchange, GetError> {
    let failed = |detail: String| GetError::Transfer {
        url: uri.to_string(),
        detail,
    };
    let mut request = Request::new(Empty::new());
    *request.method_mut() = Method::GET;
    *request.uri_mut() = uri.clone();
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
                if received.len() + data.len() > max_body {
                    return Err(failed(format!("body over the limit of {} bytes", max_body)));
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
    tokio::time::timeout(timeout, transfer)
        .await
        .map_err(|_| failed(format!("no complete answer within {:?}", timeout)))?
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
pub(crate) struct Outcome {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) instance: Bytes,
    pub(crate) hash: Hash,
    pub(crate) delivery: String,
    pub(crate) verified: bool,
    /// The instance came from the cache (304): nothing new to keep but its recency.
    pub(crate) cached: bool,
}

/// A field's value, trimmed, when it is text.
pub(crate) fn field(headers: &HeaderMap, name: &header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_string())
}

#[cfg(test)]
mod tests {
    use http::header::HeaderValue;

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
    fn announced_dictionaries_stay_on_the_origin() {
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
        let links = announced_dictionaries(&headers, &target("https://a.example/page"));
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
}
