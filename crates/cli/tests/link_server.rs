//! The server proxy's end of the link, spoken to by a bare HTTP/2-over-TLS client
//! that checks every frame sequence of Banga et al.'s states.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

mod servers;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use codec::dictionary::DictionaryCoding;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use link_protocol::frame::{Frame, FrameReader, LinkCoding};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use servers::*;
use store::Hash;
use wirefold_http::ContentCoding;

/// A page with one changing line in the middle, long enough to need several chunks.
fn page(version: usize) -> String {
    let mut text = String::from("<!doctype html><title>series</title>\n");
    for i in 0..4000 {
        if i == 2000 {
            text.push_str(&format!("<p>this is version {version}</p>\n"));
        }
        text.push_str(&format!(
            "<p>line {i}: the unchanging body of a long document</p>\n"
        ));
    }
    text
}

const NO_CACHE: &[(&str, &str)] = &[("cache-control", "no-cache")];

/// An origin whose page is version `n` where `n` is set by the test.
struct Versions {
    origin: TestOrigin,
    version: Arc<AtomicUsize>,
}

/// `fields` go on every response besides the type and the version's ETag.
async fn versioned_origin(
    delay: Duration,
    fields: &'static [(&'static str, &'static str)],
) -> Versions {
    let version = Arc::new(AtomicUsize::new(1));
    let current = version.clone();
    let origin = slow_origin(delay, move |req| {
        let n = current.load(Ordering::SeqCst);
        let etag = format!("\"v{n}\"");
        let mut head = vec![("content-type", "text/html"), ("etag", etag.as_str())];
        head.extend_from_slice(fields);
        if req
            .headers()
            .get("if-none-match")
            .and_then(|v| v.to_str().ok())
            == Some(etag.as_str())
        {
            return response(304, &head[1..], "");
        }
        response(200, &head, page(n))
    })
    .await;
    Versions { origin, version }
}

async fn link_server(tweak: impl FnOnce(&mut proxy::Config)) -> Proxy {
    let data = tempfile::tempdir().unwrap();
    let mut config = test_config(data.path());
    config.link.enabled = true;
    // The origins are on loopback.
    config.link.destinations = proxy::destinations::Destinations::Any;
    config.tls.self_signed = true;
    tweak(&mut config);
    let running = start_link_server(config).await;
    Proxy { running, data }
}

/// One HTTP/2 connection to the server proxy, trusting its published certificate.
struct Link {
    sender: hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
}

impl Link {
    async fn connect(server: &Proxy) -> Link {
        Link::connect_with_window(server, 2 << 20).await
    }

    /// Connects with a per-stream receive window of `window` bytes, released only as
    /// the test reads the body.
    async fn connect_with_window(server: &Proxy, window: u32) -> Link {
        let pem = std::fs::read(server.data.path().join("self-signed-cert.pem")).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            roots.add(cert.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"h2".to_vec()];
        let tcp = tokio::net::TcpStream::connect(server.running.addr)
            .await
            .unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
            .connect(name, tcp)
            .await
            .unwrap();
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(window)
            .handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        Link { sender }
    }

    async fn head(&mut self, url: &str) -> (StatusCode, Vec<Frame>) {
        self.send(Request::get(url), &[], &[("wirefold-method", "HEAD")])
            .await
    }

    /// Sends a link request for `url` naming `have`; returns the HTTP status and frames.
    async fn get(
        &mut self,
        url: &str,
        have: &[Hash],
        extra: &[(&str, &str)],
    ) -> (StatusCode, Vec<Frame>) {
        self.send(Request::get(url), have, extra).await
    }

    /// Asks for `url` holding nothing and reads the frames as a slow link would:
    /// 60 ms after each STALE_DATA (16 KiB), so flow control holds the stale stream
    /// back. `each` sees every frame as it arrives.
    async fn read_slowly(&mut self, url: &str, mut each: impl FnMut(&Frame)) -> Vec<Frame> {
        let req = Request::get(url)
            .header("wirefold-link", "1")
            .body(Empty::new())
            .unwrap();
        let mut body = self.sender.send_request(req).await.unwrap().into_body();
        let (mut reader, mut frames) = (FrameReader::default(), Vec::new());
        while let Some(chunk) = body.frame().await {
            if let Ok(data) = chunk.unwrap().into_data() {
                reader.push(&data);
            }
            while let Some(frame) = reader.next_frame().unwrap() {
                each(&frame);
                if matches!(frame, Frame::StaleData(_)) {
                    tokio::time::sleep(Duration::from_millis(60)).await;
                }
                frames.push(frame);
            }
        }
        frames
    }

    async fn send(
        &mut self,
        req: http::request::Builder,
        have: &[Hash],
        extra: &[(&str, &str)],
    ) -> (StatusCode, Vec<Frame>) {
        let mut req = req.header("wirefold-link", "1");
        if !have.is_empty() {
            let list: Vec<String> = have.iter().map(Hash::to_hex).collect();
            req = req.header("wirefold-have", list.join(", "));
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        let response = self
            .sender
            .send_request(req.body(Empty::new()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        if status != StatusCode::OK {
            return (status, Vec::new());
        }
        let mut reader = FrameReader::default();
        reader.push(&body);
        let mut frames = Vec::new();
        while let Some(frame) = reader.next_frame().unwrap() {
            frames.push(frame);
        }
        reader.finish().unwrap();
        (status, frames)
    }
}

fn names(frames: &[Frame]) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = frames.iter().map(Frame::name).collect();
    names.dedup();
    names
}

fn stream_bytes(frames: &[Frame], stale: bool) -> Vec<u8> {
    frames
        .iter()
        .filter_map(|f| match f {
            Frame::StaleData(d) if stale => Some(d.to_vec()),
            Frame::Data(d) if !stale => Some(d.to_vec()),
            _ => None,
        })
        .flatten()
        .collect()
}

fn decode_full(frames: &[Frame]) -> Vec<u8> {
    let coding = frames.iter().find_map(|f| match f {
        Frame::Full { coding } => Some(*coding),
        _ => None,
    });
    let data = stream_bytes(frames, false);
    match coding.expect("a FULL frame") {
        LinkCoding::Coded(coding) => codec::decompress(coding, &data, 1 << 26).unwrap(),
        LinkCoding::Identity => data,
    }
}

fn decode_stale(frames: &[Frame]) -> Vec<u8> {
    let Frame::StaleBegin {
        coding: LinkCoding::Coded(coding),
        ..
    } = frames[0]
    else {
        panic!("a coded stale stream first: {:?}", names(frames))
    };
    codec::decompress(coding, &stream_bytes(frames, true), 1 << 24).unwrap()
}

fn end_hash(frames: &[Frame]) -> Hash {
    frames
        .iter()
        .find_map(|f| match f {
            Frame::End { hash, .. } => Some(*hash),
            _ => None,
        })
        .expect("an END frame")
}

#[tokio::test]
async fn full_then_confirm_then_delta_against_what_the_client_holds() {
    let site = versioned_origin(Duration::ZERO, NO_CACHE).await;
    let server = link_server(|_| {}).await;
    let mut link = Link::connect(&server).await;
    let url = site.origin.url("/page");

    let (status, frames) = link.get(&url, &[], &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(names(&frames), ["HEADERS", "FULL", "DATA", "END"]);
    let v1 = decode_full(&frames);
    assert_eq!(v1, page(1).as_bytes());
    assert_eq!(end_hash(&frames), Hash::of(&v1));
    let Frame::Headers { status, fields } = &frames[0] else {
        panic!()
    };
    assert_eq!(*status, StatusCode::OK);
    assert_eq!(fields.get("content-type").unwrap(), "text/html");
    assert!(fields.get("content-length").is_none());

    let (_, frames) = link.get(&url, &[Hash::of(&v1)], &[]).await;
    assert_eq!(
        names(&frames),
        ["HEADERS", "CONFIRM"],
        "unchanged: a confirmation only"
    );

    site.version.store(2, Ordering::SeqCst);
    let (_, frames) = link.get(&url, &[Hash::of(&v1)], &[]).await;
    assert_eq!(names(&frames), ["HEADERS", "DELTA", "DATA", "END"]);
    let Frame::Delta { base, base_len, .. } = frames[1].clone() else {
        panic!()
    };
    assert_eq!((base, base_len), (Hash::of(&v1), v1.len() as u64));
    let v2 = codec::dictionary::decode(
        DictionaryCoding::Dcz,
        &v1,
        &stream_bytes(&frames, false),
        1 << 24,
    )
    .unwrap();
    assert_eq!(v2, page(2).as_bytes());
    assert!(
        stream_bytes(&frames, false).len() < 200,
        "a one-line change costs a small delta"
    );
}

/// Every link request is a line of the access log, with the browser's status, the
/// frame bytes, and `link-` and how the answer ended; the status page shows the
/// link's round trip as the kernel measured it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_requests_are_logged_with_how_their_answers_ended() {
    let site = versioned_origin(Duration::ZERO, NO_CACHE).await;
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("access.log");
    let server = link_server(|c| {
        c.log.access = Some(log.clone());
        c.log.access_format = proxy::config::AccessFormat::Json;
    })
    .await;
    let mut link = Link::connect(&server).await;
    let url = site.origin.url("/page");
    let (_, frames) = link.get(&url, &[], &[]).await;
    let v1 = decode_full(&frames);
    let (_, frames) = link.get(&url, &[Hash::of(&v1)], &[]).await;
    assert_eq!(names(&frames), ["HEADERS", "CONFIRM"]);
    site.version.store(2, Ordering::SeqCst);
    let (_, frames) = link.get(&url, &[Hash::of(&v1)], &[]).await;
    assert_eq!(names(&frames), ["HEADERS", "DELTA", "DATA", "END"]);
    let dead = "http://127.0.0.1:9/x";
    link.get(dead, &[], &[]).await;

    let started = std::time::Instant::now();
    let lines: Vec<serde_json::Value> = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().count() >= 4 {
            break text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (v1_len, v2_len) = (page(1).len() as u64, page(2).len() as u64);
    let expected = [
        (url.as_str(), 200, "link-full", Some("miss"), v1_len),
        (
            url.as_str(),
            200,
            "link-confirm",
            Some("revalidated"),
            v1_len,
        ),
        (url.as_str(), 200, "link-delta", Some("miss"), v2_len),
        (dead, 502, "link-relayed", None, 0),
    ];
    for (line, (target, status, mechanism, cache, original)) in lines.iter().zip(expected) {
        assert_eq!(line["target"], target, "{line}");
        assert_eq!(line["protocol"], "HTTP/2.0", "{line}");
        assert_eq!(line["status"], status, "{line}");
        assert_eq!(line["mechanism"], mechanism, "{line}");
        assert_eq!(line["cache"].as_str(), cache, "{line}");
        let sent = line["bytes_sent"].as_u64().unwrap();
        assert!(sent > 0, "frames went: {line}");
        if original > 0 {
            assert_eq!(line["original_bytes"], original, "{line}");
            assert!(sent < original / 10, "{line}");
            assert!(line["origin_seconds"].is_f64(), "{line}");
            assert_eq!(line["content_type"], "text/html", "the instance's: {line}");
        }
    }

    let status = curl(&server.admin_url("/status.json"), &[]).await;
    let status: serde_json::Value = serde_json::from_slice(&status.body).unwrap();
    let link_status = &status["link"];
    assert_eq!(link_status["exchanges"], 4, "{link_status}");
    assert!(
        link_status["latest"]["rtt_ms"].as_f64().unwrap() > 0.0,
        "the kernel's RTT of the link socket: {link_status}"
    );
}

#[tokio::test]
async fn a_slow_origin_gets_the_stale_instance_streamed_then_patched_or_confirmed() {
    let site = versioned_origin(Duration::from_millis(700), NO_CACHE).await;
    let server = link_server(|c| c.link.stale_chunk_bytes = 32 * 1024).await;
    let mut link = Link::connect(&server).await;
    let url = site.origin.url("/page");
    let (_, first) = link.get(&url, &[], &[]).await;
    assert_eq!(
        names(&first),
        ["HEADERS", "FULL", "DATA", "END"],
        "nothing held yet: no stale stream"
    );

    // The client holds nothing; the server holds version 1; the origin now has 2.
    site.version.store(2, Ordering::SeqCst);
    let (_, frames) = link.get(&url, &[], &[]).await;
    assert_eq!(names(&frames)[..2], ["STALE_BEGIN", "STALE_DATA"]);
    let Frame::StaleBegin { hash, length, .. } = frames[0].clone() else {
        panic!()
    };
    let v1 = page(1).into_bytes();
    assert_eq!((hash, length), (Hash::of(&v1), v1.len() as u64));
    let stale = decode_stale(&frames);
    let Some(Frame::Delta { base, base_len, .. }) = frames
        .iter()
        .find(|f| matches!(f, Frame::Delta { .. }))
        .cloned()
    else {
        panic!("a delta after the stale stream: {:?}", names(&frames))
    };
    assert_eq!(base, hash);
    assert!(base_len as usize <= stale.len());
    let v2 = codec::dictionary::decode(
        DictionaryCoding::Dcz,
        &stale[..base_len as usize],
        &stream_bytes(&frames, false),
        1 << 24,
    )
    .unwrap();
    assert_eq!(v2, page(2).as_bytes());
    assert_eq!(end_hash(&frames), Hash::of(&v2));

    // Unchanged at the origin: the whole stale stream, then its confirmation.
    let (_, frames) = link.get(&url, &[], &[]).await;
    assert_eq!(
        names(&frames),
        ["STALE_BEGIN", "STALE_DATA", "HEADERS", "CONFIRM"]
    );
    let stale = decode_stale(&frames);
    assert_eq!(stale, page(2).as_bytes());
}

#[tokio::test]
async fn a_fast_origin_is_not_worth_an_optimistic_send() {
    let site = versioned_origin(Duration::ZERO, NO_CACHE).await;
    let server = link_server(|c| c.link.min_origin_wait_ms = 200).await;
    let mut link = Link::connect(&server).await;
    let url = site.origin.url("/page");
    link.get(&url, &[], &[]).await;
    site.version.store(2, Ordering::SeqCst);
    let (_, frames) = link.get(&url, &[], &[]).await;
    assert_eq!(
        names(&frames),
        ["HEADERS", "FULL", "DATA", "END"],
        "the origin answers too fast for stale bytes to pay"
    );
    assert_eq!(decode_full(&frames), page(2).as_bytes());
}

#[tokio::test]
async fn want_full_gets_no_delta_and_no_stale() {
    let site = versioned_origin(Duration::from_millis(300), NO_CACHE).await;
    let server = link_server(|_| {}).await;
    let mut link = Link::connect(&server).await;
    let url = site.origin.url("/page");
    let (_, frames) = link.get(&url, &[], &[]).await;
    let v1 = decode_full(&frames);
    site.version.store(2, Ordering::SeqCst);
    let (_, frames) = link
        .get(&url, &[Hash::of(&v1)], &[("wirefold-want", "full")])
        .await;
    assert_eq!(names(&frames), ["HEADERS", "FULL", "DATA", "END"]);
    assert_eq!(decode_full(&frames), page(2).as_bytes());
}

#[tokio::test]
async fn uncacheable_pages_are_kept_as_bases_but_private_and_no_store_ones_are_not() {
    let cases: [(&'static [(&'static str, &'static str)], bool); 3] = [
        (&[("cache-control", "no-store")], false),
        (&[("cache-control", "private")], false),
        // The HTTP cache cannot store a `Vary: *` response; it is still a fine base.
        (&[("cache-control", "no-cache"), ("vary", "*")], true),
    ];
    for (fields, kept) in cases {
        assert_eq!(kept_as_base(fields, &[]).await, kept, "{fields:?}");
    }
    let dynamic: &'static [(&'static str, &'static str)] =
        &[("cache-control", "no-cache"), ("vary", "*")];
    assert!(
        !kept_as_base(dynamic, &[("cookie", "session=a")]).await,
        "a page made for one user's cookie is no one else's base"
    );
    let public: &'static [(&'static str, &'static str)] = &[("cache-control", "public, no-cache")];
    for credential in [("cookie", "session=a"), ("authorization", "Bearer a")] {
        assert!(
            !kept_as_base(public, &[credential]).await,
            "the origin's `public` lets a cache keep it, not make it a base: {credential:?}"
        );
    }
    let sets_cookie: &'static [(&'static str, &'static str)] =
        &[("cache-control", "no-cache"), ("set-cookie", "id=1")];
    assert!(!kept_as_base(sets_cookie, &[]).await);
}

/// Whether the first instance fetched (with `request` fields) served as the base of
/// the second: written before the first answer, so the second finds it at once.
async fn kept_as_base(
    fields: &'static [(&'static str, &'static str)],
    request: &[(&str, &str)],
) -> bool {
    let site = versioned_origin(Duration::ZERO, fields).await;
    let server = link_server(|_| {}).await;
    let mut link = Link::connect(&server).await;
    let url = site.origin.url("/page");
    let (_, frames) = link.get(&url, &[], request).await;
    let v1 = decode_full(&frames);
    site.version.store(2, Ordering::SeqCst);
    let (_, frames) = link.get(&url, &[Hash::of(&v1)], request).await;
    assert_eq!(decode_or_patch(&frames, &v1), page(2).as_bytes());
    names(&frames).contains(&"DELTA")
}

#[tokio::test]
async fn head_gets_the_length_and_no_body_and_hits_carry_their_age() {
    let fresh: &'static [(&'static str, &'static str)] = &[("cache-control", "max-age=600")];
    let site = versioned_origin(Duration::ZERO, fresh).await;
    let server = link_server(|_| {}).await;
    let mut link = Link::connect(&server).await;
    let url = site.origin.url("/page");
    let (_, frames) = link.get(&url, &[], &[]).await;
    let v1 = decode_full(&frames);

    let (status, frames) = link.head(&url).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        names(&frames),
        ["HEADERS", "FULL", "END"],
        "no body for HEAD"
    );
    let Frame::Headers { fields, .. } = &frames[0] else {
        panic!()
    };
    assert_eq!(fields.get("content-length").unwrap(), &v1.len().to_string());
    assert!(
        fields.get("age").is_some(),
        "a cache hit says how old it is"
    );
    assert_eq!(
        site.origin.hits(),
        1,
        "both answered from the server proxy's cache"
    );
}

fn decode_or_patch(frames: &[Frame], base: &[u8]) -> Vec<u8> {
    if names(frames).contains(&"DELTA") {
        codec::dictionary::decode(
            DictionaryCoding::Dcz,
            base,
            &stream_bytes(frames, false),
            1 << 24,
        )
        .unwrap()
    } else {
        decode_full(frames)
    }
}

#[tokio::test]
async fn refused_requests_and_origin_failures_are_reported_per_request() {
    let server = link_server(|c| c.link.token = Some("s3cret".into())).await;
    let mut link = Link::connect(&server).await;
    let (status, _) = link.get("http://127.0.0.1:9/x", &[], &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "the token is required");

    let req = |have: &'static str| {
        let mut r = Request::get("http://127.0.0.1:9/x").header("wirefold-link", "s3cret");
        if !have.is_empty() {
            r = r.header("wirefold-have", have);
        }
        r.body(Empty::new()).unwrap()
    };
    let bad = link.sender.send_request(req("zz")).await.unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);

    // A dead origin: the browser's answer is a 502, carried in the frames.
    let dead = link.sender.send_request(req("")).await.unwrap();
    assert_eq!(dead.status(), StatusCode::OK);
    let mut reader = FrameReader::default();
    reader.push(&dead.into_body().collect().await.unwrap().to_bytes());
    let Some(Frame::Headers { status, .. }) = reader.next_frame().unwrap() else {
        panic!()
    };
    assert_eq!(status, StatusCode::BAD_GATEWAY);

    // A plain (non-link) request to a server proxy without an origin is refused.
    let plain = curl(&server.url("/x"), &[]).await;
    assert_eq!(plain.status, 400);
}

#[tokio::test]
async fn an_origin_coded_body_crosses_the_link_as_it_came() {
    let packed = codec::compress(ContentCoding::Br, 11, page(1).as_bytes());
    let sent = packed.clone();
    let origin = origin(move |_| {
        response(
            200,
            &[("content-type", "text/html"), ("content-encoding", "br")],
            sent.clone(),
        )
    })
    .await;
    let server = link_server(|_| {}).await;
    let mut link = Link::connect(&server).await;
    let (_, frames) = link.get(&origin.url("/page"), &[], &[]).await;
    assert!(frames.contains(&Frame::Full {
        coding: LinkCoding::Coded(ContentCoding::Br)
    }));
    assert_eq!(
        stream_bytes(&frames, false),
        packed,
        "no re-encoding on the server proxy"
    );
    assert_eq!(decode_full(&frames), page(1).as_bytes());
    let Frame::Headers { fields, .. } = &frames[0] else {
        panic!()
    };
    assert!(
        fields.get("content-encoding").is_none(),
        "the coding is the link's business"
    );
}

/// Bytes no coding shrinks, so a stale stream of them outlasts a flow-control window.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_diverges_early_is_cut_through_as_it_arrives() {
    cut_through_case(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_answer_that_outgrows_the_buffer_after_a_cut_through_streams_on() {
    cut_through_case(true).await;
}

/// Version 2 of a 1 MiB page arrives in two parts: 128 KiB at once, the rest only
/// once the client has seen new data. `chunked`: without a declared length, and the
/// rest outgrows the buffer (512 KiB, which version 1 fits) while the cut-through runs.
/// The page is one the cache may not keep (`Vary: *`); version 3 differs from
/// version 2 in one byte.
async fn cut_through_case(chunked: bool) {
    use tokio::io::AsyncWriteExt;
    let v1_len = if chunked { 480 << 10 } else { 1 << 20 };
    let (v1, v2) = (noise(1, v1_len), noise(2, 1 << 20));
    let mut v3 = v2.clone();
    v3[1000] ^= 0xff;
    let first_part = 128 << 10;
    let requests = Arc::new(AtomicUsize::new(0));
    let release_rest = Arc::new(tokio::sync::Notify::new());
    let script = {
        let versions = [v1.clone(), v2.clone(), v3.clone()];
        let (requests, release_rest) = (requests.clone(), release_rest.clone());
        move |mut stream: tokio::net::TcpStream| {
            let versions = versions.clone();
            let (requests, release_rest) = (requests.clone(), release_rest.clone());
            async move {
                if read_head(&mut stream).await.is_none() {
                    return;
                }
                let n = requests.fetch_add(1, Ordering::SeqCst).min(2);
                let body = &versions[n];
                let framing = if chunked {
                    "transfer-encoding: chunked".to_string()
                } else {
                    format!("content-length: {}", body.len())
                };
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\nvary: *\r\n\
                     {framing}\r\nconnection: close\r\n\r\n"
                );
                stream.write_all(head.as_bytes()).await.unwrap();
                let parts = if n == 1 {
                    vec![&body[..first_part], &body[first_part..]]
                } else {
                    vec![&body[..]]
                };
                for (i, part) in parts.iter().enumerate() {
                    if i > 0 {
                        release_rest.notified().await;
                    }
                    if chunked {
                        let size = format!("{:x}\r\n", part.len());
                        stream.write_all(size.as_bytes()).await.unwrap();
                    }
                    stream.write_all(part).await.unwrap();
                    if chunked {
                        stream.write_all(b"\r\n").await.unwrap();
                    }
                }
                if chunked {
                    stream.write_all(b"0\r\n\r\n").await.unwrap();
                }
            }
        }
    };
    let origin = raw_origin(script).await;
    let server = link_server(|c| {
        c.link.min_origin_wait_ms = 0;
        if chunked {
            c.limits.max_buffered_body = 512 << 10;
        }
    })
    .await;
    // A 64 KiB window, released only as the test reads.
    let mut link = Link::connect_with_window(&server, 64 << 10).await;
    let url = format!("http://{origin}/noise");
    let (_, frames) = link.get(&url, &[], &[]).await;
    assert!(decode_full(&frames) == v1, "{:?}", names(&frames));
    // The client holds nothing: version 1 goes ahead as stale data, read slowly so
    // flow control holds it back; the first part of version 2 arrives at once and
    // differs from the first byte.
    let mut released = false;
    let read_all = link.read_slowly(&url, |frame| {
        // New data before the origin has finished: that is the cut-through.
        if !released && matches!(frame, Frame::Data(_)) {
            release_rest.notify_one();
            released = true;
        }
    });
    // Without a cut-through nothing new arrives until the origin finishes, which it
    // does only once new data arrived: the wait would never end.
    let frames = tokio::time::timeout(Duration::from_secs(60), read_all)
        .await
        .expect("no new data came while the origin was still sending");
    assert!(
        released,
        "no new data arrived before the origin finished: {:?}",
        names(&frames)
    );
    assert_eq!(
        names(&frames),
        [
            "STALE_BEGIN",
            "STALE_DATA",
            "HEADERS",
            "FULL",
            "DATA",
            "END"
        ]
    );
    assert!(
        decode_full(&frames) == v2,
        "the new instance is what arrived"
    );
    assert_eq!(end_hash(&frames), Hash::of(&v2));
    let stale_sent = stream_bytes(&frames, true).len();
    assert!(
        stale_sent < v1.len(),
        "the stale stream stopped early: {stale_sent} bytes"
    );

    if chunked {
        return; // too big for the buffer: no base is kept
    }
    // What was cut through is kept as a base like any other answer.
    let (_, frames) = link.get(&url, &[Hash::of(&v2)], &[]).await;
    assert_eq!(names(&frames), ["HEADERS", "DELTA", "DATA", "END"]);
    assert_eq!(end_hash(&frames), Hash::of(&v3));
}

/// An error page that arrives slowly is never cut through: a stored copy may yet
/// stand in for it (stale-if-error) once it is in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_error_page_is_not_cut_through() {
    let error_page = noise(2, 512 << 10);
    let (frames, cut) = slow_second_answer("503 Service Unavailable", error_page.clone()).await;
    let status = frames.iter().find_map(|f| match f {
        Frame::Headers { status, .. } => Some(*status),
        _ => None,
    });
    assert_eq!(status, Some(StatusCode::SERVICE_UNAVAILABLE));
    assert!(decode_full(&frames) == error_page, "{:?}", names(&frames));
    assert!(!cut, "an error page was cut through");
}

/// A slow page that differs from the stale one only by an early edit (a nonce) is
/// not cut through: the delta once it is in is far smaller than the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_page_with_an_early_edit_is_patched_not_cut_through() {
    let mut edited = noise(1, 512 << 10);
    edited[10..26].copy_from_slice(b"nonce=0123456789");
    let (frames, cut) = slow_second_answer("200 OK", edited.clone()).await;
    assert!(!cut, "a small early edit was cut through");
    assert_eq!(
        names(&frames),
        [
            "STALE_BEGIN",
            "STALE_DATA",
            "HEADERS",
            "DELTA",
            "DATA",
            "END"
        ]
    );
    assert_eq!(end_hash(&frames), Hash::of(&edited));
}

/// A 512 KiB page (noise), then `second` with `status`, whose body pauses 400 ms
/// after its first 128 KiB; the second request holds nothing, so the first page
/// streams as stale data to a slowly reading client meanwhile. Returns the second
/// answer's frames and whether the server cut through.
async fn slow_second_answer(status: &'static str, second: Vec<u8>) -> (Vec<Frame>, bool) {
    use tokio::io::AsyncWriteExt;
    let page = noise(1, 512 << 10);
    let requests = Arc::new(AtomicUsize::new(0));
    let script = {
        let (page, second, requests) = (page.clone(), second.clone(), requests.clone());
        move |mut stream: tokio::net::TcpStream| {
            let (page, second) = (page.clone(), second.clone());
            let first = requests.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                if read_head(&mut stream).await.is_none() {
                    return;
                }
                let (status, body) = if first {
                    ("200 OK", page)
                } else {
                    (status, second)
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: text/html\r\nvary: *\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                stream.write_all(head.as_bytes()).await.unwrap();
                stream.write_all(&body[..128 << 10]).await.unwrap();
                if !first {
                    tokio::time::sleep(Duration::from_millis(400)).await;
                }
                stream.write_all(&body[128 << 10..]).await.unwrap();
            }
        }
    };
    let origin = raw_origin(script).await;
    let server = link_server(|c| c.link.min_origin_wait_ms = 0).await;
    let mut link = Link::connect_with_window(&server, 64 << 10).await;
    let url = format!("http://{origin}/slow");
    let (_, frames) = link.get(&url, &[], &[]).await;
    assert!(decode_full(&frames) == page, "{:?}", names(&frames));

    let frames = link.read_slowly(&url, |_| {}).await;
    let metrics = metrics_text(&server).await;
    (frames, metrics.contains("result=\"cut-through\""))
}

/// A forward server's token holders may not reach the server's own host unless
/// `link.destinations` says so: an address literal is refused at once (403), a name
/// as it resolves (the origin is then unreachable: 502), naming the policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_server_does_not_fetch_from_its_own_host_by_default() {
    let origin = origin(|_| response(200, &[("content-type", "text/plain")], "local")).await;
    let port = origin.addr.port();
    let server = link_server(|c| {
        c.link.destinations = proxy::destinations::Destinations::Private;
    })
    .await;
    let mut link = Link::connect(&server).await;
    let headers_status = |frames: &[Frame]| {
        frames.iter().find_map(|f| match f {
            Frame::Headers { status, .. } => Some(*status),
            _ => None,
        })
    };
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://[::1]:{port}/"),
        format!("http://localhost:{port}/"),
    ] {
        let (status, frames) = link.get(&url, &[], &[]).await;
        let text = String::from_utf8_lossy(&decode_full(&frames)).to_string();
        let expected = if url.contains("localhost") {
            StatusCode::BAD_GATEWAY
        } else {
            StatusCode::FORBIDDEN
        };
        assert_eq!(
            (status, headers_status(&frames)),
            (StatusCode::OK, Some(expected)),
            "{url}: {text}"
        );
        assert!(text.contains("link.destinations"), "{url}: {text}");
    }
}

/// A client proxy that keeps a stream open without reading is dropped from the
/// exchange after `link.idle_client_timeout_ms`: here a stale stream stalls on the
/// window while the origin thinks; the response ends without END (the client proxy
/// sees it truncated), and the request counts as 499.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_dropped() {
    let page = noise(3, 1 << 20);
    let origin = {
        let page = page.clone();
        slow_origin(Duration::from_millis(1000), move |_| {
            response(
                200,
                &[("content-type", "text/html"), ("vary", "*")],
                page.clone(),
            )
        })
        .await
    };
    let server = link_server(|c| {
        c.link.min_origin_wait_ms = 0;
        c.link.idle_client_timeout_ms = 300;
    })
    .await;
    let mut link = Link::connect_with_window(&server, 64 << 10).await;
    let url = format!("http://{}/big", origin.addr);
    let (_, frames) = link.get(&url, &[], &[]).await;
    assert!(decode_full(&frames) == page, "{:?}", names(&frames));

    let req = Request::get(&url)
        .header("wirefold-link", "1")
        .body(Empty::new())
        .unwrap();
    let mut body = link.sender.send_request(req).await.unwrap().into_body();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (mut reader, mut frames) = (FrameReader::default(), Vec::new());
    while let Some(Ok(chunk)) = body.frame().await {
        if let Ok(data) = chunk.into_data() {
            reader.push(&data);
        }
        while let Some(frame) = reader.next_frame().unwrap() {
            frames.push(frame);
        }
    }
    assert_eq!(names(&frames), ["STALE_BEGIN", "STALE_DATA"]);
    let metrics = metrics_text(&server).await;
    assert!(metrics.contains("status=\"499\""), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_bombs_through_the_server_proxy_end_in_502s_within_the_decode_budget() {
    const BUDGET: usize = 2 << 20;
    let out = std::process::Command::new("sh")
        .args(["-c", "head -c 64M /dev/zero | gzip -9 -c"])
        .output()
        .expect("sh, head and gzip run");
    let bomb = Bytes::from(out.stdout);
    let origin = origin(move |_| {
        response(
            200,
            &[("content-type", "text/plain"), ("content-encoding", "gzip")],
            bomb.clone(),
        )
    })
    .await;
    let server = link_server(|c| {
        c.limits.max_decoded_body = 8 << 20;
        c.limits.max_decoding_memory = BUDGET;
    })
    .await;
    let link = Link::connect(&server).await;
    let answers: Vec<_> = (0..4)
        .map(|i| {
            let mut link = Link {
                sender: link.sender.clone(),
            };
            let url = origin.url(&format!("/bomb/{i}"));
            tokio::spawn(async move { link.get(&url, &[], &[]).await })
        })
        .collect();
    for answer in answers {
        let (status, frames) = answer.await.unwrap();
        assert_eq!(status, StatusCode::OK);
        let Some(Frame::Headers { status, .. }) = frames.first() else {
            panic!("{:?}", names(&frames))
        };
        assert_eq!(*status, StatusCode::BAD_GATEWAY, "the browser's answer");
    }
    let metrics = curl(&server.admin_url("/metrics"), &[]).await;
    let metrics = String::from_utf8(metrics.body).unwrap();
    let peak = metric(&metrics, "wirefold_decode_memory_peak_bytes ");
    assert!(peak > 0.0 && peak <= BUDGET as f64, "peak {peak}");
    assert_eq!(
        metric(&metrics, "wirefold_decodes_unheld_total{reason=\"budget\"}"),
        4.0
    );
}

/// A site of one page (no-cache) referencing `resources` (path, body; max-age=600),
/// counting requests.
async fn page_site(resources: Vec<(String, Vec<u8>)>) -> TestOrigin {
    let mut page = String::from("<!doctype html><title>p</title>");
    for (path, _) in &resources {
        page.push_str(&format!("<img src={path}>"));
    }
    origin(move |req| {
        let path = req.uri().path();
        if path == "/page.html" {
            let fields = [("content-type", "text/html"), ("cache-control", "no-cache")];
            return response(200, &fields, page.clone());
        }
        match resources.iter().find(|(p, _)| p == path) {
            Some((_, body)) => response(
                200,
                &[
                    ("content-type", "image/png"),
                    ("cache-control", "max-age=600"),
                ],
                body.clone(),
            ),
            None => response(404, &[], "no"),
        }
    })
    .await
}

const ACCEPTS_PUSH: &[(&str, &str)] = &[("wirefold-push", "1"), ("accept", "text/html")];

/// The frame names without DATA (how a body splits into DATA frames is not the point).
fn shape(frames: &[Frame]) -> Vec<&'static str> {
    names(frames).into_iter().filter(|n| *n != "DATA").collect()
}

#[tokio::test]
async fn a_page_promises_its_resources_before_its_headers_and_pushes_them_after() {
    let resources = vec![
        ("/a.png".to_string(), noise(1, 3000)),
        ("/b.png".to_string(), noise(2, 4000)),
    ];
    let site = page_site(resources.clone()).await;
    let server = link_server(|c| c.link.optimistic = false).await;
    let mut link = Link::connect(&server).await;
    let url = site.url("/page.html");

    let (_, plain) = link.get(&url, &[], &[("accept", "text/html")]).await;
    assert_eq!(
        shape(&plain),
        ["HEADERS", "FULL", "END"],
        "no push unless accepted"
    );

    let (_, frames) = link.get(&url, &[], ACCEPTS_PUSH).await;
    assert_eq!(
        shape(&frames),
        [
            "PROMISE", "HEADERS", "FULL", "END", "PUSH", "HEADERS", "FULL", "END", "PUSH",
            "HEADERS", "FULL", "END"
        ]
    );
    let Frame::Promise { urls } = &frames[0] else {
        panic!("PROMISE first")
    };
    assert_eq!(urls, &[site.url("/a.png"), site.url("/b.png")]);
    let ends: Vec<Hash> = frames
        .iter()
        .filter_map(|f| match f {
            Frame::End { hash, .. } => Some(*hash),
            _ => None,
        })
        .collect();
    assert_eq!(
        ends[1..],
        [Hash::of(&resources[0].1), Hash::of(&resources[1].1)]
    );

    // What the client holds (announced by hash prefix) is confirmed, not resent.
    let held = format!(
        "{:016x}",
        link_protocol::frame::held_prefix(&Hash::of(&resources[0].1))
    );
    let mut asked = ACCEPTS_PUSH.to_vec();
    asked.push(("wirefold-held", &held));
    let (_, frames) = link.get(&url, &[], &asked).await;
    assert_eq!(
        shape(&frames),
        [
            "PROMISE", "HEADERS", "FULL", "END", "PUSH", "HEADERS", "CONFIRM", "PUSH", "HEADERS",
            "FULL", "END"
        ]
    );
    assert_eq!(
        server
            .metric("wirefold_link_pushes_total{result=\"held\"}")
            .await,
        1.0
    );

    let (status, _) = link
        .get(
            &url,
            &[],
            &[("wirefold-push", "1"), ("wirefold-held", "xyz")],
        )
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "a malformed announcement is refused"
    );
}

#[tokio::test]
async fn a_client_proxy_that_resets_the_stream_stops_the_pushes() {
    let resources: Vec<(String, Vec<u8>)> = (0..16)
        .map(|i| (format!("/r{i}.png"), noise(i, 100_000)))
        .collect();
    let site = page_site(resources).await;
    let server = link_server(|c| c.link.optimistic = false).await;
    // A 64 KiB stream window: the first pushed resource fills it.
    let mut link = Link::connect_with_window(&server, 65_535).await;
    let mut req = Request::get(site.url("/page.html")).header("wirefold-link", "1");
    for (k, v) in ACCEPTS_PUSH {
        req = req.header(*k, *v);
    }
    let response = link
        .sender
        .send_request(req.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let mut body = response.into_body();
    let mut reader = FrameReader::default();
    let mut ends = 0;
    'page: while let Some(chunk) = body.frame().await {
        if let Ok(data) = chunk.unwrap().into_data() {
            reader.push(&data);
        }
        while let Some(frame) = reader.next_frame().unwrap() {
            if matches!(frame, Frame::End { .. }) {
                ends += 1;
                break 'page;
            }
        }
    }
    assert_eq!(ends, 1, "the page arrived");
    drop(body); // RST_STREAM: the client proxy wants no more of it.
                // The exchange ends (it is counted) once the server has stopped pushing.
    for _ in 0..200 {
        if server
            .metric("wirefold_requests_total{method=\"GET\"")
            .await
            >= 1.0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        server
            .metric("wirefold_requests_total{method=\"GET\"")
            .await,
        1.0
    );
    assert!(
        site.hits() <= 1 + 5,
        "the page and at most the few resources fetched ahead, not all 16: {}",
        site.hits()
    );
}
