//! The soak origin: serves the catalogue, each body the truth of the instance its
//! `ETag` names, answers `If-None-Match` with 304, and gzip for the resources that
//! say so. It knows nothing of wirefold.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use wirefold_http::accept_encoding::AcceptEncoding;
use wirefold_http::conditional::{EntityTag, IfNoneMatch};
use wirefold_http::ContentCoding;

use crate::catalogue::{self, InstanceId};
use crate::truth::Truths;

/// The largest request body the origin reads (the driver's are a few bytes).
const REQUEST_BODY_LIMIT: usize = 1 << 20;

/// How the origin behaves beyond the catalogue.
#[derive(Clone, Copy, Debug, Default)]
pub struct OriginOptions {
    /// Corrupt one body in this many (a byte of its last line flipped), its `ETag`
    /// unchanged: the driver's self-test, proving that a wrong body is caught.
    pub corrupt_one_in: Option<u64>,
}

/// A running origin; dropping it stops accepting.
pub struct Origin {
    pub addr: SocketAddr,
    accepting: JoinHandle<()>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Binds `listen` and serves on the current runtime.
pub async fn start(listen: SocketAddr, options: OriginOptions) -> std::io::Result<Origin> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let state = Arc::new(State {
        truths: Truths::default(),
        options,
        bodies: AtomicU64::new(0),
    });
    let accepting = tokio::spawn(testbed::serve::accept_loop(listener, move |req| {
        let state = state.clone();
        async move {
            let (parts, body) = req.into_parts();
            // A body is read before the answer, as a well-behaved origin does: one
            // left unread makes the close a reset, which can cut the answer off at
            // the proxy and make the origin look broken. One that fails (cut short by
            // the client, through the proxy) is a 400.
            match Limited::new(body, REQUEST_BODY_LIMIT).collect().await {
                Ok(_) => state.answer(&Request::from_parts(parts, ())),
                Err(_) => plain(StatusCode::BAD_REQUEST, "unreadable request body\n"),
            }
        }
    }));
    Ok(Origin { addr, accepting })
}

struct State {
    truths: Truths,
    options: OriginOptions,
    /// Bodies sent, for `corrupt_one_in`.
    bodies: AtomicU64,
}

impl State {
    fn answer(&self, req: &Request<()>) -> Response<Full<Bytes>> {
        let target = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
        let Some((index, resource)) = catalogue::lookup(target) else {
            return plain(StatusCode::NOT_FOUND, "no such resource\n");
        };
        if req.method() != Method::GET && req.method() != Method::HEAD {
            let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD\n");
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return response;
        }
        let id = InstanceId {
            resource: index,
            version: resource.version_at(index, SystemTime::now()),
        };
        let gzip = resource.origin_gzip
            && AcceptEncoding::from_headers(req.headers())
                .negotiate([ContentCoding::Gzip])
                .is_some();
        // Each representation has its own strong tag (RFC 9110 §8.8.3).
        let etag = EntityTag::strong(if gzip {
            format!("{}-gzip", id.opaque())
        } else {
            id.opaque()
        });
        let mut response = Response::new(Full::new(Bytes::new()));
        let headers = response.headers_mut();
        headers.insert(header::ETAG, tag_value(&etag));
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static(resource.cache_control),
        );
        if resource.origin_gzip {
            headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        }
        if IfNoneMatch::from_headers(req.headers()).is_some_and(|inm| inm.matches(Some(&etag))) {
            *response.status_mut() = StatusCode::NOT_MODIFIED;
            return response;
        }
        let Some(truth) = self.truths.get(id) else {
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "no truth\n");
        };
        let mut body = if gzip {
            Bytes::from(codec::compress(ContentCoding::Gzip, 1, &truth.body))
        } else {
            truth.body.clone()
        };
        if !gzip && req.method() == Method::GET {
            if let Some(n) = self.options.corrupt_one_in {
                if self
                    .bodies
                    .fetch_add(1, Ordering::Relaxed)
                    .is_multiple_of(n.max(1))
                {
                    let mut bytes = body.to_vec();
                    if let Some(last) = bytes.len().checked_sub(2) {
                        bytes[last] ^= 0x20;
                    }
                    body = bytes.into();
                }
            }
        }
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(resource.content_type),
        );
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        if gzip {
            headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        if req.method() == Method::GET {
            *response.body_mut() = Full::new(body);
        }
        response
    }
}

#[allow(
    clippy::expect_used,
    reason = "`soak.R.V` and `-gzip` between quotes are visible ASCII, a valid field value"
)]
fn tag_value(tag: &EntityTag) -> HeaderValue {
    HeaderValue::try_from(tag.to_string()).expect("an entity tag of visible ASCII")
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
