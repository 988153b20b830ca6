//! The HTTP cache in proxy mode: what is stored and reused, what never is, and
//! how revalidation and concurrent misses behave.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::*;

fn page(n: usize) -> String {
    let mut s = String::from("<!doctype html><title>t</title>");
    for i in 0..200 {
        s.push_str(&format!(
            "<p>paragraph {i} of version {n}, with some words to compress</p>\n"
        ));
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cacheable_responses_are_served_from_the_store() {
    let origin = origin(|req| {
        let cc = match req.uri().path() {
            "/fresh" => "max-age=60",
            "/nostore" => "no-store",
            "/private" => "private, max-age=60",
            _ => "max-age=60",
        };
        response(
            200,
            &[("content-type", "text/html"), ("cache-control", cc)],
            page(1),
        )
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;

    let first = curl(&proxy.url("/fresh"), &["--compressed"]).await;
    assert_eq!(first.body, page(1).as_bytes());
    assert_eq!(
        first.header("cache-status"),
        Some("wirefold; fwd=miss; stored")
    );
    let second = curl(&proxy.url("/fresh"), &["-H", "Accept-Encoding: gzip"]).await;
    assert_eq!(second.header("cache-status"), Some("wirefold; hit"));
    assert!(second.header("age").is_some());
    assert_eq!(decode_with_cli("gzip", &second.body), page(1).as_bytes());
    assert_eq!(origin.hits(), 1);

    for path in ["/nostore", "/private"] {
        curl(&proxy.url(path), &[]).await;
        let r = curl(&proxy.url(path), &["--compressed"]).await;
        assert_eq!(r.body, page(1).as_bytes());
        assert_eq!(
            r.header("cache-status"),
            Some("wirefold; fwd=miss"),
            "{path} is never stored"
        );
    }
    assert_eq!(origin.hits(), 5);

    // Requests with credentials bypass the shared cache.
    let r = curl(&proxy.url("/fresh"), &["-H", "Authorization: Bearer x"]).await;
    assert_eq!(r.header("cache-status"), Some("wirefold; fwd=bypass"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_entries_are_revalidated_with_validators() {
    let version = Arc::new(AtomicUsize::new(1));
    let v = version.clone();
    let origin = origin(move |req| {
        let n = v.load(Ordering::SeqCst);
        let etag = format!("\"v{n}\"");
        if req
            .headers()
            .get("if-none-match")
            .and_then(|h| h.to_str().ok())
            == Some(etag.as_str())
        {
            return response(304, &[("etag", &etag), ("cache-control", "no-cache")], "");
        }
        response(
            200,
            &[
                ("content-type", "text/html"),
                ("cache-control", "no-cache"),
                ("etag", &etag),
            ],
            page(n),
        )
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let url = proxy.url("/page");
    assert_eq!(curl(&url, &["--compressed"]).await.body, page(1).as_bytes());
    let r = curl(&url, &["--compressed"]).await;
    assert_eq!(
        r.header("cache-status"),
        Some("wirefold; fwd=stale; fwd-status=304")
    );
    assert_eq!(r.body, page(1).as_bytes());
    version.store(2, Ordering::SeqCst);
    let r = curl(&url, &["--compressed"]).await;
    assert_eq!(
        r.body,
        page(2).as_bytes(),
        "a changed page is never served stale"
    );
    assert_eq!(origin.hits(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vary_keeps_variants_apart() {
    let origin = origin(|req| {
        let lang = req
            .headers()
            .get("accept-language")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none")
            .to_string();
        response(
            200,
            &[
                ("content-type", "text/plain"),
                ("cache-control", "max-age=60"),
                ("vary", "Accept-Language"),
            ],
            format!("language {lang} {}", "x".repeat(4000)),
        )
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let url = proxy.url("/v");
    for lang in ["en", "fr", "en", "fr"] {
        let r = curl(
            &url,
            &["--compressed", "-H", &format!("Accept-Language: {lang}")],
        )
        .await;
        assert!(String::from_utf8_lossy(&r.body).starts_with(&format!("language {lang} ")));
        let vary = r.header("vary").unwrap().to_ascii_lowercase();
        assert!(
            vary.contains("accept-language") && vary.contains("accept-encoding"),
            "{vary}"
        );
    }
    assert_eq!(origin.hits(), 2);
}

/// An origin answering every request with `page(7)`, cacheable, after `delay`.
async fn slow_cacheable_origin(delay: Duration) -> TestOrigin {
    slow_origin(delay, |_| {
        response(
            200,
            &[
                ("content-type", "text/html"),
                ("cache-control", "max-age=60"),
            ],
            page(7),
        )
    })
    .await
}

/// `clients` requests for `url` at once.
fn ask_at_once(url: &str, clients: usize) -> Vec<tokio::task::JoinHandle<Curled>> {
    (0..clients)
        .map(|_| {
            let url = url.to_string();
            tokio::spawn(async move { curl(&url, &["--compressed"]).await })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_make_one_origin_request() {
    let origin = slow_cacheable_origin(Duration::from_millis(300)).await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let clients = ask_at_once(&proxy.url("/slow"), 8);
    for c in clients {
        assert_eq!(c.await.unwrap().body, page(7).as_bytes());
    }
    assert_eq!(origin.hits(), 1);
}

/// The leader of a fill whose client goes away midway (its work is dropped) hands the
/// lead to one of the waiting requests, not to all of them at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_abandoned_by_its_client_is_led_by_one_waiting_request() {
    use tokio::io::AsyncWriteExt;
    let origin = slow_cacheable_origin(Duration::from_millis(1000)).await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    // The leader's client asks, then leaves while the origin takes its time.
    let mut leaving = tokio::net::TcpStream::connect(proxy.running.addr)
        .await
        .unwrap();
    leaving
        .write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let clients = ask_at_once(&proxy.url("/slow"), 6);
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(leaving);
    for c in clients {
        assert_eq!(c.await.unwrap().body, page(7).as_bytes());
    }
    // The abandoned fill's request, and one more.
    assert_eq!(origin.hits(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_encodings_pass_through_or_are_decoded() {
    let gz = {
        let mut child = std::process::Command::new("gzip")
            .args(["-c", "-6"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(page(3).as_bytes())
            .unwrap();
        child.wait_with_output().unwrap().stdout
    };
    let body = bytes::Bytes::from(gz);
    let origin = origin(move |req| {
        let cc = if req.uri().path() == "/stream" {
            "no-store"
        } else {
            "max-age=60"
        };
        response(
            200,
            &[
                ("content-type", "text/html"),
                ("content-encoding", "gzip"),
                ("cache-control", cc),
            ],
            body.clone(),
        )
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |c| c.limits.max_buffered_body = 1024).await;
    // Cacheable: stored decoded, served in what the client accepts.
    let r = curl(&proxy.url("/cached"), &[]).await;
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, page(3).as_bytes());
    let r = curl(&proxy.url("/cached"), &["-H", "Accept-Encoding: zstd"]).await;
    assert_eq!(r.header("content-encoding"), Some("zstd"));
    assert_eq!(decode_with_cli("zstd", &r.body), page(3).as_bytes());
    // Too large to buffer: streamed; passed through when accepted, decoded when not.
    let r = curl(&proxy.url("/stream"), &["-H", "Accept-Encoding: gzip"]).await;
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode_with_cli("gzip", &r.body), page(3).as_bytes());
    let r = curl(&proxy.url("/stream"), &["-H", "Accept-Encoding: br"]).await;
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert_eq!(decode_with_cli("brotli", &r.body), page(3).as_bytes());
    let r = curl(&proxy.url("/stream"), &[]).await;
    assert_eq!(r.body, page(3).as_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_and_unsafe_methods() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let origin = origin(move |req| {
        let h = req.headers();
        let get = |n: &str| {
            h.get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        log.lock().unwrap().push((
            req.method().to_string(),
            get("host"),
            get("via"),
            get("x-forwarded-for"),
            get("x-forwarded-proto"),
            get("x-forwarded-host"),
            get("connection"),
        ));
        response(
            200,
            &[
                ("content-type", "text/plain"),
                ("cache-control", "max-age=60"),
            ],
            "ok",
        )
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    curl(
        &proxy.url("/x"),
        &[
            "-H",
            "Connection: keep-alive, X-Secret",
            "-H",
            "X-Secret: 1",
        ],
    )
    .await;
    let r = curl(&proxy.url("/x"), &[]).await;
    assert_eq!(r.header("cache-status"), Some("wirefold; hit"));
    curl(&proxy.url("/x"), &["-X", "POST", "-d", "a=1"]).await;
    let r = curl(&proxy.url("/x"), &[]).await;
    assert_eq!(
        r.header("cache-status"),
        Some("wirefold; fwd=miss; stored"),
        "POST invalidated the entry"
    );
    let seen = seen.lock().unwrap();
    let (method, host, via, xff, proto, xfh, conn) = &seen[0];
    assert_eq!(method, "GET");
    assert_eq!(host, &origin.addr.to_string());
    assert!(via.contains("wirefold"));
    assert_eq!(xff, "127.0.0.1");
    assert_eq!(proto, "http");
    assert_eq!(
        xfh, "",
        "the client's host is not keyed under the `origin` rule: not sent"
    );
    assert!(!conn.contains("X-Secret"));
    assert_eq!(seen[1].0, "POST");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_survives_restart() {
    let origin = origin(|_| {
        response(
            200,
            &[
                ("content-type", "text/html"),
                ("cache-control", "max-age=600"),
            ],
            page(9),
        )
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    for round in 0..2 {
        let mut config = test_config(data.path());
        config.origin = Some(origin.url(""));
        let running = proxy::start(config).await.unwrap();
        let r = curl(&format!("http://{}/p", running.addr), &["--compressed"]).await;
        assert_eq!(r.body, page(9).as_bytes());
        let expected = if round == 0 {
            "wirefold; fwd=miss; stored"
        } else {
            "wirefold; hit"
        };
        assert_eq!(r.header("cache-status"), Some(expected));
        running.shutdown().await;
    }
    assert_eq!(origin.hits(), 1);
}
