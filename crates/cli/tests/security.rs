//! Attacks on the accelerator, each the hostile client or origin that once broke it
//! (issue 10): a body on a GET that desyncs the pooled origin connection, personal
//! pages turned into shared cache entries, delta bases, dictionaries and training
//! samples, host poisoning, and a malformed request body blamed on the origin.
//! docs/security.md names each test here next to the promise it holds.

mod servers;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::Engine;
use servers::*;
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PAGE: &str = "html/w3c__manifest/index-html--recent/028.html";

fn sha256(data: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(data).into()
}

/// A page made for one user: the corpus page with the user's secret inside.
fn personal_page(user: &str) -> Vec<u8> {
    let mut page = corpus_file(PAGE);
    let secret = format!("<p>Account of {user}: card ending {user}-4242-secret</p>");
    let at = page.len() / 2;
    page.splice(at..at, secret.into_bytes());
    page
}

fn secret_of(user: &str) -> Vec<u8> {
    format!("{user}-4242-secret").into_bytes()
}

/// The user a request's `session` cookie names, `anonymous` without one.
fn session_user(req: &http::Request<hyper::body::Incoming>) -> String {
    req.headers()
        .get("cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|c| c.strip_prefix("session="))
        .unwrap_or("anonymous")
        .to_string()
}

/// Every dictionary `fetched` links (`Link: <url>; rel=…`) is free of `secret`.
async fn assert_no_linked_dictionary_holds(
    proxy: &Proxy,
    fetched: &Curled,
    secret: &[u8],
    context: &str,
) {
    for link in fetched.dictionary_links() {
        let url = link.split(['<', '>']).nth(1).unwrap_or_default();
        let dictionary = curl(&proxy.url(url), &["--compressed"]).await;
        assert!(!contains(&dictionary.body, secret), "{context}: {url}");
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// What a lenient origin parsed from its connections: request line and body.
type Seen = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// An origin that answers as soon as it has a request head and only then reads and
/// discards the `Content-Length` bytes that follow, on persistent connections (as
/// Go's and Node's servers do). Each answer's body is the request line it parsed, so
/// a shifted request shows.
async fn lenient_origin() -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let addr = raw_origin(move |mut stream| {
        let log = log.clone();
        async move {
            while let Some(head) = read_head(&mut stream).await {
                let head = String::from_utf8_lossy(&head).to_string();
                let line = head.lines().next().unwrap_or_default().to_string();
                let length: usize = head
                    .lines()
                    .filter_map(|l| l.split_once(':'))
                    .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.trim().parse().ok())
                    .unwrap_or(0);
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncache-control: max-age=600\r\ncontent-length: {}\r\n\r\n{line}",
                    line.len()
                );
                if stream.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
                let mut body = vec![0u8; length];
                if stream.read_exact(&mut body).await.is_err() {
                    return;
                }
                log.lock().unwrap().push((line, body));
            }
        }
    })
    .await;
    (addr, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_with_a_body_is_forwarded_with_it_and_never_fills_the_cache() {
    let (origin, seen) = lenient_origin().await;
    let proxy = start_proxy(&format!("http://{origin}"), |_| {}).await;
    let host = proxy.running.addr.to_string();
    // 53 bytes that, left on the origin connection, would be read as the start of
    // the next request.
    let smuggled = "GET /evil HTTP/1.1\r\nHost: x\r\nX-Pad: aaaaaaaaaaaaa\r\n\r\n";
    assert_eq!(smuggled.len(), 53);
    let attack = format!(
        "GET /attacker HTTP/1.1\r\nHost: {host}\r\nContent-Length: 53\r\nConnection: close\r\n\r\n{smuggled}"
    );
    let reply = exchange(proxy.running.addr, attack.as_bytes()).await;
    assert_eq!(status_of(&reply), Some(200));

    for round in 0..2 {
        let victim = curl(&proxy.url("/victim1"), &["-H", "X-Foo: GET /evil HTTP/1.1"]).await;
        assert_eq!(victim.body, b"GET /victim1 HTTP/1.1", "round {round}");
    }
    // Over HTTP/2 too.
    let h2 = curl(
        &proxy.url("/attacker2"),
        &[
            "--http2-prior-knowledge",
            "-X",
            "GET",
            "--data-binary",
            smuggled,
        ],
    )
    .await;
    assert_eq!(h2.body, b"GET /attacker2 HTTP/1.1");
    let victim = curl(&proxy.url("/victim2"), &[]).await;
    assert_eq!(victim.body, b"GET /victim2 HTTP/1.1");

    let seen = seen.lock().unwrap().clone();
    let lines: Vec<&str> = seen.iter().map(|(line, _)| line.as_str()).collect();
    assert_eq!(
        lines,
        [
            "GET /attacker HTTP/1.1",
            "GET /victim1 HTTP/1.1",
            "GET /attacker2 HTTP/1.1",
            "GET /victim2 HTTP/1.1"
        ],
        "the origin parsed exactly the requests sent"
    );
    assert_eq!(
        seen[0].1,
        smuggled.as_bytes(),
        "the body went with its request"
    );
    assert_eq!(seen[2].1, smuggled.as_bytes());
    // Neither answer to a request with a body was stored.
    let again = curl(&proxy.url("/attacker"), &[]).await;
    assert_eq!(
        again.header("cache-status"),
        Some("wirefold; fwd=miss; stored")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_chunked_request_body_is_a_400_not_an_origin_failure() {
    // An origin that reads the whole request before it would answer.
    let origin = raw_origin(|mut stream| async move {
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink).await;
    })
    .await;
    let proxy = start_proxy(&format!("http://{origin}"), |_| {}).await;
    let host = proxy.running.addr.to_string();
    let request = format!(
        "POST /form HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\nbroken\r\n0\r\n\r\n"
    );
    let reply = exchange(proxy.running.addr, request.as_bytes()).await;
    assert_eq!(
        status_of(&reply),
        Some(400),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    let metrics = metrics_text(&proxy).await;
    assert_eq!(metric(&metrics, "wirefold_origin_errors_total"), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_cut_short_is_a_400_even_after_the_origin_began_its_answer() {
    // Found by the soak (bench/soak.sh): an origin answering before it has read the
    // request body has its answer cut off when the client's body fails (the origin
    // connection goes down with it). That was a 502 and an origin error.
    let body_arrived = Arc::new(tokio::sync::Notify::new());
    let arrived = body_arrived.clone();
    let origin = raw_origin(move |mut stream| {
        let arrived = arrived.clone();
        async move {
            let _ = read_head(&mut stream).await;
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nthe first part")
                .await;
            // The answer is under way when the request body's first bytes arrive.
            let mut first = [0u8; 10];
            if stream.read_exact(&mut first).await.is_ok() {
                arrived.notify_one();
            }
            let mut sink = Vec::new();
            let _ = stream.read_to_end(&mut sink).await;
        }
    })
    .await;
    let proxy = start_proxy(&format!("http://{origin}"), |_| {}).await;
    let host = proxy.running.addr.to_string();
    let mut stream = tokio::net::TcpStream::connect(proxy.running.addr)
        .await
        .unwrap();
    let request =
        format!("POST /form HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1000\r\n\r\nonly ten b");
    stream.write_all(request.as_bytes()).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), body_arrived.notified())
        .await
        .expect("the origin got the first bytes of the body");
    // The body ends 990 bytes early.
    stream.shutdown().await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut reply),
    )
    .await
    .expect("answered and closed")
    .unwrap();
    assert_eq!(
        status_of(&reply),
        Some(400),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    let metrics = metrics_text(&proxy).await;
    assert_eq!(metric(&metrics, "wirefold_origin_errors_total"), 0.0);
}

/// Requests and answers for the leak tests: `/account` answers each user's own page
/// (named by the `session` cookie, `anonymous` without), with `cache_control` and a
/// validator of its content; it answers `If-None-Match` with 304 when it matches.
async fn personal_origin(cache_control: &'static str) -> TestOrigin {
    origin(move |req| {
        let user = session_user(&req);
        let body = personal_page(&user);
        let etag = format!("\"{}\"", hex::encode(&sha256(&body)[..8]));
        let matches = req
            .headers()
            .get("if-none-match")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains(&etag));
        let fields = [
            ("content-type", "text/html"),
            ("cache-control", cache_control),
            ("etag", etag.as_str()),
        ];
        if matches {
            return response(304, &fields, "");
        }
        response(200, &fields, body)
    })
    .await
}

/// Everything another client can reach after alice's visit must be free of her secret:
/// the page itself, every dictionary linked or published, a delta against her page,
/// and a dictionary trained over the site.
async fn assert_alice_never_reaches_bob(cache_control: &'static str) {
    let origin = personal_origin(cache_control).await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let chromium_like = ["-H", "Accept-Encoding: gzip, br, zstd, dcb, dcz"];
    let alice = curl(
        &proxy.url("/account"),
        &[
            &chromium_like[..],
            &["-H", "Cookie: session=alice", "--compressed"],
        ]
        .concat(),
    )
    .await;
    assert_eq!(alice.body, personal_page("alice"), "{cache_control}");
    let alice_tag = alice.header("etag").unwrap_or_default().to_string();

    let bob = curl(
        &proxy.url("/account"),
        &[&chromium_like[..], &["--compressed"]].concat(),
    )
    .await;
    assert_eq!(bob.body, personal_page("anonymous"), "{cache_control}");

    // No dictionary made from alice's page is published or linked.
    let alice_dict = format!("/.wirefold/dict/{}", hex::encode(sha256(&alice.body)));
    assert_eq!(curl(&proxy.url(&alice_dict), &[]).await.status, 404);
    assert_no_linked_dictionary_holds(&proxy, &bob, &secret_of("alice"), cache_control).await;
    // Nor is her page a dictionary for anyone who claims to hold it.
    let claimed = format!(
        "Available-Dictionary: :{}:",
        base64::engine::general_purpose::STANDARD.encode(sha256(&alice.body))
    );
    let with_claim = curl(
        &proxy.url("/account"),
        &[&chromium_like[..], &["-H", &claimed]].concat(),
    )
    .await;
    assert!(
        !matches!(with_claim.header("content-encoding"), Some("dcb" | "dcz")),
        "{cache_control}: bob got a delta against alice's page"
    );
    // Nor an RFC 3229 base: a delta against her page would tell bob what they share.
    let im = curl(
        &proxy.url("/account"),
        &[
            "-H",
            "A-IM: vcdiff",
            "-H",
            &format!("If-None-Match: {alice_tag}"),
        ],
    )
    .await;
    assert_ne!(
        im.status, 226,
        "{cache_control}: a delta against alice's page"
    );
    // Nor a training sample.
    let (status, report) = proxy::server::call_admin(
        proxy.running.admin_addr,
        http::Method::POST,
        "/dictionaries/train?pattern=%2F*&max_size=4096",
        None,
    )
    .await
    .unwrap();
    if status == 200 {
        let report: serde_json::Value = serde_json::from_str(&report).unwrap();
        let url = report["url"].as_str().unwrap();
        let trained = curl(&proxy.url(url), &["--compressed"]).await;
        assert!(
            !contains(&trained.body, &secret_of("alice")),
            "{cache_control}: trained"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_for_a_cookie_is_never_shared_derived_or_trained_on() {
    for cache_control in [
        "no-cache",
        "max-age=0",
        "s-maxage=0",
        "max-age=600",
        "public, no-cache",
        "max-age=600, stale-while-revalidate=60",
    ] {
        assert_alice_never_reaches_bob(cache_control).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_to_cookies_are_stored_only_when_the_origin_or_operator_says_public() {
    // (response Cache-Control, public path?, stored?)
    let cases = [
        ("max-age=600", false, false),
        ("public, max-age=600", false, true),
        ("s-maxage=600", false, true),
        ("max-age=600", true, true),
        ("private, max-age=600", true, false),
    ];
    for (cache_control, public_path, stored) in cases {
        let origin = origin(move |_| {
            response(
                200,
                &[
                    ("content-type", "text/plain"),
                    ("cache-control", cache_control),
                ],
                "same for everyone",
            )
        })
        .await;
        let proxy = start_proxy(&origin.url(""), |c| {
            if public_path {
                c.cache.public_paths = vec!["/static/".into()];
            }
        })
        .await;
        let first = curl(&proxy.url("/static/app.css"), &["-H", "Cookie: id=1"]).await;
        let expected = if stored {
            "wirefold; fwd=miss; stored"
        } else {
            "wirefold; fwd=miss"
        };
        assert_eq!(
            first.header("cache-status"),
            Some(expected),
            "{cache_control}, public path {public_path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_is_keyed_as_forwarded_and_ambiguous_hosts_are_refused() {
    let seen: Arc<Mutex<Vec<(String, String, String)>>> = Arc::default();
    let log = seen.clone();
    let origin = origin(move |req| {
        let get = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        log.lock()
            .unwrap()
            .push((get("host"), get("x-forwarded-host"), get("x-original-url")));
        // An origin that builds links from the forwarded host, as frameworks do.
        let host = match get("x-forwarded-host") {
            h if h.is_empty() => get("host"),
            h => h,
        };
        response(
            200,
            &[
                ("content-type", "text/plain"),
                ("cache-control", "max-age=600"),
            ],
            format!("<a href=\"http://{host}/next\">"),
        )
    })
    .await;

    // The default rule sends the origin's host and no client-chosen one.
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let poisoned = curl(
        &proxy.url("/p"),
        &[
            "-H",
            "Host: evil.example",
            "-H",
            "X-Forwarded-Host: evil.example",
            "-H",
            "X-Original-URL: /admin",
        ],
    )
    .await;
    let clean = curl(&proxy.url("/p"), &[]).await;
    assert_eq!(clean.body, poisoned.body);
    assert!(
        !contains(&clean.body, b"evil"),
        "{}",
        String::from_utf8_lossy(&clean.body)
    );
    for (host, forwarded, original) in seen.lock().unwrap().iter() {
        assert_eq!(host, &origin.addr.to_string());
        assert_eq!((forwarded.as_str(), original.as_str()), ("", ""));
    }

    // The `client` rule keys on the host it forwards; the absolute form's wins.
    let proxy = start_proxy(&origin.url(""), |c| c.upstream.host = "client".into()).await;
    let good = curl(&proxy.url("/q"), &["-H", "Host: good.example"]).await;
    assert_eq!(good.body, b"<a href=\"http://good.example/next\">");
    let evil = curl(&proxy.url("/q"), &["-H", "Host: evil.example"]).await;
    assert_eq!(evil.body, b"<a href=\"http://evil.example/next\">");
    let good = curl(&proxy.url("/q"), &["-H", "Host: good.example"]).await;
    assert_eq!(good.body, b"<a href=\"http://good.example/next\">");
    assert_eq!(good.header("cache-status"), Some("wirefold; hit"));
    let absolute =
        "GET http://good.example/q HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n";
    let reply = exchange(proxy.running.addr, absolute.as_bytes()).await;
    assert!(
        contains(&reply, b"http://good.example/next"),
        "{}",
        String::from_utf8_lossy(&reply)
    );

    // No Host, or two, is a 400 (RFC 9112 §3.2), on the pipeline and on upgrades.
    for request in [
        "GET /q HTTP/1.1\r\nConnection: close\r\n\r\n".to_string(),
        "GET /q HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\nConnection: close\r\n\r\n".into(),
        "GET /ws HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n".into(),
        "GET /q HTTP/1.1\r\nHost: user@evil.example\r\nConnection: close\r\n\r\n".into(),
    ] {
        let reply = exchange(proxy.running.addr, request.as_bytes()).await;
        assert_eq!(status_of(&reply), Some(400), "{request:?}");
    }
}

// ---------------------------------------------------------------------------------
// Found by review after the first fixes: each held before its fix, and fails without it.

/// An origin that routes as nginx does: `%2F` decoded, dot segments resolved.
fn resolved(path: &str) -> String {
    let decoded = path.replace("%2F", "/").replace("%2f", "/");
    let mut out: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            ".." => {
                out.pop();
            }
            "." | "" => {}
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_path_prefix_cannot_be_used_to_deceive_the_cache() {
    for cache_control in ["max-age=600", "no-cache"] {
        let origin = origin(move |req| {
            let user = session_user(&req);
            match resolved(req.uri().path()).as_str() {
                "/account" => response(
                    200,
                    &[
                        ("content-type", "text/html"),
                        ("cache-control", cache_control),
                    ],
                    personal_page(&user),
                ),
                _ => response(404, &[], ""),
            }
        })
        .await;
        let proxy = start_proxy(&origin.url(""), |c| {
            c.cache.public_paths = vec!["/static/".into()];
        })
        .await;
        let lure = "/static/..%2Faccount";
        let chromium_like = [
            "-H",
            "Accept-Encoding: gzip, br, zstd, dcb, dcz",
            "--compressed",
        ];
        let alice = curl(
            &proxy.url(lure),
            &[&chromium_like[..], &["-H", "Cookie: session=alice"]].concat(),
        )
        .await;
        assert!(contains(&alice.body, &secret_of("alice")));
        let bob = curl(&proxy.url(lure), &chromium_like).await;
        assert!(!contains(&bob.body, &secret_of("alice")), "{cache_control}");
        assert_no_linked_dictionary_holds(&proxy, &bob, &secret_of("alice"), cache_control).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_only_entry_is_never_derived_from_when_anyone_hits_it() {
    let origin = personal_origin("s-maxage=600").await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let alice = curl(&proxy.url("/account"), &["-H", "Cookie: session=alice"]).await;
    assert_eq!(
        alice.header("cache-status"),
        Some("wirefold; fwd=miss; stored")
    );
    // An anonymous hit on alice's entry is what the origin's `s-maxage` allowed; no
    // dictionary made from it may outlive the entry.
    let bob = curl(&proxy.url("/account"), &["--compressed"]).await;
    assert_eq!(bob.header("cache-status"), Some("wirefold; hit"));
    let links = bob.dictionary_links();
    assert!(links.is_empty(), "{links:?}");
    let alice_dict = format!(
        "/.wirefold/dict/{}",
        hex::encode(sha256(&personal_page("alice")))
    );
    assert_eq!(curl(&proxy.url(&alice_dict), &[]).await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_304_to_a_cookie_does_not_rewrite_the_shared_entry() {
    let origin = origin(move |req| {
        let user = req
            .headers()
            .get("cookie")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("anonymous")
            .to_string();
        let fields = [
            ("content-type", "text/html"),
            ("cache-control", "max-age=0, stale-while-revalidate=600"),
            ("etag", "\"v1\""),
            ("x-account", user.as_str()),
        ];
        match req.headers().contains_key("if-none-match") {
            true => response(304, &fields, ""),
            false => response(200, &fields, corpus_file(PAGE)),
        }
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    curl(&proxy.url("/home"), &[]).await;
    // Served stale; revalidated in the background with alice's cookie, and the
    // origin's 304 carries her field.
    let alice = curl(&proxy.url("/home"), &["-H", "Cookie: session=alice"]).await;
    assert_eq!(
        alice.header("cache-status"),
        Some("wirefold; hit; detail=stale")
    );
    for _ in 0..500 {
        if origin.hits() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        origin.hits(),
        2,
        "alice's background revalidation reached the origin"
    );
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let bob = curl(&proxy.url("/home"), &[]).await;
    assert_eq!(bob.header("x-account"), Some("anonymous"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revalidation_asks_for_the_keyed_host_not_the_requests_host_field() {
    let origin = origin(move |req| {
        let host = req
            .headers()
            .get("host")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        response(
            200,
            &[
                ("content-type", "text/plain"),
                ("cache-control", "no-cache"),
            ],
            format!("<a href=\"http://{host}/next\">"),
        )
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |c| c.upstream.host = "client".into()).await;
    let good = curl(&proxy.url("/q"), &["-H", "Host: good.example"]).await;
    assert_eq!(
        good.header("cache-status"),
        Some("wirefold; fwd=miss; stored")
    );
    // No-cache: this request revalidates the stored entry of good.example.
    let attack =
        "GET http://good.example/q HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n";
    let reply = exchange(proxy.running.addr, attack.as_bytes()).await;
    assert!(
        contains(&reply, b"http://good.example/next"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    let victim = curl(&proxy.url("/q"), &["-H", "Host: good.example"]).await;
    assert_eq!(victim.body, b"<a href=\"http://good.example/next\">");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_with_a_body_through_the_pair_is_never_kept_or_served_to_another() {
    use http_body_util::BodyExt;
    // An origin that reads parameters from a GET's body too ("fat GET").
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin_addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    |req: http::Request<hyper::body::Incoming>| async move {
                        let body = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let callback = match body.is_empty() {
                            true => "render".to_string(),
                            false => String::from_utf8_lossy(&body).to_string(),
                        };
                        let script: String =
                            (0..200).map(|i| format!("var v{i} = {i};\n")).collect();
                        Ok::<_, std::convert::Infallible>(response(
                            200,
                            &[
                                ("content-type", "text/javascript"),
                                ("cache-control", "max-age=600"),
                            ],
                            format!("{script}{callback}(data);"),
                        ))
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    let pair = start_pair(|_| {}, |_| {}).await;
    let url = format!("http://{origin_addr}/app.js");
    let payload = "alert(document.cookie)//";
    let attacker = curl(
        &url,
        &["-x", &pair.proxy(), "-X", "GET", "--data-binary", payload],
    )
    .await;
    assert!(contains(&attacker.body, payload.as_bytes()));
    let victim = curl(&url, &["-x", &pair.proxy()]).await;
    assert!(
        !contains(&victim.body, payload.as_bytes()),
        "the next browser got the attacker's answer"
    );
    assert!(contains(&victim.body, b"render(data);"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_of_decoded_bodies_do_not_hold_the_decode_budget() {
    // About 3 MB of text that the origin sends gzip-coded: a few fill the default
    // 16 MiB decode budget if their readers could hold it.
    let text: Vec<u8> = (0..500_000u32)
        .flat_map(|i| format!("w{} ", i.wrapping_mul(2_654_435_761) >> 20).into_bytes())
        .collect();
    let coded = bytes::Bytes::from(codec::compress(
        wirefold_http::ContentCoding::Gzip,
        1,
        &text,
    ));
    let origin = origin(move |_| {
        response(
            200,
            &[
                ("content-type", "text/plain"),
                ("content-encoding", "gzip"),
                ("cache-control", "max-age=600"),
            ],
            coded.clone(),
        )
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let mut readers = Vec::new();
    for i in 0..12 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(proxy.running.addr).await.unwrap();
        let request =
            format!("GET /big?{i} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        readers.push(stream);
    }
    // Each answer has begun (so its decode is over); none is read further.
    for stream in &mut readers {
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).await.unwrap();
    }
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric(&metrics, "wirefold_decode_memory_bytes"),
        0.0,
        "readers hold no budget"
    );
    let later = curl(&proxy.url("/later"), &[]).await;
    assert_eq!(
        later.header("cache-status"),
        Some("wirefold; fwd=miss; stored")
    );
    drop(readers);
}
