//! Test support: the accelerator started in-process on free loopback ports, origins
//! that behave (or misbehave) on demand, and curl as the client.
#![allow(dead_code)] // each test binary uses a different part of this module
#![allow(
    clippy::expect_used,
    reason = "test support: a failed expectation fails the test"
)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use proxy::config::Config;
use tokio::net::{TcpListener, TcpStream};

/// A started accelerator and the directory holding its store.
pub struct Proxy {
    pub running: proxy::Running,
    pub data: tempfile::TempDir,
}

impl Proxy {
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.running.tls { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.running.addr)
    }
    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.running.admin_addr)
    }

    /// The sum of the server's metric lines starting with `prefix` (0 when none).
    pub async fn metric(&self, prefix: &str) -> f64 {
        let text = curl(&self.admin_url("/metrics"), &[]).await;
        metric(&String::from_utf8_lossy(&text.body), prefix)
    }
}

/// A config on free loopback ports with its store in `data`.
pub fn test_config(data: &Path) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: "127.0.0.1:0".parse().unwrap(),
        data_dir: data.to_path_buf(),
        ..Config::default()
    }
}

pub async fn start_proxy(origin: &str, tweak: impl FnOnce(&mut Config)) -> Proxy {
    let data = tempfile::tempdir().unwrap();
    let mut config = test_config(data.path());
    config.origin = Some(origin.to_string());
    tweak(&mut config);
    let running = proxy::start(config).await.expect("proxy starts");
    Proxy { running, data }
}

pub async fn start_root(root: &Path, tweak: impl FnOnce(&mut Config)) -> Proxy {
    let data = tempfile::tempdir().unwrap();
    let mut config = test_config(data.path());
    config.root = Some(root.to_path_buf());
    tweak(&mut config);
    let running = proxy::start(config).await.expect("server starts");
    Proxy { running, data }
}

type Handler = dyn Fn(Request<Incoming>) -> Response<Full<Bytes>> + Send + Sync;

/// An HTTP/1.1 origin answering with `handler`, counting requests.
pub struct TestOrigin {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicUsize>,
}

impl TestOrigin {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

pub async fn origin(
    handler: impl Fn(Request<Incoming>) -> Response<Full<Bytes>> + Send + Sync + 'static,
) -> TestOrigin {
    slow_origin(std::time::Duration::ZERO, handler).await
}

/// An origin that waits `delay` before each response head (a slow backend).
pub async fn slow_origin(
    delay: std::time::Duration,
    handler: impl Fn(Request<Incoming>) -> Response<Full<Bytes>> + Send + Sync + 'static,
) -> TestOrigin {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let handler: Arc<Handler> = Arc::new(handler);
    let counter = hits.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let handler = handler.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    let response = handler(req);
                    async move {
                        tokio::time::sleep(delay).await;
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    TestOrigin { addr, hits }
}

/// An origin that speaks raw TCP: `script` gets each accepted connection.
pub async fn raw_origin<F, Fut>(script: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(script(stream));
        }
    });
    addr
}

/// Reads an HTTP head (through the blank line) from a raw stream; `None` on EOF first.
pub async fn read_head(stream: &mut TcpStream) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    Some(head)
}

/// A loopback address nothing listens on.
pub fn dead_address() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

pub fn response(
    status: u16,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::builder().status(status);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.body(Full::new(body.into())).unwrap()
}

/// What curl saw: the final response's status and fields, and the body as written.
#[derive(Debug)]
pub struct Curled {
    pub status: u16,
    pub version: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Curled {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `Link` values announcing compression dictionaries (not preload hints).
    pub fn dictionary_links(&self) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, v)| k.eq_ignore_ascii_case("link") && v.contains("compression-dictionary"))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Runs curl with `args` plus the URL; the body is written raw (no decoding) unless
/// `args` asks for `--compressed`.
pub async fn curl(url: &str, args: &[&str]) -> Curled {
    let dir = tempfile::tempdir().unwrap();
    let head = dir.path().join("head");
    let body = dir.path().join("body");
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args(["-s", "-S", "-k", "--max-time", "30", "-D"])
        .arg(&head)
        .arg("-o")
        .arg(&body);
    cmd.args(args).arg(url);
    let out = cmd.output().await.expect("curl runs");
    assert!(
        out.status.success(),
        "curl {url} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let head = std::fs::read_to_string(&head).unwrap();
    let block = head
        .trim_end()
        .rsplit("\r\n\r\n")
        .next()
        .unwrap()
        .to_string();
    let mut lines = block.lines();
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.split_whitespace();
    let version = parts.next().unwrap_or_default().to_string();
    let status = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Curled {
        status,
        version,
        headers,
        body: std::fs::read(&body).unwrap_or_default(),
    }
}

/// Decodes `data` with a reference command-line tool (`gzip`, `brotli`, `zstd`).
pub fn decode_with_cli(tool: &str, data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = std::process::Command::new(tool)
        .arg("-d")
        .arg("-c")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{tool} runs: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let data = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "{tool} -d failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A real page from the shared corpus, or `None` when the corpus is not beside the repo.
pub fn corpus_file(relative: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/corpus")
        .join(relative);
    std::fs::read(&path).unwrap_or_else(|e| panic!("corpus file {}: {e}", path.display()))
}

/// The value of a counter or gauge line in the metrics text (sum over matching lines).
pub fn metric(text: &str, name_and_labels_prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name_and_labels_prefix))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// Sends `request` on a fresh connection and reads until the server closes it (or 5 s).
pub async fn exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = stream.split();
    let write = async {
        // The server may answer and close before reading everything: ignore write errors.
        let _ = wr.write_all(request).await;
    };
    let read = async {
        let mut out = Vec::new();
        let mut buf = [0u8; 8192];
        let deadline = tokio::time::sleep(std::time::Duration::from_secs(5));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                n = rd.read(&mut buf) => match n {
                    Ok(0) | Err(_) => break,
                    Ok(n) => out.extend_from_slice(&buf[..n]),
                },
                _ = &mut deadline => break,
            }
        }
        out
    };
    let ((), out) = tokio::join!(write, read);
    out
}

/// The status code of a raw HTTP/1.1 response.
pub fn status_of(reply: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(&reply[..reply.len().min(64)]).ok()?;
    let mut parts = text.split_whitespace();
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    parts.next()?.parse().ok()
}

/// Waits until `proxy`'s metric `name` (with its labels) reaches `expected`, for what
/// a server does in the background; fails past it or after ten seconds.
pub async fn metric_reaches(proxy: &Proxy, name: &str, expected: f64) {
    for _ in 0..200 {
        let value = proxy.metric(name).await;
        if value >= expected {
            assert_eq!(value, expected, "{name}: more than expected");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{name} did not reach {expected}");
}

/// The admin listener's `/metrics` text.
pub async fn metrics_text(proxy: &Proxy) -> String {
    let fetched = curl(&proxy.admin_url("/metrics"), &[]).await;
    assert_eq!(fetched.status, 200);
    String::from_utf8(fetched.body).unwrap()
}
