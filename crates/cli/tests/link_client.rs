//! The client proxy against a fake server proxy: a TLS HTTP/2 server in this file
//! answering link requests with scripted frame sequences. Browsers are curl.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

mod servers;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use client_proxy::{self as client, ClientConfig, RunningClient};
use codec::dictionary::DictionaryCoding;
use codec::Encoder;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use link_protocol::frame::{DeltaFormat, Frame, LinkCoding};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use store::Hash;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use wirefold_http::ContentCoding;

use servers::{curl, metric, response};

/// The name in the fake server's certificate; never resolved (`upstream_connect`).
const LINK_HOST: &str = "link.test";

/// A link request as the fake server saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: Method,
    uri: String,
    fields: HeaderMap,
}

impl Seen {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).and_then(|v| v.to_str().ok())
    }
}

enum Reply {
    Frames(Vec<Frame>),
    Bytes(Vec<u8>),
    /// An ordinary (non-link) answer.
    Status(u16, &'static str),
    /// These frames, then the whole connection is dropped.
    DropAfter(Vec<Frame>),
    /// A 200 that is not a link answer: this content-type and body.
    NotLink(&'static str, &'static str),
    /// `frames[..inside]` whole and the first half of `frames[inside]`'s bytes, then
    /// the answer breaks off as `cut` says.
    Cut {
        frames: Vec<Frame>,
        inside: usize,
        cut: Cut,
    },
}

/// How a scripted answer breaks off inside a frame.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// The whole connection is dropped (a link that fails).
    Connection,
    /// The stream is reset (`RST_STREAM`); the connection stays.
    Stream,
    /// The stream ends normally, short of the frame's end.
    End,
    /// Nothing more, on an open stream and connection (a link that died silently).
    Silence,
}

type Script = dyn Fn(&Seen, usize) -> Reply + Send + Sync;

/// The fake server's certificate (self-signed for [`LINK_HOST`]) and a PEM file of it
/// for the client to trust.
struct LinkCert {
    der: CertificateDer<'static>,
    key: Vec<u8>,
    ca: PathBuf,
    _dir: tempfile::TempDir,
}

fn link_cert() -> Arc<LinkCert> {
    let dir = tempfile::tempdir().unwrap();
    let generated = rcgen::generate_simple_self_signed(vec![LINK_HOST.to_string()]).unwrap();
    let ca = dir.path().join("link-ca.pem");
    std::fs::write(&ca, generated.cert.pem()).unwrap();
    Arc::new(LinkCert {
        der: generated.cert.der().clone(),
        key: generated.signing_key.serialize_der(),
        ca,
        _dir: dir,
    })
}

struct FakeLink {
    addr: SocketAddr,
    cert: Arc<LinkCert>,
    seen: Arc<Mutex<Vec<Seen>>>,
    connections: Arc<AtomicUsize>,
}

impl FakeLink {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

async fn fake_link(script: impl Fn(&Seen, usize) -> Reply + Send + Sync + 'static) -> FakeLink {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    serve_link(listener, link_cert(), script)
}

fn serve_link(
    listener: TcpListener,
    cert: Arc<LinkCert>,
    script: impl Fn(&Seen, usize) -> Reply + Send + Sync + 'static,
) -> FakeLink {
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key.clone()));
    let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.der.clone()], key)
    .unwrap();
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));

    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let connections = Arc::new(AtomicUsize::new(0));
    let script: Arc<Script> = Arc::new(script);
    let (seen_by_server, connections_by_server) = (seen.clone(), connections.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let Ok(tls) = acceptor.accept(stream).await else {
                continue;
            };
            connections_by_server.fetch_add(1, Ordering::SeqCst);
            let kill = Arc::new(Notify::new());
            let (script, seen, conn_kill) = (script.clone(), seen_by_server.clone(), kill.clone());
            let service = service_fn(move |req: Request<Incoming>| {
                let request = Seen {
                    method: req.method().clone(),
                    uri: req.uri().to_string(),
                    fields: req.headers().clone(),
                };
                let index = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(request.clone());
                    seen.len() - 1
                };
                let reply = script(&request, index);
                let kill = conn_kill.clone();
                async move { Ok::<_, Infallible>(answer(reply, kill)) }
            });
            tokio::spawn(async move {
                let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service);
                tokio::select! {
                    _ = connection => {}
                    _ = kill.notified() => {}
                }
            });
        }
    });
    FakeLink {
        addr,
        cert,
        seen,
        connections,
    }
}

fn answer(reply: Reply, kill: Arc<Notify>) -> Response<Scripted> {
    let link = |chunks: VecDeque<Bytes>, ending| {
        Response::builder()
            .header("content-type", "application/vnd.wirefold.link")
            .body(Scripted { chunks, ending })
            .unwrap()
    };
    let encode = |frames: Vec<Frame>| frames.iter().map(|f| f.encode().unwrap()).collect();
    let text = |text: &'static str| Scripted {
        chunks: VecDeque::from([Bytes::from_static(text.as_bytes())]),
        ending: Ending::Normal,
    };
    match reply {
        Reply::Frames(frames) => link(encode(frames), Ending::Normal),
        Reply::Bytes(bytes) => link(VecDeque::from([Bytes::from(bytes)]), Ending::Normal),
        Reply::DropAfter(frames) => link(encode(frames), Ending::Kill(kill)),
        Reply::Cut {
            mut frames,
            inside,
            cut,
        } => {
            let broken = frames.remove(inside).encode().unwrap();
            frames.truncate(inside);
            let mut chunks: VecDeque<Bytes> = encode(frames);
            chunks.push_back(broken.slice(..broken.len() / 2));
            let ending = match cut {
                Cut::Connection => Ending::Kill(kill),
                Cut::Stream => Ending::Reset,
                Cut::End => Ending::Normal,
                Cut::Silence => Ending::Silence,
            };
            link(chunks, ending)
        }
        Reply::NotLink(content_type, body) => Response::builder()
            .header("content-type", content_type)
            .body(text(body))
            .unwrap(),
        Reply::Status(status, body) => Response::builder().status(status).body(text(body)).unwrap(),
    }
}

/// What a scripted body does after its chunks.
enum Ending {
    Normal,
    /// Drops the whole connection.
    Kill(Arc<Notify>),
    /// Fails, so the server resets the stream.
    Reset,
    /// Never ends.
    Silence,
}

/// A body of fixed chunks, then its ending.
struct Scripted {
    chunks: VecDeque<Bytes>,
    ending: Ending,
}

impl http_body::Body for Scripted {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        if let Some(chunk) = self.chunks.pop_front() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(chunk))));
        }
        // Once dropping the connection, nothing more either: polled again before the
        // connection is gone, the body must not end normally.
        match std::mem::replace(&mut self.ending, Ending::Silence) {
            Ending::Kill(kill) => {
                kill.notify_one();
                Poll::Pending
            }
            Ending::Reset => Poll::Ready(Some(Err(std::io::Error::other("scripted reset")))),
            Ending::Silence => Poll::Pending,
            Ending::Normal => Poll::Ready(None),
        }
    }
}

fn fields(pairs: &[(&str, &str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
        .collect()
}

fn headers(pairs: &[(&str, &str)]) -> Frame {
    Frame::Headers {
        status: StatusCode::OK,
        fields: fields(pairs),
    }
}

fn end(body: &[u8]) -> Frame {
    Frame::End {
        hash: Hash::of(body),
        length: body.len() as u64,
    }
}

fn full(body: &[u8], pairs: &[(&str, &str)]) -> Vec<Frame> {
    vec![
        headers(pairs),
        Frame::Full {
            coding: LinkCoding::Identity,
        },
        Frame::Data(Bytes::copy_from_slice(body)),
        end(body),
    ]
}

struct Started {
    running: RunningClient,
    _data: tempfile::TempDir,
}

impl Started {
    fn proxy(&self) -> String {
        format!("http://{}", self.running.addr)
    }
    async fn metrics(&self) -> String {
        curl(&format!("http://{}/metrics", self.running.admin_addr), &[])
            .await
            .body
            .into_iter()
            .map(char::from)
            .collect()
    }
    async fn get(&self, url: &str) -> servers::Curled {
        curl(url, &["-x", &self.proxy()]).await
    }

    /// Fetches `url` with curl, expecting the transfer to fail (a streamed body that
    /// did not verify), and the client proxy to have counted one verification failure.
    async fn expect_unverified(&self, url: &str) {
        let out = tokio::process::Command::new("curl")
            .args(["-s", "-S", "--max-time", "60", "-o", "/dev/null", "-x"])
            .arg(self.proxy())
            .arg(url)
            .output()
            .await
            .unwrap();
        assert!(
            !out.status.success(),
            "a body that fails verification must not complete normally"
        );
        let metrics = self.metrics().await;
        assert_eq!(
            metric(&metrics, "wirefold_client_verification_failures_total"),
            1.0
        );
    }
}

fn config_for(link: &FakeLink) -> ClientConfig {
    config_at(link.addr, &link.cert)
}

/// Connects to `addr` for the name [`LINK_HOST`], trusting `cert`.
fn config_at(addr: SocketAddr, cert: &LinkCert) -> ClientConfig {
    ClientConfig {
        upstream: format!("https://{LINK_HOST}:{}", addr.port()),
        upstream_connect: Some(addr),
        upstream_ca: Some(cert.ca.clone()),
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: "127.0.0.1:0".parse().unwrap(),
        ..ClientConfig::default()
    }
}

async fn start(config: ClientConfig) -> Started {
    start_in(config, tempfile::tempdir().unwrap()).await
}

async fn start_in(mut config: ClientConfig, data: tempfile::TempDir) -> Started {
    config.data_dir = data.path().to_path_buf();
    let running = client::start(config).await.expect("client proxy starts");
    Started {
        running,
        _data: data,
    }
}

#[tokio::test]
async fn forward_proxy_get_gets_the_full_instance() {
    let link = fake_link(|_, _| {
        Reply::Frames(full(
            b"hello from the origin",
            &[("content-type", "text/plain"), ("x-origin", "yes")],
        ))
    })
    .await;
    let client = start(config_for(&link)).await;
    let got = curl(
        "http://site.test/page?q=1",
        &[
            "-x",
            &client.proxy(),
            "-H",
            "Accept-Encoding: br",
            "-H",
            "Connection: x-private",
            "-H",
            "X-Private: 1",
        ],
    )
    .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, b"hello from the origin");
    assert_eq!(got.header("content-length"), Some("21"));
    assert_eq!(got.header("x-origin"), Some("yes"));
    assert!(got.header("via").unwrap().contains("wirefold-client"));

    let seen = link.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, Method::GET);
    assert_eq!(seen[0].uri, "http://site.test/page?q=1");
    assert_eq!(seen[0].field("wirefold-link"), Some("1"));
    assert_eq!(seen[0].field("wirefold-have"), None);
    assert_eq!(seen[0].field("accept-encoding"), None);
    assert_eq!(seen[0].field("x-private"), None);
    assert!(seen[0].field("via").unwrap().contains("wirefold-client"));

    let metrics = client.metrics().await;
    assert_eq!(
        metric(&metrics, "wirefold_client_requests_total{outcome=\"full\"}"),
        1.0
    );
    assert!(metric(&metrics, "wirefold_client_link_bytes_received_total") > 21.0);
    assert_eq!(
        metric(&metrics, "wirefold_client_browser_bytes_delivered_total"),
        21.0
    );
    client.running.shutdown().await;
}

#[tokio::test]
async fn confirm_of_a_held_instance_serves_the_stored_body() {
    let body = b"the held instance".to_vec();
    let hash = Hash::of(&body);
    let first = body.clone();
    let link = fake_link(move |seen, n| match n {
        0 => Reply::Frames(full(&first, &[("cache-control", "no-cache")])),
        _ => {
            let offered = seen.field("wirefold-have").unwrap_or_default();
            assert!(offered.contains(&hash.to_hex()), "{offered}");
            Reply::Frames(vec![
                headers(&[("cache-control", "no-cache"), ("x-round", "two")]),
                Frame::Confirm { hash },
            ])
        }
    })
    .await;
    let client = start(config_for(&link)).await;
    assert_eq!(client.get("http://site.test/a").await.body, body);
    let second = client.get("http://site.test/a").await;
    assert_eq!(second.status, 200);
    assert_eq!(second.body, body);
    assert_eq!(second.header("x-round"), Some("two"));
    let seen = link.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].field("wirefold-have"), Some(hash.to_hex().as_str()));
    let metrics = client.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "wirefold_client_requests_total{outcome=\"confirm\"}"
        ),
        1.0
    );
    client.running.shutdown().await;
}

/// zstd, flushed after each piece: one STALE_DATA frame per piece.
fn stale_frames(stale: &[u8], pieces: usize) -> Vec<Frame> {
    let mut encoder = Encoder::new(ContentCoding::Zstd, 3);
    let mut frames = vec![Frame::StaleBegin {
        hash: Hash::of(stale),
        length: stale.len() as u64,
        coding: LinkCoding::Coded(ContentCoding::Zstd),
    }];
    for piece in stale.chunks(stale.len().div_ceil(pieces)) {
        encoder.write(piece);
        encoder.flush();
        frames.push(Frame::StaleData(encoder.take_output().into()));
    }
    frames
}

#[tokio::test]
async fn stale_and_delta_reconstruct_and_the_stale_bytes_never_show() {
    let stale = b"<p>STALE headline</p><p>a long body shared by both versions</p>".repeat(20);
    let current = b"<p>fresh headline</p><p>a long body shared by both versions</p>".repeat(20);
    let delta = codec::dictionary::encode(DictionaryCoding::Dcz, 3, &stale, &current);
    let (s, c) = (stale.clone(), current.clone());
    let link = fake_link(move |_, _| {
        let mut frames = stale_frames(&s, 3);
        frames.extend([
            headers(&[("content-type", "text/html")]),
            Frame::Delta {
                format: DeltaFormat::Dcz,
                base: Hash::of(&s),
                base_len: s.len() as u64,
            },
            Frame::Data(delta.clone().into()),
            end(&c),
        ]);
        Reply::Frames(frames)
    })
    .await;
    let client = start(config_for(&link)).await;
    let got = client.get("http://site.test/news").await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, current);
    assert!(!String::from_utf8_lossy(&got.body).contains("STALE"));
    let metrics = client.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "wirefold_client_requests_total{outcome=\"delta\"}"
        ),
        1.0
    );
    client.running.shutdown().await;
}

#[tokio::test]
async fn a_delta_failing_its_hash_is_retried_once_for_the_full_instance() {
    let base = b"version one of a page that changes".repeat(10);
    let current = b"version two of a page that changes".repeat(10);
    let (b, c) = (base.clone(), current.clone());
    let link = fake_link(move |seen, n| match n {
        0 => Reply::Frames(full(&b, &[("cache-control", "no-cache")])),
        1 => {
            let delta = codec::dictionary::encode(DictionaryCoding::Dcz, 3, &b, &c);
            Reply::Frames(vec![
                headers(&[]),
                Frame::Delta {
                    format: DeltaFormat::Dcz,
                    base: Hash::of(&b),
                    base_len: b.len() as u64,
                },
                Frame::Data(delta.into()),
                end(b"not what the delta makes"),
            ])
        }
        _ => {
            assert_eq!(seen.field("wirefold-want"), Some("full"));
            Reply::Frames(full(&c, &[]))
        }
    })
    .await;
    let client = start(config_for(&link)).await;
    assert_eq!(client.get("http://site.test/p").await.body, base);
    let got = client.get("http://site.test/p").await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, current);
    let seen = link.seen();
    assert_eq!(seen.len(), 3, "exactly one retry");
    assert!(seen[1].field("wirefold-have").is_some());
    assert_eq!(seen[1].field("wirefold-want"), None);
    assert_eq!(seen[2].field("wirefold-have"), None);
    let metrics = client.metrics().await;
    assert_eq!(
        metric(&metrics, "wirefold_client_verification_failures_total"),
        1.0
    );
    client.running.shutdown().await;
}

#[tokio::test]
async fn a_malformed_frame_fails_that_request_and_the_link_stays_up() {
    let link = fake_link(|_, n| match n {
        0 => Reply::Bytes(vec![0x7f, 0, 0, 0, 0]),
        1 => Reply::Frames(vec![
            headers(&[]),
            Frame::Error {
                status: StatusCode::GATEWAY_TIMEOUT,
                message: "origin did not answer".into(),
            },
        ]),
        2 => Reply::Status(403, "bad link token"),
        _ => Reply::Frames(full(b"fine", &[])),
    })
    .await;
    let client = start(config_for(&link)).await;
    let broken = client.get("http://site.test/x").await;
    assert_eq!(broken.status, 502);
    assert!(
        String::from_utf8_lossy(&broken.body).contains("unknown frame type"),
        "{}",
        String::from_utf8_lossy(&broken.body)
    );
    let error = client.get("http://site.test/x").await;
    assert_eq!(error.status, 504);
    assert!(String::from_utf8_lossy(&error.body).contains("origin did not answer"));
    let refused = client.get("http://site.test/x").await;
    assert_eq!(refused.status, 502);
    let text = String::from_utf8_lossy(&refused.body);
    assert!(
        text.contains("403") && text.contains("bad link token"),
        "{text}"
    );
    let fine = client.get("http://site.test/x").await;
    assert_eq!((fine.status, &fine.body[..]), (200, &b"fine"[..]));
    assert_eq!(link.connections(), 1, "one link for all four requests");
    client.running.shutdown().await;
}

#[tokio::test]
async fn a_dropped_link_retries_a_get_and_fails_a_post() {
    let link = fake_link(|seen, n| match (seen.method.as_str(), n) {
        ("GET", 0) => Reply::DropAfter(vec![headers(&[])]),
        ("GET", _) => Reply::Frames(full(b"second try", &[])),
        _ => Reply::DropAfter(vec![headers(&[])]),
    })
    .await;
    let client = start(config_for(&link)).await;
    let got = client.get("http://site.test/g").await;
    assert_eq!((got.status, &got.body[..]), (200, &b"second try"[..]));
    assert_eq!(link.seen().len(), 2);

    let posted = curl(
        "http://site.test/form",
        &["-x", &client.proxy(), "-d", "a=1"],
    )
    .await;
    assert_eq!(posted.status, 502);
    let text = String::from_utf8_lossy(&posted.body);
    assert!(text.contains("link to the server proxy failed"), "{text}");
    assert_eq!(link.seen().len(), 3, "a POST is not repeated");
    assert!(link.connections() >= 2);
    let metrics = client.metrics().await;
    assert!(metric(&metrics, "wirefold_client_link_reconnects_total") >= 1.0);
    client.running.shutdown().await;
}

/// The instances a link request offered, in order.
fn offered(seen: &Seen) -> Vec<String> {
    seen.field("wirefold-have")
        .map(|have| have.split(',').map(|h| h.trim().to_string()).collect())
        .unwrap_or_default()
}

/// Stale data of `stale`, then a delta to `current` against it: the frames of an
/// optimistic answer. The delta's DATA frame is the one before last.
fn stale_then_delta(stale: &[u8], current: &[u8]) -> Vec<Frame> {
    let delta = codec::dictionary::encode(DictionaryCoding::Dcz, 3, stale, current);
    let mut frames = stale_frames(stale, 3);
    frames.extend([
        headers(&[("content-type", "text/html"), ("cache-control", "no-cache")]),
        Frame::Delta {
            format: DeltaFormat::Dcz,
            base: Hash::of(stale),
            base_len: stale.len() as u64,
        },
        Frame::Data(delta.into()),
        end(current),
    ]);
    frames
}

/// A GET whose first answer breaks off inside frame `inside` of `frames` (the link
/// failing under it) is sent again, and the browser gets the answer to the second
/// request, whole; nothing of the broken answer is kept: the next request offers only
/// the instance served.
async fn a_cut_get_is_retried(frames: Vec<Frame>, inside: usize, cut: Cut, current: &[u8]) {
    let hash = Hash::of(current);
    let answer = frames.clone();
    let link = fake_link(move |_, n| match n {
        0 => Reply::Cut {
            frames: answer.clone(),
            inside,
            cut,
        },
        1 => Reply::Frames(answer.clone()),
        _ => Reply::Frames(vec![
            headers(&[("cache-control", "no-cache")]),
            Frame::Confirm { hash },
        ]),
    })
    .await;
    let client = start(ClientConfig {
        // What a silent link runs into; small, so the test is quick.
        response_idle_timeout_ms: 300,
        ..config_for(&link)
    })
    .await;
    let got = client.get("http://site.test/cut").await;
    let context = format!("{cut:?} inside frame {inside}");
    assert_eq!(
        got.status,
        200,
        "{context}: {:?}",
        String::from_utf8_lossy(&got.body)
    );
    assert!(
        got.body == current,
        "{context}: the current instance, whole"
    );
    let again = client.get("http://site.test/cut").await;
    assert!(
        again.body == current,
        "{context}: confirmed from what was kept"
    );

    let seen = link.seen();
    assert_eq!(seen.len(), 3, "{context}: one retry, then the next request");
    assert_eq!(seen[1].uri, seen[0].uri);
    assert_eq!(
        offered(&seen[1]),
        Vec::<String>::new(),
        "{context}: nothing of the cut answer was kept to offer"
    );
    assert_eq!(offered(&seen[2]), vec![hash.to_hex()], "{context}");
    let metrics = client.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "wirefold_client_requests_total{outcome=\"error\"}"
        ),
        0.0,
        "{context}"
    );
    if matches!(cut, Cut::Connection | Cut::Silence) {
        assert!(link.connections() >= 2, "{context}: a new connection");
    }
    client.running.shutdown().await;
}

#[tokio::test]
async fn a_link_cut_inside_a_full_body_frame_retries_a_get() {
    let body = b"<p>the current instance, sent whole</p>".repeat(50);
    let frames = full(&body, &[("cache-control", "no-cache")]);
    assert!(matches!(frames[2], Frame::Data(_)));
    for cut in [Cut::Connection, Cut::Stream, Cut::Silence] {
        a_cut_get_is_retried(frames.clone(), 2, cut, &body).await;
    }
}

#[tokio::test]
async fn a_link_cut_inside_stale_data_or_a_delta_retries_a_get_and_never_shows_the_stale() {
    let stale = b"<p>STALE headline</p><p>a long body shared by both versions</p>".repeat(20);
    let current = b"<p>fresh headline</p><p>a long body shared by both versions</p>".repeat(20);
    let frames = stale_then_delta(&stale, &current);
    let in_stale = 2;
    let in_delta = frames.len() - 2;
    assert!(matches!(frames[in_stale], Frame::StaleData(_)));
    assert!(matches!(frames[in_delta], Frame::Data(_)));
    for inside in [in_stale, in_delta] {
        for cut in [Cut::Connection, Cut::Stream, Cut::Silence] {
            a_cut_get_is_retried(frames.clone(), inside, cut, &current).await;
        }
    }
}

#[tokio::test]
async fn a_link_answer_ending_inside_a_frame_is_a_502_and_the_next_request_works() {
    let body = b"<p>the current instance</p>".repeat(50);
    let stale = b"<p>STALE</p>".repeat(50);
    let (b, st) = (body.clone(), stale.clone());
    let link = fake_link(move |_, n| match n {
        0 => Reply::Cut {
            frames: full(&b, &[("cache-control", "no-cache")]),
            inside: 2,
            cut: Cut::End,
        },
        1 => {
            let frames = stale_then_delta(&st, &b);
            let inside = frames.len() - 2;
            Reply::Cut {
                frames,
                inside,
                cut: Cut::End,
            }
        }
        _ => Reply::Frames(full(&b, &[("cache-control", "no-cache")])),
    })
    .await;
    let client = start(config_for(&link)).await;
    for request in ["a full body", "stale data and a delta"] {
        let got = client.get("http://site.test/short").await;
        let text = String::from_utf8_lossy(&got.body);
        assert_eq!(got.status, 502, "{request}: {text}");
        assert!(text.contains("ended inside a frame"), "{request}: {text}");
        assert!(!text.contains("STALE"), "{request}: {text}");
    }
    let fine = client.get("http://site.test/short").await;
    assert_eq!((fine.status, &fine.body[..]), (200, &body[..]));
    let seen = link.seen();
    assert_eq!(
        seen.len(),
        3,
        "a short answer is no link failure: not retried"
    );
    assert_eq!(
        offered(&seen[2]),
        Vec::<String>::new(),
        "nothing partial kept"
    );
    assert_eq!(link.connections(), 1);
    client.running.shutdown().await;
}

#[tokio::test]
async fn a_get_whose_retry_is_cut_too_is_a_502_and_the_next_request_works() {
    let body = b"<p>the current instance</p>".repeat(50);
    let b = body.clone();
    let link = fake_link(move |_, n| {
        let frames = full(&b, &[("cache-control", "no-cache")]);
        match n {
            0 | 1 => Reply::Cut {
                frames,
                inside: 2,
                cut: Cut::Connection,
            },
            _ => Reply::Frames(frames),
        }
    })
    .await;
    let client = start(config_for(&link)).await;
    let failed = client.get("http://site.test/twice").await;
    let text = String::from_utf8_lossy(&failed.body);
    assert_eq!(failed.status, 502, "{text}");
    assert!(text.contains("link to the server proxy failed"), "{text}");
    let fine = client.get("http://site.test/twice").await;
    assert_eq!((fine.status, &fine.body[..]), (200, &body[..]));
    let seen = link.seen();
    assert_eq!(seen.len(), 3, "one retry only");
    assert_eq!(
        offered(&seen[2]),
        Vec::<String>::new(),
        "nothing partial kept"
    );
    client.running.shutdown().await;
}

#[tokio::test]
async fn a_link_cut_inside_a_streamed_full_body_aborts_the_transfer() {
    // Over the client proxy's buffer: its head and first bytes are on their way to
    // the browser when the link breaks, so only an aborted transfer is honest.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let b = big.clone();
    let link = fake_link(move |_, n| {
        let mut frames = vec![
            headers(&[("cache-control", "no-cache")]),
            Frame::Full {
                coding: LinkCoding::Identity,
            },
        ];
        frames.extend(
            b.chunks(50_000)
                .map(|c| Frame::Data(Bytes::copy_from_slice(c))),
        );
        frames.push(end(&b));
        let cut = match n {
            0 => Cut::Connection,
            1 => Cut::Stream,
            _ => return Reply::Frames(frames),
        };
        Reply::Cut {
            frames,
            inside: 5,
            cut,
        }
    })
    .await;
    let client = start(ClientConfig {
        max_body_bytes: 64 << 10,
        ..config_for(&link)
    })
    .await;
    for cut in ["connection", "stream"] {
        let dir = tempfile::tempdir().unwrap();
        let out = tokio::process::Command::new("curl")
            .args(["-s", "--max-time", "30", "-w", "%{http_code}", "-x"])
            .arg(client.proxy())
            .arg("-o")
            .arg(dir.path().join("body"))
            .arg("http://site.test/big")
            .output()
            .await
            .unwrap();
        let received = std::fs::read(dir.path().join("body")).unwrap_or_default();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "200", "{cut}");
        assert!(
            !out.status.success(),
            "{cut}: a cut stream must not complete normally ({} bytes received)",
            received.len()
        );
        assert_ne!(out.status.code(), Some(28), "{cut}: ended by the proxy");
        assert!(received.len() < big.len(), "{cut}");
        assert!(
            received[..] == big[..received.len()],
            "{cut}: what came was right"
        );
    }
    let fine = client.get("http://site.test/big").await;
    assert_eq!(fine.status, 200);
    assert!(fine.body == big);
    assert_eq!(link.seen().len(), 3, "a streamed body is not repeated");
    let metrics = client.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "wirefold_client_requests_total{outcome=\"error\"}"
        ),
        2.0
    );
    client.running.shutdown().await;
}

#[tokio::test]
async fn a_fresh_instance_is_served_without_the_link() {
    let link =
        fake_link(|_, _| Reply::Frames(full(b"cacheable", &[("cache-control", "max-age=600")])))
            .await;
    let client = start(config_for(&link)).await;
    assert_eq!(client.get("http://site.test/c").await.body, b"cacheable");
    let again = client.get("http://site.test/c").await;
    assert_eq!(again.body, b"cacheable");
    assert!(again.header("age").is_some());
    assert_eq!(link.seen().len(), 1, "served from the held instance");
    // The browser can insist on revalidation.
    let insisted = curl(
        "http://site.test/c",
        &["-x", &client.proxy(), "-H", "Cache-Control: no-cache"],
    )
    .await;
    assert_eq!(insisted.body, b"cacheable");
    assert_eq!(link.seen().len(), 2);
    let metrics = client.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "wirefold_client_requests_total{outcome=\"local_fresh\"}"
        ),
        1.0
    );
    client.running.shutdown().await;
}

#[tokio::test]
async fn private_and_authorized_responses_are_not_kept() {
    let link = fake_link(|_, _| {
        Reply::Frames(full(b"mine", &[("cache-control", "private, max-age=600")]))
    })
    .await;
    let client = start(config_for(&link)).await;
    client.get("http://site.test/me").await;
    client.get("http://site.test/me").await;
    assert_eq!(link.seen().len(), 2);
    assert_eq!(link.seen()[1].field("wirefold-have"), None);
    client.running.shutdown().await;
}

#[tokio::test]
async fn connect_tunnels_bytes_untouched() {
    let origin = servers::origin(|_| response(200, &[("x-direct", "1")], "direct answer")).await;
    let link = fake_link(|_, _| Reply::Status(500, "the link must not be used")).await;
    let client = start(config_for(&link)).await;
    let got = curl(&origin.url("/t"), &["-p", "-x", &client.proxy()]).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, b"direct answer");
    assert_eq!(got.header("x-direct"), Some("1"));
    assert_eq!(origin.hits(), 1);
    assert!(link.seen().is_empty());
    client.running.shutdown().await;
}

#[tokio::test]
async fn reverse_mode_maps_paths_onto_the_site() {
    let link = fake_link(|_, _| Reply::Frames(full(b"site page", &[]))).await;
    let client = start(ClientConfig {
        site: Some("https://site.test/base/".into()),
        ..config_for(&link)
    })
    .await;
    let got = curl(&format!("{}/docs/a?x=1", client.proxy()), &[]).await;
    assert_eq!((got.status, &got.body[..]), (200, &b"site page"[..]));
    assert_eq!(link.seen()[0].uri, "https://site.test/base/docs/a?x=1");

    let plain = start(config_for(&link)).await;
    let refused = curl(&format!("{}/docs/a", plain.proxy()), &[]).await;
    assert_eq!(refused.status, 400);
    assert!(String::from_utf8_lossy(&refused.body).contains("--site"));
    client.running.shutdown().await;
    plain.running.shutdown().await;
}

#[tokio::test]
async fn keeping_no_instances_offers_none() {
    let link =
        fake_link(|_, _| Reply::Frames(full(b"base", &[("cache-control", "no-cache")]))).await;
    let client = start(ClientConfig {
        keep_instances: 0,
        ..config_for(&link)
    })
    .await;
    client.get("http://site.test/k").await;
    client.get("http://site.test/k").await;
    let seen = link.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.field("wirefold-have").is_none()));
    client.running.shutdown().await;
}

#[tokio::test]
async fn configuration_errors_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("client.toml");
    std::fs::write(
        &file,
        "upstream = \"https://a.test:1\"\nkeep_instance = 3\n",
    )
    .unwrap();
    let err = ClientConfig::from_file(&file).unwrap_err().to_string();
    assert!(
        err.contains("keep_instance") && err.contains("client.toml"),
        "{err}"
    );

    let err = client::start(ClientConfig {
        upstream: "http://not-tls.test:80".into(),
        ..ClientConfig::default()
    })
    .await
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains("`upstream`") && err.contains("https://"),
        "{err}"
    );
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_502_until_it_comes_up() {
    let reserved = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = reserved.local_addr().unwrap();
    drop(reserved);
    let cert = link_cert();
    let client = start(config_at(addr, &cert)).await;
    let down = client.get("http://site.test/u").await;
    assert_eq!(down.status, 502);
    let text = String::from_utf8_lossy(&down.body);
    assert!(text.contains("cannot reach the server proxy"), "{text}");

    let listener = TcpListener::bind(addr).await.unwrap();
    let up = serve_link(listener, cert, |_, _| Reply::Frames(full(b"up again", &[])));
    let got = client.get("http://site.test/u").await;
    assert_eq!((got.status, &got.body[..]), (200, &b"up again"[..]));
    assert_eq!(up.seen().len(), 1);
    client.running.shutdown().await;
}

#[tokio::test]
async fn a_full_body_over_the_buffer_limit_streams_and_fails_unless_verified() {
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let b = big.clone();
    let link = fake_link(move |seen, _| {
        let promised = if seen.uri.ends_with("/good") {
            end(&b)
        } else {
            end(b"something else")
        };
        let mut frames = vec![
            headers(&[]),
            Frame::Full {
                coding: LinkCoding::Identity,
            },
        ];
        frames.extend(
            b.chunks(50_000)
                .map(|c| Frame::Data(Bytes::copy_from_slice(c))),
        );
        frames.push(promised);
        Reply::Frames(frames)
    })
    .await;
    let client = start(ClientConfig {
        max_body_bytes: 64 << 10,
        ..config_for(&link)
    })
    .await;
    let good = client.get("http://site.test/good").await;
    assert_eq!(good.body, big);

    client.expect_unverified("http://site.test/bad").await;
    assert_eq!(link.seen().len(), 2, "a streamed body is not repeated");
    client.running.shutdown().await;
}

#[tokio::test]
async fn a_coding_the_server_could_not_decode_stays_labelled() {
    let coded = b"\x00\x01 bytes in a coding only the browser knows".to_vec();
    let c = coded.clone();
    let link = fake_link(move |_, _| {
        Reply::Frames(full(
            &c,
            &[
                ("content-encoding", "x-custom"),
                ("content-type", "text/plain"),
            ],
        ))
    })
    .await;
    let client = start(config_for(&link)).await;
    let got = client.get("http://site.test/coded").await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, coded);
    assert_eq!(got.header("content-encoding"), Some("x-custom"));
    assert_eq!(
        got.header("content-length"),
        Some(coded.len().to_string().as_str())
    );
    client.running.shutdown().await;
}

#[tokio::test]
async fn a_full_body_bomb_streams_in_bounded_steps_and_fails_unverified() {
    let zeros = vec![0u8; 64 << 20];
    let bomb = Bytes::from(codec::compress(ContentCoding::Zstd, 19, &zeros));
    let link = fake_link(move |_, _| {
        Reply::Frames(vec![
            headers(&[]),
            Frame::Full {
                coding: LinkCoding::Coded(ContentCoding::Zstd),
            },
            Frame::Data(bomb.clone()),
            end(b"not the zeros"),
        ])
    })
    .await;
    let client = start(ClientConfig {
        max_body_bytes: 64 << 10,
        ..config_for(&link)
    })
    .await;
    client.expect_unverified("http://site.test/bomb").await;
    client.running.shutdown().await;
}

#[tokio::test]
async fn an_unsafe_request_offers_nothing_and_is_not_retried_after_a_failed_verification() {
    let link = fake_link(|seen, _| match seen.method.as_str() {
        "GET" => Reply::Frames(full(b"a held base", &[("cache-control", "no-cache")])),
        _ => Reply::Frames(vec![
            headers(&[]),
            Frame::Full {
                coding: LinkCoding::Identity,
            },
            Frame::Data(Bytes::from_static(b"what arrived")),
            end(b"what was promised"),
        ]),
    })
    .await;
    let client = start(config_for(&link)).await;
    assert_eq!(client.get("http://site.test/p").await.body, b"a held base");
    let posted = curl("http://site.test/p", &["-x", &client.proxy(), "-d", "a=1"]).await;
    assert_eq!(posted.status, 502);
    let text = String::from_utf8_lossy(&posted.body);
    assert!(
        text.contains("failed verification") && text.contains("POST"),
        "{text}"
    );
    let seen = link.seen();
    assert_eq!(seen.len(), 2, "a POST is not sent again");
    assert_eq!(seen[1].method, Method::POST);
    assert_eq!(
        seen[1].field("wirefold-have"),
        None,
        "a POST offers nothing"
    );
    assert_eq!(seen[1].field("wirefold-want"), None);
    client.running.shutdown().await;
}

#[tokio::test]
async fn reverse_mode_is_no_open_proxy() {
    let origin = servers::origin(|_| response(200, &[], "direct answer")).await;
    let link = fake_link(|_, _| Reply::Frames(full(b"site page", &[]))).await;
    let client = start(ClientConfig {
        site: Some("https://site.test/base/".into()),
        ..config_for(&link)
    })
    .await;
    let elsewhere = curl("http://elsewhere.test/x", &["-x", &client.proxy()]).await;
    assert_eq!(elsewhere.status, 400);
    let text = String::from_utf8_lossy(&elsewhere.body);
    assert!(text.contains("serves only the site"), "{text}");

    let own = curl("http://site.test/docs", &["-x", &client.proxy()]).await;
    assert_eq!((own.status, &own.body[..]), (200, &b"site page"[..]));
    assert_eq!(link.seen().len(), 1);
    assert_eq!(link.seen()[0].uri, "https://site.test/base/docs");

    let tunnel = tokio::process::Command::new("curl")
        .args(["-s", "-S", "--max-time", "30", "-p", "-x"])
        .arg(client.proxy())
        .arg(origin.url("/t"))
        .output()
        .await
        .unwrap();
    assert!(!tunnel.status.success());
    let stderr = String::from_utf8_lossy(&tunnel.stderr);
    assert!(stderr.contains("400"), "{stderr}");
    assert_eq!(origin.hits(), 0, "no tunnel was made");
    client.running.shutdown().await;
}

#[tokio::test]
async fn browser_link_fields_are_not_passed_on() {
    let link = fake_link(|_, _| Reply::Frames(full(b"page", &[]))).await;
    let client = start(config_for(&link)).await;
    let forged = Hash::of(b"something").to_hex();
    let got = curl(
        "http://site.test/f",
        &[
            "-x",
            &client.proxy(),
            "-H",
            "wirefold-link: forged-token",
            "-H",
            &format!("wirefold-have: {forged}"),
            "-H",
            "wirefold-want: full",
        ],
    )
    .await;
    assert_eq!(got.status, 200);
    let seen = link.seen();
    assert_eq!(seen[0].field("wirefold-link"), Some("1"));
    assert_eq!(seen[0].fields.get_all("wirefold-link").iter().count(), 1);
    assert_eq!(seen[0].field("wirefold-have"), None);
    assert_eq!(seen[0].field("wirefold-want"), None);
    client.running.shutdown().await;
}

#[tokio::test]
async fn an_offered_instance_evicted_before_the_answer_gets_the_full_instance() {
    let data = tempfile::tempdir().unwrap();
    let blobs = data.path().join("store").join("blobs");
    // Larger than the store's memory cache (max_store_bytes / 8): read from its file.
    let base: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    let current = b"the current instance".to_vec();
    let (b, c) = (base.clone(), current.clone());
    let link = fake_link(move |seen, n| match n {
        0 => Reply::Frames(full(&b, &[("cache-control", "no-cache")])),
        1 => {
            assert!(seen.field("wirefold-have").is_some());
            // Evicted between the offer and the answer.
            std::fs::remove_dir_all(&blobs).unwrap();
            std::fs::create_dir_all(&blobs).unwrap();
            Reply::Frames(vec![headers(&[]), Frame::Confirm { hash: Hash::of(&b) }])
        }
        _ => {
            assert_eq!(seen.field("wirefold-want"), Some("full"));
            Reply::Frames(full(&c, &[]))
        }
    })
    .await;
    let client = start_in(
        ClientConfig {
            max_store_bytes: 1 << 20,
            ..config_for(&link)
        },
        data,
    )
    .await;
    assert_eq!(client.get("http://site.test/e").await.body, base);
    let got = client.get("http://site.test/e").await;
    assert_eq!((got.status, &got.body[..]), (200, &current[..]));
    assert_eq!(link.seen().len(), 3);
    client.running.shutdown().await;
}

#[tokio::test]
async fn a_200_that_is_not_a_link_answer_is_a_502() {
    let link = fake_link(|_, _| Reply::NotLink("text/html", "<html>a web page</html>")).await;
    let client = start(config_for(&link)).await;
    let got = client.get("http://site.test/n").await;
    assert_eq!(got.status, 502);
    let text = String::from_utf8_lossy(&got.body);
    assert!(
        text.contains("text/html") && text.contains("not a link answer"),
        "{text}"
    );
    client.running.shutdown().await;
}

#[tokio::test]
async fn a_head_goes_as_a_get_and_keeps_its_length() {
    let link = fake_link(|seen, _| {
        assert_eq!(
            seen.method,
            Method::GET,
            "an HTTP/2 HEAD answer cannot carry frames"
        );
        if seen.uri.ends_with("/empty") {
            // An empty instance: the length HEADERS names is the browser's.
            Reply::Frames(vec![
                headers(&[("content-length", "12345"), ("content-type", "text/plain")]),
                Frame::Full {
                    coding: LinkCoding::Identity,
                },
                end(b""),
            ])
        } else {
            Reply::Frames(full(b"twelve bytes", &[("content-length", "999")]))
        }
    })
    .await;
    let client = start(config_for(&link)).await;
    let empty = curl("http://site.test/empty", &["-x", &client.proxy(), "-I"]).await;
    assert_eq!(empty.status, 200);
    assert_eq!(empty.header("content-length"), Some("12345"));
    let head = curl("http://site.test/h", &["-x", &client.proxy(), "-I"]).await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("12"));
    let get = client.get("http://site.test/h").await;
    assert_eq!(get.header("content-length"), Some("12"));
    assert_eq!(get.body, b"twelve bytes");
    assert_eq!(link.seen().len(), 3);
    client.running.shutdown().await;
}

#[tokio::test]
async fn the_browsers_conditions_are_evaluated_against_the_instance() {
    let link = fake_link(|seen, _| {
        let (etag, cache) = if seen.uri.ends_with("/fresh") {
            ("\"v2\"", "max-age=600")
        } else {
            ("\"v1\"", "no-cache")
        };
        Reply::Frames(full(
            b"tagged",
            &[
                ("etag", etag),
                ("cache-control", cache),
                ("last-modified", "Tue, 01 Jan 2030 00:00:00 GMT"),
            ],
        ))
    })
    .await;
    let client = start(config_for(&link)).await;
    let proxy = client.proxy();
    let with = |header: &'static str, url: &'static str| {
        let proxy = proxy.clone();
        async move { curl(url, &["-x", &proxy, "-H", header]).await }
    };
    // Over the link.
    let not_modified = with("If-None-Match: \"v1\"", "http://site.test/c").await;
    assert_eq!(not_modified.status, 304);
    assert_eq!(not_modified.header("etag"), Some("\"v1\""));
    assert!(not_modified.body.is_empty());
    let failed = with("If-Match: \"other\"", "http://site.test/c").await;
    assert_eq!(failed.status, 412);
    let since = with(
        "If-Modified-Since: Wed, 01 Jan 2031 00:00:00 GMT",
        "http://site.test/c",
    )
    .await;
    assert_eq!(since.status, 304);
    let unmodified = with(
        "If-Unmodified-Since: Mon, 01 Jan 2029 00:00:00 GMT",
        "http://site.test/c",
    )
    .await;
    assert_eq!(unmodified.status, 412);
    let other = with("If-None-Match: \"v0\"", "http://site.test/c").await;
    assert_eq!((other.status, &other.body[..]), (200, &b"tagged"[..]));
    // From a fresh held instance.
    assert_eq!(client.get("http://site.test/fresh").await.status, 200);
    let seen_before = link.seen().len();
    let local = with("If-None-Match: \"v2\"", "http://site.test/fresh").await;
    assert_eq!(local.status, 304);
    assert_eq!(local.header("etag"), Some("\"v2\""));
    assert_eq!(link.seen().len(), seen_before, "answered from the store");
    client.running.shutdown().await;
}

/// A page answered with a PROMISE of `/s.css` (on `promised_origin`), then its
/// pushed response `pushed` after the page's END (broken off inside its frame
/// `cut_inside`, when given, by a link that falls silent: the client proxy gives up
/// on it after `response_idle_timeout_ms`, 500 ms here); `/s.css` of the promised
/// origin, asked over the link, is answered with [`GOOD_CSS`]. Returns what the
/// browser got for the page and for that `/s.css`, the link requests seen and the
/// client proxy's metrics.
async fn page_with_push(
    promised_origin: &str,
    pushed: Vec<Frame>,
    cut_inside: Option<usize>,
) -> (Vec<u8>, Vec<u8>, Vec<Seen>, String) {
    let promise = Frame::Promise {
        urls: vec![format!("{promised_origin}/s.css")],
    };
    let page_fields = [("content-type", "text/html"), ("cache-control", "no-cache")];
    let script_pushed = pushed.clone();
    let link = fake_link(move |seen, _| {
        if seen.uri.ends_with("/s.css") {
            return Reply::Frames(full(GOOD_CSS, CSS_FIELDS));
        }
        let mut frames = vec![promise.clone()];
        frames.extend(full(PAGE, &page_fields));
        let page_frames = frames.len();
        frames.extend(script_pushed.clone());
        match cut_inside {
            Some(inside) => Reply::Cut {
                frames,
                inside: page_frames + inside,
                cut: Cut::Silence,
            },
            None => Reply::Frames(frames),
        }
    })
    .await;
    let mut config = config_for(&link);
    if cut_inside.is_some() {
        config.response_idle_timeout_ms = 500;
    }
    let client = start(config).await;
    let page = curl(
        "http://site.test/page.html",
        &["-x", &client.proxy(), "-H", "Accept: text/html"],
    )
    .await;
    assert_eq!(page.status, 200, "the page itself is always served");
    let css = curl(
        &format!("{promised_origin}/s.css"),
        &["-x", &client.proxy()],
    )
    .await;
    assert_eq!(css.status, 200);
    let metrics = client.metrics().await;
    client.running.shutdown().await;
    (page.body, css.body, link.seen(), metrics)
}

const PAGE: &[u8] = b"<!doctype html><link rel=stylesheet href=/s.css>";
const GOOD_CSS: &[u8] = b"body { color: black }";
const CSS_FIELDS: &[(&str, &str)] = &[
    ("content-type", "text/css"),
    ("cache-control", "max-age=600"),
];

/// A pushed response of `/s.css` whose body is `body` and whose END names `named`.
fn pushed_css(body: &[u8], named: &[u8]) -> Vec<Frame> {
    let mut frames = vec![Frame::Push { index: 0 }];
    frames.extend(full(body, CSS_FIELDS));
    frames.pop();
    frames.push(end(named));
    frames
}

fn css_requests(seen: &[Seen]) -> usize {
    seen.iter().filter(|s| s.uri.ends_with("/s.css")).count()
}

#[tokio::test]
async fn a_pushed_instance_is_kept_and_answers_the_browser_without_the_link() {
    let (page, css, seen, metrics) =
        page_with_push("http://site.test", pushed_css(GOOD_CSS, GOOD_CSS), None).await;
    assert_eq!(page, PAGE);
    assert_eq!(css, GOOD_CSS);
    assert_eq!(css_requests(&seen), 0, "answered from the pushed instance");
    assert_eq!(seen[0].field("wirefold-push"), Some("1"));
    assert_eq!(
        metric(&metrics, "wirefold_client_pushes_total{outcome=\"kept\"}"),
        1.0
    );
}

#[tokio::test]
async fn a_pushed_instance_failing_its_hash_never_reaches_the_browser() {
    let (page, css, seen, metrics) = page_with_push(
        "http://site.test",
        pushed_css(b"body { color: red }", GOOD_CSS),
        None,
    )
    .await;
    assert_eq!(page, PAGE);
    assert_eq!(
        css, GOOD_CSS,
        "asked again over the link, never the wrong bytes"
    );
    assert_eq!(css_requests(&seen), 1);
    assert_eq!(
        metric(&metrics, "wirefold_client_pushes_total{outcome=\"failed\"}"),
        1.0
    );
}

#[tokio::test]
async fn a_promise_for_another_origin_is_refused_and_the_page_served() {
    // The browser then asks for the other origin's URL: the pushed bytes were never
    // kept, so it crosses the link.
    let (page, css, seen, metrics) =
        page_with_push("http://evil.test", pushed_css(b"evil", b"evil"), None).await;
    assert_eq!(page, PAGE);
    assert_eq!(css, GOOD_CSS);
    assert_eq!(
        css_requests(&seen),
        1,
        "nothing of the refused push was kept"
    );
    assert_eq!(
        metric(
            &metrics,
            "wirefold_client_pushes_total{outcome=\"refused\"}"
        ),
        1.0
    );
}

#[tokio::test]
async fn a_link_that_dies_mid_push_leaves_the_page_served_and_the_resource_asked_again() {
    // The link falls silent inside the pushed DATA frame.
    let (page, css, seen, metrics) =
        page_with_push("http://site.test", pushed_css(GOOD_CSS, GOOD_CSS), Some(3)).await;
    assert_eq!(page, PAGE);
    assert_eq!(css, GOOD_CSS);
    assert_eq!(css_requests(&seen), 1);
    assert_eq!(
        metric(&metrics, "wirefold_client_pushes_total{outcome=\"failed\"}"),
        1.0
    );
}

#[tokio::test]
async fn a_promise_nobody_asked_for_is_refused() {
    let promise = Frame::Promise {
        urls: vec!["http://site.test/s.css".into()],
    };
    let link = fake_link(move |seen, _| {
        if seen.uri.ends_with("/s.css") {
            return Reply::Frames(full(GOOD_CSS, CSS_FIELDS));
        }
        let mut frames = vec![promise.clone()];
        frames.extend(full(b"not a page", &[("content-type", "text/plain")]));
        frames.extend(pushed_css(GOOD_CSS, GOOD_CSS));
        Reply::Frames(frames)
    })
    .await;
    let client = start(config_for(&link)).await;
    // Not a page request (no Accept: text/html): no pushes were accepted.
    let got = curl("http://site.test/data.txt", &["-x", &client.proxy()]).await;
    assert_eq!(got.body, b"not a page");
    assert_eq!(link.seen()[0].field("wirefold-push"), None);
    let css = curl("http://site.test/s.css", &["-x", &client.proxy()]).await;
    assert_eq!(css.body, GOOD_CSS);
    assert_eq!(css_requests(&link.seen()), 1);
    client.running.shutdown().await;
}
