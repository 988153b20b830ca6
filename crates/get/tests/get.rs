//! `wirefold get` against a wirefold server on loopback with real corpus versions:
//! plain compression, RFC 3229 deltas, RFC 9842 dictionaries (announced and linked),
//! 304s, tampered deltas, and origins that know nothing of wirefold.

// The proxy's test support, shared rather than copied: it starts wirefold servers
// and origins on loopback and reads the shared corpus.
#[path = "../../proxy/tests/support/mod.rs"]
mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::*;
use wirefold_get::{run, GetOptions, Report};

const SCRIPT_V1: &str = "assets/w3c__aria/common_script_aria-js/028.js";
const SCRIPT_V2: &str = "assets/w3c__aria/common_script_aria-js/029.js";
const PAGE_V1: &str = "html/w3c__manifest/index-html--recent/028.html";
const PAGE_V2: &str = "html/w3c__manifest/index-html--recent/029.html";

/// A server that assumes a slow client link, so a delta is worth computing on demand
/// (at the default, the first request after a change gets br while the root scanner
/// computes the delta in the background).
fn slow_link(config: &mut proxy::Config) {
    config.delta.assumed_bandwidth_bps = 1_000_000;
}

async fn get(url: &str, cache: &std::path::Path, fetch_dictionaries: bool) -> Report {
    let mut options = GetOptions::new(url, cache);
    options.fetch_dictionaries = fetch_dictionaries;
    let report = run(&options)
        .await
        .unwrap_or_else(|e| panic!("get {url}: {e}"));
    eprintln!("{}", report.summary());
    report
}

fn hash8(data: &[u8]) -> String {
    store::Hash::of(data).to_hex()[..8].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_page_arrives_as_a_vcdiff_delta_then_304() {
    let (v1, v2) = (corpus_file(PAGE_V1), corpus_file(PAGE_V2));
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("spec.html"), &v1).unwrap();
    let server = start_root(root.path(), slow_link).await;
    let cache = tempfile::tempdir().unwrap();
    let url = server.url("/spec.html");

    let first = get(&url, cache.path(), false).await;
    assert_eq!(
        (first.status, first.delivery.as_str(), first.verified),
        (200, "br", true)
    );
    assert_eq!(first.body, v1);
    assert!(first.wire.body_bytes * 4 < v1.len() as u64);

    std::fs::write(root.path().join("spec.html"), &v2).unwrap();
    let second = get(&url, cache.path(), false).await;
    assert_eq!(second.status, 226, "{}", second.summary());
    assert!(
        second.delivery.starts_with("vcdiff against W/\"") && second.delivery.ends_with("-br\""),
        "{}",
        second.delivery
    );
    assert!(second.verified);
    assert_eq!(
        second.body, v2,
        "delivered bytes are the new version exactly"
    );
    assert_eq!(second.delivered_bytes, v2.len() as u64);
    assert!(
        second.wire.body_bytes * 20 < v2.len() as u64,
        "delta {} vs page {}",
        second.wire.body_bytes,
        v2.len()
    );
    assert!(second.saved_percent > 90.0);

    // The instance the 226 built is named by its own validator: unchanged, it is a 304.
    let third = get(&url, cache.path(), false).await;
    assert_eq!(
        (third.status, third.delivery.as_str(), third.verified),
        (304, "cached", true)
    );
    assert_eq!(third.body, v2);
    assert_eq!(third.wire.body_bytes, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_links_a_dictionary_that_is_fetched_and_used() {
    let (v1, v2) = (corpus_file(PAGE_V1), corpus_file(PAGE_V2));
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("news.html"), &v1).unwrap();
    let server = start_root(root.path(), |_| {}).await;
    let cache = tempfile::tempdir().unwrap();
    let url = server.url("/news.html");

    let first = get(&url, cache.path(), true).await;
    assert_eq!(first.body, v1);
    let fetch = first
        .dictionary_fetches
        .first()
        .expect("the linked dictionary is fetched");
    assert!(fetch.stored && fetch.status == 200, "{}", first.summary());
    assert!(
        fetch.wire.body_bytes > 0,
        "dictionary bytes are counted, apart from the page's"
    );

    std::fs::write(root.path().join("news.html"), &v2).unwrap();
    let second = get(&url, cache.path(), true).await;
    assert_eq!(second.body, v2);
    assert!(second.verified);
    // Against the dictionary or the held instance, whichever the server found smaller.
    let expected = format!("against {}", hash8(&v1));
    assert!(
        second.delivery.ends_with(&expected) || second.status == 226,
        "{}",
        second.delivery
    );
    assert!(
        second.dictionary_fetches.is_empty(),
        "a dictionary already held is not fetched again"
    );
    assert!(second.wire.body_bytes * 20 < v2.len() as u64);
}

/// An origin serving the two versions of a script under versioned names.
async fn script_origin() -> TestOrigin {
    let (v1, v2) = (corpus_file(SCRIPT_V1), corpus_file(SCRIPT_V2));
    origin(move |req| {
        let body = match req.uri().path() {
            "/js/app.v1.js" => v1.clone(),
            "/js/app.v2.js" => v2.clone(),
            _ => return response(404, &[], ""),
        };
        let etag = format!("\"{}\"", hash8(&body));
        let headers = [
            ("content-type", "application/javascript"),
            ("cache-control", "max-age=3600"),
            ("etag", etag.as_str()),
        ];
        response(200, &headers, body)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_versioned_script_is_compressed_against_its_previous_version() {
    let (v1, v2) = (corpus_file(SCRIPT_V1), corpus_file(SCRIPT_V2));
    let origin = script_origin().await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let cache = tempfile::tempdir().unwrap();

    let first = get(&proxy.url("/js/app.v1.js"), cache.path(), true).await;
    assert_eq!(
        (first.status, first.delivery.as_str(), first.body.as_ref()),
        (200, "br", v1.as_slice())
    );

    let second = get(&proxy.url("/js/app.v2.js"), cache.path(), true).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.delivery, format!("dcz against {}", hash8(&v1)));
    assert!(second.verified);
    assert_eq!(second.body, v2);
    assert!(
        second.wire.body_bytes * 5 < first.wire.body_bytes,
        "dcz {} vs br {}",
        second.wire.body_bytes,
        first.wire.body_bytes
    );

    let again = get(&proxy.url("/js/app.v2.js"), cache.path(), true).await;
    assert_eq!(
        (again.status, again.delivery.as_str(), again.body.as_ref()),
        (304, "cached", v2.as_slice())
    );
}

/// A man in the middle in front of `upstream` that flips one byte in the middle of
/// every delta it relays (a 226, or a dcb/dcz body), keeping the headers.
async fn tampering_relay(upstream: SocketAddr) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let client = client.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let client = client.clone();
                    async move {
                        let (mut head, _) = req.into_parts();
                        head.uri =
                            format!("http://{upstream}{}", head.uri.path_and_query().unwrap())
                                .parse()
                                .unwrap();
                        let response = client
                            .request(http::Request::from_parts(head, Full::new(Bytes::new())))
                            .await
                            .unwrap();
                        let (head, body) = response.into_parts();
                        let mut body = body.collect().await.unwrap().to_bytes().to_vec();
                        let coding = head
                            .headers
                            .get("content-encoding")
                            .map(|v| v.to_str().unwrap().to_string());
                        if head.status == 226 || coding.is_some_and(|c| c.starts_with("dc")) {
                            let middle = body.len() / 2;
                            body[middle] ^= 0x20;
                        }
                        Ok::<_, Infallible>(http::Response::from_parts(
                            head,
                            Full::new(Bytes::from(body)),
                        ))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_deltas_are_caught_and_refetched_plain() {
    let (page_v1, page_v2) = (corpus_file(PAGE_V1), corpus_file(PAGE_V2));
    let (script_v1, script_v2) = (corpus_file(SCRIPT_V1), corpus_file(SCRIPT_V2));
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("spec.html"), &page_v1).unwrap();
    let server = start_root(root.path(), slow_link).await;
    let relay = tampering_relay(server.running.addr).await;
    let cache = tempfile::tempdir().unwrap();
    let url = format!("http://{relay}/spec.html");

    get(&url, cache.path(), false).await;
    std::fs::write(root.path().join("spec.html"), &page_v2).unwrap();
    let report = get(&url, cache.path(), false).await;
    let reason = report
        .refetched_after
        .as_deref()
        .expect("the tampered 226 is discarded");
    assert!(reason.contains("vcdiff"), "{reason}");
    assert_eq!(
        (report.status, report.delivery.as_str(), report.verified),
        (200, "br", true)
    );
    assert_eq!(report.body, page_v2, "nothing wrong is delivered");
    assert!(report.summary().contains("refetched plain"));

    let origin = script_origin().await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let relay = tampering_relay(proxy.running.addr).await;
    get(&format!("http://{relay}/js/app.v1.js"), cache.path(), true).await;
    let report = get(&format!("http://{relay}/js/app.v2.js"), cache.path(), true).await;
    assert!(
        report
            .refetched_after
            .as_deref()
            .is_some_and(|r| r.contains("dcz")),
        "{}",
        report.summary()
    );
    assert_eq!(report.body, script_v2);
    assert_ne!(script_v1, script_v2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_without_wirefold_still_works() {
    let page = corpus_file(PAGE_V1);
    let gzipped = codec::compress(wirefold_http::ContentCoding::Gzip, 6, &page);
    let seen_a_im = Arc::new(Mutex::new(Vec::new()));
    let seen = seen_a_im.clone();
    let plain = origin(move |req| {
        seen.lock()
            .unwrap()
            .push(req.headers().get("a-im").is_some());
        if req
            .headers()
            .get("if-none-match")
            .is_some_and(|v| v.to_str().unwrap().contains("\"p1\""))
        {
            return response(304, &[("etag", "\"p1\"")], "");
        }
        response(
            200,
            &[
                ("content-type", "text/html"),
                ("content-encoding", "gzip"),
                ("etag", "\"p1\""),
            ],
            gzipped.clone(),
        )
    })
    .await;
    let cache = tempfile::tempdir().unwrap();
    let first = get(&plain.url("/"), cache.path(), true).await;
    assert_eq!(
        (first.status, first.delivery.as_str(), first.verified),
        (200, "gzip", false)
    );
    assert_eq!(first.body, page);
    assert!(first.summary().contains("unverified"));
    let second = get(&plain.url("/"), cache.path(), true).await;
    assert_eq!((second.status, second.delivery.as_str()), (304, "cached"));
    assert_eq!(second.body, page);
    assert_eq!(
        *seen_a_im.lock().unwrap(),
        [false, true],
        "deltas are asked for only with a base held"
    );
}
