//! `wirefold lab series-origin`: an origin whose pages change on every request, for the
//! optimistic-delta benchmark (docs/optimistic-bench.md), as in Banga, Douglis & Rabinovich's 1997
//! benchmark where each GET returned the next version of a page.
//!
//! Each series folder (numbered versions, as in `../shared/corpus`) is served at
//! `/<parent folder>/<series folder>/` (e.g. `/w3c__manifest/index-html/`): two corpus
//! series share the folder name `index-html`, so the owner folder keeps paths unique.
//! Every GET of that path returns the series' next version (1, 2, …, last, then the last
//! again); HEAD describes the version the next GET would return, without advancing. Every
//! request waits `--delay-ms` before its response head. Bodies are compressed once at
//! startup, as a well-run origin precompresses: br 11, else gzip 9, else identity.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use sha2::{Digest, Sha256};
use wirefold_corpus::{series, ContentType, ReadError};
use wirefold_http::accept_encoding::AcceptEncoding;
use wirefold_http::conditional::{EntityTag, IfNoneMatch};
use wirefold_http::ContentCoding;

use crate::serve;

/// The issue's limit on versions per series.
pub const MAX_VERSIONS: u64 = 10;

/// `wirefold lab series-origin --listen ADDR [--delay-ms N] [--versions N] SERIES_DIR…`
#[derive(Debug, Clone, clap::Args)]
pub struct SeriesOriginArgs {
    /// Address to listen on (`0.0.0.0:PORT` to be reachable from behind `lab link`;
    /// port 0 picks a free one, printed in the URL list).
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Time every response waits before its head, in milliseconds.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub delay_ms: u64,
    /// Versions used per series: a longer series gives this many, evenly spaced, first and
    /// last included.
    #[arg(long, default_value_t = MAX_VERSIONS, value_parser = clap::value_parser!(u64).range(2..=MAX_VERSIONS), value_name = "N")]
    pub versions: u64,
    /// Series folders, each holding numbered versions (`001.html`, `002.html`, …).
    #[arg(required = true, value_name = "SERIES_DIR")]
    pub series: Vec<PathBuf>,
}

/// Why the series origin did not start, or could not print its URLs.
#[derive(Debug, thiserror::Error)]
pub enum SeriesOriginError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("{}: {reason}", path.display())]
    BadInput { path: PathBuf, reason: String },
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("writing the URLs: {0}")]
    Output(#[from] io::Error),
}

/// One version, in every coding it is sent in.
struct Version {
    /// SHA-256 of the decoded content, hex: the ETag's stem.
    sha256: String,
    identity: Bytes,
    gzip: Bytes,
    br: Bytes,
}

impl Version {
    fn new(content: Vec<u8>) -> Self {
        Version {
            sha256: hex::encode(Sha256::digest(&content)),
            gzip: codec::compress(ContentCoding::Gzip, 9, &content).into(),
            br: codec::compress(ContentCoding::Br, 11, &content).into(),
            identity: content.into(),
        }
    }

    /// The body and strong ETag of one representation. Representations in different
    /// codings are different bytes, so their strong tags differ (RFC 9110 §8.8.3).
    fn representation(&self, coding: Option<ContentCoding>) -> (&Bytes, EntityTag) {
        match coding {
            Some(ContentCoding::Br) => (&self.br, EntityTag::strong(format!("{}-br", self.sha256))),
            Some(_) => (
                &self.gzip,
                EntityTag::strong(format!("{}-gzip", self.sha256)),
            ),
            None => (&self.identity, EntityTag::strong(self.sha256.clone())),
        }
    }
}

/// A served series: its path, versions and the index the next GET returns.
struct Served {
    path: String,
    content_type: HeaderValue,
    versions: Vec<Version>,
    next: AtomicUsize,
}

impl Served {
    /// The version this request gets; a GET moves the series on (it stays on the last).
    fn take(&self, advance: bool) -> &Version {
        let last = self.versions.len() - 1;
        let index = if advance {
            self.next
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |i| {
                    Some((i + 1).min(last))
                })
                // Never `Err`: the update always gives a value. Both hold the previous.
                .unwrap_or_else(|previous| previous)
        } else {
            self.next.load(Ordering::SeqCst)
        };
        &self.versions[index]
    }
}

/// A running series origin; dropping it stops it.
pub struct SeriesOrigin {
    addr: SocketAddr,
    paths: Vec<String>,
    _runtime: tokio::runtime::Runtime,
}

impl SeriesOrigin {
    /// Reads and compresses the series, binds the listener and starts serving.
    pub fn start(args: &SeriesOriginArgs) -> Result<Self, SeriesOriginError> {
        let served = args
            .series
            .iter()
            .map(|dir| load(dir, args.versions as usize))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, s) in served.iter().enumerate() {
            if let Some(other) = served[..i].iter().position(|o| o.path == s.path) {
                return Err(SeriesOriginError::BadInput {
                    path: args.series[i].clone(),
                    reason: format!("served at {} like {}", s.path, args.series[other].display()),
                });
            }
        }
        let listen_error = |source| SeriesOriginError::Listen {
            addr: args.listen,
            source,
        };
        let listener = std::net::TcpListener::bind(args.listen).map_err(listen_error)?;
        listener.set_nonblocking(true).map_err(listen_error)?;
        let addr = listener.local_addr().map_err(listen_error)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(listen_error)?;
        let paths = served.iter().map(|s| s.path.clone()).collect();
        let state = Arc::new(State {
            delay: Duration::from_millis(args.delay_ms),
            served,
        });
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(listen_error)?
        };
        runtime.spawn(serve::accept_loop(listener, move |req| {
            let state = state.clone();
            async move { state.answer(&req).await }
        }));
        Ok(SeriesOrigin {
            addr,
            paths,
            _runtime: runtime,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR/<parent>/<series>/` for every series, in argument order.
    pub fn urls(&self) -> Vec<String> {
        self.paths
            .iter()
            .map(|p| format!("http://{}{p}", self.addr))
            .collect()
    }
}

/// Prints the URL of every series, one a line, then `ready`, and serves until killed.
pub fn run(args: &SeriesOriginArgs, out: &mut dyn io::Write) -> Result<(), SeriesOriginError> {
    let origin = SeriesOrigin::start(args)?;
    for url in origin.urls() {
        writeln!(out, "{url}")?;
    }
    writeln!(out, "ready")?;
    out.flush()?;
    loop {
        std::thread::park();
    }
}

/// The versions of the series in `dir`, at most `count`, compressed.
fn load(dir: &Path, count: usize) -> Result<Served, SeriesOriginError> {
    let bad = |reason: String| SeriesOriginError::BadInput {
        path: dir.to_path_buf(),
        reason,
    };
    let found = series::find(dir)?;
    let [one] = found.as_slice() else {
        return Err(bad(format!(
            "expected one series folder (numbered versions of one kind, e.g. 001.html), found {} series",
            found.len()
        )));
    };
    if one.name != "." {
        return Err(bad(format!("the series is in a subfolder: {}", one.name)));
    }
    let absolute = std::fs::canonicalize(dir).map_err(|source| ReadError {
        path: dir.to_path_buf(),
        source,
    })?;
    let names: Vec<&str> = absolute
        .iter()
        .rev()
        .take(2)
        .filter_map(|n| n.to_str())
        .collect();
    let [name, parent] = names.as_slice() else {
        return Err(bad("needs a parent folder and a UTF-8 name".into()));
    };
    let files: Vec<&PathBuf> = spread(one.versions.len(), count)
        .into_iter()
        .map(|i| &one.versions[i])
        .collect();
    // Brotli 11 on a large page takes seconds: compress the versions in parallel.
    let versions = std::thread::scope(|scope| {
        let jobs: Vec<_> = files
            .iter()
            .map(|&path| {
                scope.spawn(move || {
                    std::fs::read(path)
                        .map(Version::new)
                        .map_err(|source| ReadError {
                            path: path.clone(),
                            source,
                        })
                })
            })
            .collect();
        jobs.into_iter()
            // A panic in a job stays a panic.
            .map(|job| {
                job.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect::<Result<Vec<_>, _>>()
    })?;
    // The corpus pages are UTF-8 text.
    let content_type = match ContentType::of(files[0]).media_type() {
        Some(text) if text.starts_with("text/") => format!("{text}; charset=utf-8"),
        Some(other) => other.to_string(),
        None => "application/octet-stream".to_string(),
    };
    #[allow(
        clippy::expect_used,
        reason = "a media type of `media_type`'s literals, perhaps with a charset, is a \
                  valid field value"
    )]
    let content_type = HeaderValue::from_str(&content_type).expect("a literal media type");
    Ok(Served {
        path: format!("/{parent}/{name}/"),
        content_type,
        versions,
        next: AtomicUsize::new(0),
    })
}

/// `count` indices evenly spaced over `0..len`, first and last included (all when
/// `len <= count`).
fn spread(len: usize, count: usize) -> Vec<usize> {
    if len <= count {
        return (0..len).collect();
    }
    (0..count)
        .map(|i| (i * (len - 1) + (count - 1) / 2) / (count - 1))
        .collect()
}

struct State {
    delay: Duration,
    served: Vec<Served>,
}

impl State {
    async fn answer(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        tokio::time::sleep(self.delay).await;
        let Some(served) = self.served.iter().find(|s| s.path == req.uri().path()) else {
            return plain(StatusCode::NOT_FOUND, "no series at this path\n");
        };
        let version = match *req.method() {
            Method::GET => served.take(true),
            Method::HEAD => served.take(false),
            _ => {
                let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD\n");
                response
                    .headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
                return response;
            }
        };
        let coding = AcceptEncoding::from_headers(req.headers())
            .negotiate([ContentCoding::Br, ContentCoding::Gzip]);
        let (body, etag) = version.representation(coding);
        let not_modified = IfNoneMatch::from_headers(req.headers())
            .is_some_and(|condition| condition.matches(Some(&etag)));
        let mut response = Response::new(Full::new(Bytes::new()));
        let headers = response.headers_mut();
        #[allow(
            clippy::expect_used,
            reason = "a tag of hex and a coding token is a valid field value"
        )]
        headers.insert(
            header::ETAG,
            HeaderValue::from_str(&etag.to_string()).expect("hex is a valid field value"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        if not_modified {
            *response.status_mut() = StatusCode::NOT_MODIFIED;
            return response;
        }
        headers.insert(header::CONTENT_TYPE, served.content_type.clone());
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        if let Some(coding) = coding {
            headers.insert(
                header::CONTENT_ENCODING,
                HeaderValue::from_static(coding.token()),
            );
        }
        if req.method() == Method::GET {
            *response.body_mut() = Full::new(body.clone());
        }
        response
    }
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

#[cfg(test)]
mod tests {
    use super::spread;

    #[test]
    fn spread_keeps_first_and_last() {
        assert_eq!(spread(3, 10), [0, 1, 2]);
        assert_eq!(spread(10, 10), (0..10).collect::<Vec<_>>());
        assert_eq!(spread(30, 10), [0, 3, 6, 10, 13, 16, 19, 23, 26, 29]);
        assert_eq!(spread(13, 10), [0, 1, 3, 4, 5, 7, 8, 9, 11, 12]);
    }
}
