//! Inline download: `Link: rel=preload` from page manifests on final responses, and
//! 103 Early Hints on the HTTP/2 listener.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use support::*;

const PAGE: &str = r#"<!doctype html><html><head>
<link rel="stylesheet" href="/site.css">
<link rel="preload" as="font" href="/f.woff2">
<script src="/head.js"></script>
<script src="/late.js" defer></script>
</head><body><img src="/hero.jpg"><img src="/lazy.jpg" loading="lazy">
<iframe src="/frame.html"></iframe></body></html>"#;

/// The `Link` values of a response (one per field line or comma-joined).
fn links(curled: &Curled) -> Vec<String> {
    curled
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("link"))
        .flat_map(|(_, v)| {
            v.split(", <")
                .map(|l| l.trim_start_matches('<').to_string())
        })
        .map(|l| format!("<{l}"))
        // The encode stage's dictionary links are another matter.
        .filter(|l| !l.contains("compression-dictionary"))
        .collect()
}

async fn page_origin(page: &'static str) -> TestOrigin {
    origin(move |req| {
        if req.uri().path() == "/" {
            response(200, &[("content-type", "text/html; charset=utf-8")], page)
        } else {
            response(200, &[("content-type", "text/css")], "body{}")
        }
    })
    .await
}

#[tokio::test]
async fn pages_announce_their_subresources_ranked_and_bounded() {
    let origin = page_origin(PAGE).await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let page = curl(&proxy.url("/"), &[]).await;
    assert_eq!(page.status, 200);
    assert_eq!(
        links(&page),
        [
            "</site.css>; rel=preload; as=style; nopush",
            "</f.woff2>; rel=preload; as=font; type=\"font/woff2\"; crossorigin; nopush",
            "</head.js>; rel=preload; as=script; nopush",
            "</hero.jpg>; rel=preload; as=image; nopush",
            "</late.js>; rel=preload; as=script; nopush",
        ]
    );
    // Not a page: nothing announced.
    let sheet = curl(&proxy.url("/site.css"), &[]).await;
    assert!(links(&sheet).is_empty());

    let bounded = start_proxy(&origin.url(""), |c| c.hints.max_links = 2).await;
    assert_eq!(links(&curl(&bounded.url("/"), &[]).await).len(), 2);
    let off = start_proxy(&origin.url(""), |c| c.hints.enabled = false).await;
    assert!(links(&curl(&off.url("/"), &[]).await).is_empty());

    let metrics = metrics_text(&proxy).await;
    assert_eq!(metric(&metrics, "wirefold_manifests_built_total"), 1.0);
    assert_eq!(metric(&metrics, "wirefold_manifest_entries_total"), 7.0);
    assert_eq!(
        metric(&metrics, "wirefold_hint_links_total{response=\"final\"}"),
        5.0
    );
    for running in [proxy, bounded, off] {
        running.running.shutdown().await;
    }
}

#[tokio::test]
async fn a_changed_page_announces_only_what_it_references_now() {
    let version = Arc::new(AtomicU32::new(1));
    let current = version.clone();
    let origin = origin(move |_| {
        let v = current.load(Ordering::SeqCst);
        let page = format!("<link rel=stylesheet href=/v{v}.css><p>version {v}");
        response(
            200,
            &[("content-type", "text/html"), ("cache-control", "no-cache")],
            page,
        )
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let first = curl(&proxy.url("/"), &[]).await;
    assert_eq!(links(&first), ["</v1.css>; rel=preload; as=style; nopush"]);
    version.store(2, Ordering::SeqCst);
    let second = curl(&proxy.url("/"), &[]).await;
    assert_eq!(links(&second), ["</v2.css>; rel=preload; as=style; nopush"]);
    proxy.running.shutdown().await;
}

#[tokio::test]
async fn origin_links_are_kept_and_not_repeated() {
    let origin = origin(|_| {
        response(
            200,
            &[
                ("content-type", "text/html"),
                ("link", "</a.css>; rel=preload; as=style"),
            ],
            "<link rel=stylesheet href=/a.css><script src=/b.js></script>",
        )
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let page = curl(&proxy.url("/"), &[]).await;
    assert_eq!(
        links(&page),
        [
            "</a.css>; rel=preload; as=style",
            "</b.js>; rel=preload; as=script; nopush"
        ]
    );
    proxy.running.shutdown().await;
}

#[tokio::test]
async fn hostile_pages_are_served_with_bounded_hints() {
    let mut huge = String::from("<html><head>");
    for i in 0..20_000 {
        huge.push_str(&format!(
            "<link rel=stylesheet href='/s{i}.css'><img src='http://[bad{i}'><script src='\u{0}\u{7f}%zz{i}'></script>"
        ));
    }
    let huge: &'static str = Box::leak(huge.into_boxed_str());
    let origin = page_origin(huge).await;
    let proxy = start_proxy(&origin.url(""), |c| c.hints.max_link_bytes = 200).await;
    let page = curl(&proxy.url("/"), &[]).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.body.len(), huge.len());
    let announced = links(&page);
    assert!(!announced.is_empty() && announced.iter().map(String::len).sum::<usize>() <= 200);
    let metrics = metrics_text(&proxy).await;
    assert_eq!(metric(&metrics, "wirefold_manifest_entries_total"), 64.0);
    proxy.running.shutdown().await;
}

/// curl's `-v` account of an exchange (its stderr): informational responses too.
async fn curl_verbose(url: &str, args: &[&str]) -> String {
    let out = tokio::process::Command::new("curl")
        .args([
            "-s",
            "-S",
            "-k",
            "-v",
            "--max-time",
            "30",
            "-o",
            "/dev/null",
        ])
        .args(args)
        .arg(url)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "curl {url} {args:?} failed");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The response heads curl received, in order: status and `link` values (one per
/// link, whether in a field each or comma-separated).
fn heads(verbose: &str) -> Vec<(u16, Vec<String>)> {
    let mut heads: Vec<(u16, Vec<String>)> = Vec::new();
    for line in verbose.lines().filter_map(|l| l.strip_prefix("< ")) {
        if let Some(status) = line
            .strip_prefix("HTTP/2 ")
            .or(line.strip_prefix("HTTP/1.1 "))
        {
            let code = status.split_whitespace().next().unwrap().parse().unwrap();
            heads.push((code, Vec::new()));
        } else if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("link") && value.contains("preload") {
                let links = value.trim().split(", <").map(|l| l.trim_start_matches('<'));
                let links = links.map(|l| format!("<{l}"));
                heads.last_mut().unwrap().1.extend(links);
            }
        }
    }
    heads
}

#[tokio::test]
async fn early_hints_over_http2_for_a_known_page_before_the_origin_answers() {
    let origin = slow_origin(std::time::Duration::from_millis(100), |req| {
        if req.uri().path() == "/" {
            // Revalidated every time: the 103 goes out while the origin is asked.
            response(
                200,
                &[("content-type", "text/html"), ("cache-control", "no-cache")],
                PAGE,
            )
        } else {
            response(200, &[("content-type", "text/css")], "body{}")
        }
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |c| c.tls.self_signed = true).await;
    let url = proxy.url("/");
    let page = ["--http2", "-H", "accept: text/html"];
    // Unknown until served once: only the final response's links.
    let first = heads(&curl_verbose(&url, &page).await);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!((first[0].0, first[0].1.len()), (200, 5));

    let second = heads(&curl_verbose(&url, &page).await);
    assert_eq!(second.len(), 2, "a 103, then the page: {second:?}");
    assert_eq!(second[0].0, 103);
    // Without `nopush`: Chromium ignores a 103's link carrying an attribute it does
    // not know.
    let early_links = |links: &[String]| -> Vec<String> {
        links
            .iter()
            .map(|l| l.strip_suffix("; nopush").unwrap_or(l).to_string())
            .collect()
    };
    assert_eq!(
        second[0].1,
        early_links(&first[0].1),
        "the latest manifest's links"
    );
    assert_eq!(second[1], first[0]);

    // Not for assets, not for HTTP/1.1 (clients mis-parse 1xx), not when off.
    let asset = heads(&curl_verbose(&url, &["--http2", "-H", "accept: */*"]).await);
    assert_eq!(asset.iter().map(|h| h.0).collect::<Vec<_>>(), [200]);
    let h1 = heads(&curl_verbose(&url, &["--http1.1", "-H", "accept: text/html"]).await);
    assert_eq!(h1.iter().map(|h| h.0).collect::<Vec<_>>(), [200]);
    let metrics = metrics_text(&proxy).await;
    assert_eq!(metric(&metrics, "wirefold_early_hints_total"), 1.0);
    assert_eq!(
        metric(&metrics, "wirefold_hint_links_total{response=\"early\"}"),
        5.0
    );
    proxy.running.shutdown().await;

    let render_blocking = start_proxy(&origin.url(""), |c| {
        c.tls.self_signed = true;
        c.hints.early_hints_render_blocking_only = true;
    })
    .await;
    curl_verbose(&render_blocking.url("/"), &page).await;
    let blocking = heads(&curl_verbose(&render_blocking.url("/"), &page).await);
    assert_eq!(
        (blocking[0].0, &blocking[0].1),
        (103, &early_links(&first[0].1[..3]))
    );
    render_blocking.running.shutdown().await;

    let off = start_proxy(&origin.url(""), |c| {
        c.tls.self_signed = true;
        c.hints.early_hints = false;
    })
    .await;
    for _ in 0..2 {
        let heads = heads(&curl_verbose(&off.url("/"), &page).await);
        assert_eq!(heads.iter().map(|h| h.0).collect::<Vec<_>>(), [200]);
    }
    off.running.shutdown().await;
}

/// h2c by prior knowledge is served by the same HTTP/2 server as TLS's `h2`: its 103s,
/// and its close of an idle connection (hyper's h2c had neither).
#[tokio::test]
async fn h2c_by_prior_knowledge_gets_early_hints_and_an_idle_close() {
    let origin = origin(|req| {
        if req.uri().path() == "/" {
            let fields = [("content-type", "text/html"), ("cache-control", "no-cache")];
            response(200, &fields, PAGE)
        } else {
            response(200, &[("content-type", "text/css")], "body{}")
        }
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |c| c.http2.idle_timeout_ms = 1000).await;
    let page = ["--http2-prior-knowledge", "-H", "accept: text/html"];
    curl_verbose(&proxy.url("/"), &page).await;
    let second = heads(&curl_verbose(&proxy.url("/"), &page).await);
    let statuses: Vec<u16> = second.iter().map(|h| h.0).collect();
    assert_eq!(statuses, [103, 200], "{second:?}");

    let tcp = tokio::net::TcpStream::connect(proxy.running.addr)
        .await
        .unwrap();
    let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
    let connection = tokio::spawn(connection);
    let request = http::Request::get(proxy.url("/site.css")).body(()).unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    assert_eq!(response.await.unwrap().status(), 200);
    // Closed one to two idle periods after its answer; 20 of them is generous.
    let ended = tokio::time::timeout(std::time::Duration::from_secs(20), connection).await;
    let ended = ended.expect("an idle h2c connection stays open").unwrap();
    assert!(ended.is_ok(), "closed gracefully: {ended:?}");
    drop(client);
    proxy.running.shutdown().await;
}

/// A personalised page's manifest stays with the client it was made for: its
/// stylesheets are not read into a manifest kept for the page, and another client
/// asking for the page over HTTP/2 gets no 103 naming what that page linked.
#[tokio::test]
async fn a_personalised_page_leaves_no_hints_for_another_client() {
    let stylesheets = Arc::new(AtomicU32::new(0));
    let counted = stylesheets.clone();
    let origin = origin(move |req| {
        let alice = req
            .headers()
            .get("cookie")
            .is_some_and(|c| c.as_bytes().ends_with(b"alice"));
        match req.uri().path() {
            "/account" => response(
                200,
                &[("content-type", "text/html"), ("cache-control", "private")],
                if alice {
                    "<link rel=stylesheet href=/alice-theme.css><img src=/alice-avatar.png>"
                } else {
                    "<p>sign in"
                },
            ),
            _ => {
                counted.fetch_add(1, Ordering::SeqCst);
                response(
                    200,
                    &[
                        ("content-type", "text/css"),
                        ("cache-control", "max-age=60"),
                    ],
                    "@import 'alice-more.css';",
                )
            }
        }
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |c| c.tls.self_signed = true).await;
    let url = proxy.url("/account");
    let html = ["-H", "accept: text/html"];
    let alice = heads(
        &curl_verbose(
            &url,
            &[&["--http1.1", "-H", "cookie: user=alice"], &html[..]].concat(),
        )
        .await,
    );
    assert_eq!(alice.len(), 1);
    assert!(
        alice[0].1.iter().any(|l| l.contains("alice-theme")),
        "{alice:?}"
    );
    // Time for what reading the stylesheets would add (its entries are counted).
    let entries = || async {
        metric(
            &metrics_text(&proxy).await,
            "wirefold_manifest_entries_total",
        )
    };
    let page_alone = entries().await;
    for _ in 0..40 {
        if entries().await > page_alone {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let bob = heads(&curl_verbose(&url, &[&["--http2"], &html[..]].concat()).await);
    assert_eq!(
        bob.iter().map(|h| h.0).collect::<Vec<_>>(),
        [200],
        "{bob:?}"
    );
    assert!(bob[0].1.is_empty(), "{bob:?}");
    assert_eq!(
        stylesheets.load(Ordering::SeqCst),
        0,
        "a personalised page's stylesheets were read"
    );
    proxy.running.shutdown().await;
}

/// An origin that reads each request's body whole and answers with its length, or
/// with `big` for a GET.
async fn counting_origin(big: &'static str) -> std::net::SocketAddr {
    use http_body_util::BodyExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = hyper::service::service_fn(
                move |req: http::Request<hyper::body::Incoming>| async move {
                    let body = if req.method() == http::Method::POST {
                        let received = req.into_body().collect().await?.to_bytes();
                        bytes::Bytes::from(received.len().to_string())
                    } else {
                        bytes::Bytes::from_static(big.as_bytes())
                    };
                    let mut answer = http::Response::new(http_body_util::Full::new(body));
                    answer.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("application/octet-stream"),
                    );
                    Ok::<_, hyper::Error>(answer)
                },
            );
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
            );
        }
    });
    addr
}

#[tokio::test]
async fn http2_serves_request_bodies_large_responses_and_many_streams() {
    // 1 MiB: beyond the initial windows.
    let big: &'static str = Box::leak("0123456789abcdef".repeat(1 << 16).into_boxed_str());
    let origin = counting_origin(big).await;
    let proxy = start_proxy(&format!("http://{origin}"), |c| c.tls.self_signed = true).await;
    let got = curl(&proxy.url("/big"), &["--http2"]).await;
    assert_eq!((got.status, got.version.as_str()), (200, "HTTP/2"));
    assert_eq!(got.body, big.as_bytes());
    // 3 MB: the client's stream window (1 MiB) must be given back as it is read.
    let upload = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(upload.path(), "x".repeat(3_000_000)).unwrap();
    let from_file = format!("@{}", upload.path().display());
    let posted = curl(
        &proxy.url("/echo-length"),
        &["--http2", "--data-binary", &from_file],
    )
    .await;
    assert_eq!(posted.body, b"3000000");
    // Many streams on one connection, all answered.
    let urls: Vec<String> = (0..20).map(|i| proxy.url(&format!("/big?{i}"))).collect();
    let mut args = vec!["--http2", "-Z", "-o", "/dev/null"];
    for url in &urls[1..] {
        args.extend(["-o", "/dev/null", url.as_str()]);
    }
    let many = tokio::process::Command::new("curl")
        .args(["-s", "-S", "-k", "--max-time", "60", "-w", "%{http_code}\n"])
        .args(&args)
        .arg(&urls[0])
        .output()
        .await
        .unwrap();
    let codes = String::from_utf8_lossy(&many.stdout);
    assert_eq!(codes.lines().filter(|c| *c == "200").count(), 20, "{codes}");
    proxy.running.shutdown().await;
}

#[tokio::test]
async fn stylesheets_are_read_for_imports_and_fonts_once_through_the_cache() {
    let css_requests = Arc::new(AtomicU32::new(0));
    let counted = css_requests.clone();
    let origin = origin(move |req| {
        let css = |body: &'static str| {
            counted.fetch_add(1, Ordering::SeqCst);
            response(
                200,
                &[
                    ("content-type", "text/css"),
                    ("cache-control", "max-age=60"),
                ],
                body,
            )
        };
        match req.uri().path() {
            "/" => response(
                200,
                &[("content-type", "text/html"), ("cache-control", "no-cache")],
                "<link rel=stylesheet href=/a.css><img src=/i.png>",
            ),
            "/a.css" => css("@import 'b.css'; @font-face { src: url(/f.woff2) format('woff2') }"),
            // An import cycle back to a.css, and a background that may never load.
            "/b.css" => css("@import url(a.css); body { background: url(bg.png) }"),
            _ => response(404, &[], "no"),
        }
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let expected = [
        "</a.css>; rel=preload; as=style; nopush",
        "</b.css>; rel=preload; as=style; nopush",
        "</f.woff2>; rel=preload; as=font; type=\"font/woff2\"; crossorigin; nopush",
        "</i.png>; rel=preload; as=image; nopush",
    ];
    let mut announced = Vec::new();
    // The stylesheets are read in the background after the first answer.
    for _ in 0..100 {
        announced = links(&curl(&proxy.url("/"), &[]).await);
        if announced == expected {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(announced, expected);
    // Each stylesheet came from the origin once (then the cache): the cycle ended.
    assert_eq!(css_requests.load(Ordering::SeqCst), 2);
    proxy.running.shutdown().await;
    let depth_zero = start_proxy(&origin.url(""), |c| c.hints.stylesheet_depth = 0).await;
    curl(&depth_zero.url("/"), &[]).await;
    let plain = links(&curl(&depth_zero.url("/"), &[]).await);
    assert_eq!(plain, [expected[0], expected[3]]);
    depth_zero.running.shutdown().await;
}

/// `nghttp` (nghttp2-client) with push enabled: `-v` prints every frame.
async fn nghttp(url: &str, args: &[&str]) -> String {
    let out = tokio::process::Command::new("nghttp")
        .args(["-v", "-n", "--timeout=20"])
        .args(args)
        .arg(url)
        .output()
        .await
        .unwrap_or_else(|e| panic!("nghttp (apt-get install nghttp2-client) runs: {e}"));
    assert!(
        out.status.success(),
        "nghttp {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The paths nghttp saw promised, and those whose pushed stream ended with a 200.
fn promised_paths(verbose: &str) -> Vec<String> {
    verbose
        .lines()
        .filter(|l| l.contains("recv (stream_id=") && l.contains(":path:"))
        .filter_map(|l| l.split(":path: ").nth(1))
        .map(|p| p.trim().to_string())
        .collect()
}

#[tokio::test]
async fn push_sends_the_announced_resources_to_clients_that_enable_it() {
    let origin = origin(|req| match req.uri().path() {
        "/" => response(200, &[("content-type", "text/html")], PAGE),
        "/head.js" => response(
            200,
            &[
                ("content-type", "text/javascript"),
                ("cache-control", "no-store"),
            ],
            "personal()",
        ),
        path => response(
            200,
            &[
                ("content-type", "text/css"),
                ("cache-control", "max-age=60"),
            ],
            format!("/* {path} */ body {{}}"),
        ),
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |c| {
        c.tls.self_signed = true;
        c.hints.push = true;
    })
    .await;
    let url = proxy.url("/");
    let pushed = nghttp(&url, &["-H", "accept-encoding: gzip"]).await;
    let promised = promised_paths(&pushed);
    assert_eq!(
        promised,
        ["/site.css", "/f.woff2", "/head.js", "/hero.jpg", "/late.js"],
        "{pushed}"
    );
    // The pushed responses: complete, their own coding, and no-store not pushed.
    let on_pushed_streams = |what: &str| {
        pushed
            .lines()
            .filter(|l| l.contains(what))
            .filter_map(|l| l.split("stream_id=").nth(1))
            .filter_map(|id| id.split(|c: char| !c.is_ascii_digit()).next())
            .filter_map(|id| id.parse::<u32>().ok())
            .filter(|id| id % 2 == 0)
            .count()
    };
    assert_eq!(on_pushed_streams(":status: 200"), 4, "{pushed}");
    assert_eq!(on_pushed_streams("DATA frame"), 4, "{pushed}");
    assert!(
        pushed.contains("RST_STREAM") && pushed.contains("error_code=CANCEL"),
        "{pushed}"
    );
    let site_css = curl(&proxy.url("/site.css"), &["--http2", "--compressed"]).await;
    assert_eq!(site_css.body, b"/* /site.css */ body {}");
    // Pushed links lose `nopush`.
    assert!(links(&curl(&url, &[]).await)[0].ends_with("as=style"));

    // Push off in the client (browsers), or Save-Data: none, and the page is whole.
    let no_push = nghttp(&url, &["--no-push"]).await;
    assert!(promised_paths(&no_push).is_empty(), "{no_push}");
    let save_data = nghttp(&url, &["-H", "save-data: on"]).await;
    assert!(promised_paths(&save_data).is_empty(), "{save_data}");
    proxy.running.shutdown().await;
}

#[tokio::test]
async fn a_page_too_large_to_buffer_gets_its_manifest_as_it_streams() {
    let big: &'static str =
        Box::leak(format!("{PAGE}{}", "<p>more of the page</p>\n".repeat(10_000)).into_boxed_str());
    let origin = page_origin(big).await;
    let proxy = start_proxy(&origin.url(""), |c| {
        c.tls.self_signed = true;
        c.limits.max_buffered_body = 64 * 1024;
    })
    .await;
    let url = proxy.url("/");
    let page = ["--http2", "-H", "accept: text/html"];
    // Streamed: its head went out before its body was read, so it names nothing.
    let first = heads(&curl_verbose(&url, &page).await);
    assert_eq!(first, [(200, Vec::new())]);
    metric_reaches(&proxy, "wirefold_manifests_built_total", 1.0).await;
    let second = heads(&curl_verbose(&url, &page).await);
    assert_eq!(second.len(), 2, "a 103, then the page: {second:?}");
    assert_eq!(
        second[0],
        (
            103,
            vec![
                "</site.css>; rel=preload; as=style".to_string(),
                "</f.woff2>; rel=preload; as=font; type=\"font/woff2\"; crossorigin".to_string(),
                "</head.js>; rel=preload; as=script".to_string(),
                "</hero.jpg>; rel=preload; as=image".to_string(),
                "</late.js>; rel=preload; as=script".to_string(),
            ]
        ),
        "the streamed page's manifest, as a buffered one's"
    );
    proxy.running.shutdown().await;
}

#[tokio::test]
async fn a_streamed_page_is_scanned_once_per_version_its_etag_names() {
    use std::sync::atomic::AtomicBool;
    let big: &'static str =
        Box::leak(format!("{PAGE}{}", "<p>more of the page</p>\n".repeat(10_000)).into_boxed_str());
    let changed = Arc::new(AtomicBool::new(false));
    let origin = origin({
        let changed = changed.clone();
        move |req| {
            let etag = if changed.load(Ordering::Relaxed) {
                "\"v2\""
            } else {
                "\"v1\""
            };
            if req.uri().path() == "/" {
                response(200, &[("content-type", "text/html"), ("etag", etag)], big)
            } else {
                response(200, &[("content-type", "text/css")], "body{}")
            }
        }
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |c| c.limits.max_buffered_body = 64 * 1024).await;
    let url = proxy.url("/");
    assert_eq!(curl(&url, &[]).await.body.len(), big.len());
    metric_reaches(&proxy, "wirefold_manifests_built_total", 1.0).await;
    // The same version again: served whole, not scanned again.
    for _ in 0..2 {
        assert_eq!(curl(&url, &[]).await.body.len(), big.len());
    }
    assert_eq!(
        proxy.metric("wirefold_streamed_page_scans_total").await,
        1.0
    );
    // A new version (a new ETag) is scanned.
    changed.store(true, Ordering::Relaxed);
    assert_eq!(curl(&url, &[]).await.body.len(), big.len());
    assert_eq!(
        proxy.metric("wirefold_streamed_page_scans_total").await,
        2.0
    );
    proxy.running.shutdown().await;
}

#[tokio::test]
async fn a_page_that_never_ends_is_served_while_its_scan_stops_at_its_bound() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // An endless page: a head naming a stylesheet, then new images for ever, in
    // chunks of a few KiB.
    let origin = raw_origin(|mut stream| async move {
        if read_head(&mut stream).await.is_none() {
            return;
        }
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\n\
                    transfer-encoding: chunked\r\n\r\n";
        let start = "<html><head><link rel=stylesheet href=/s.css></head><body>";
        let mut sent = stream.write_all(head.as_bytes()).await.is_ok()
            && write_chunk(&mut stream, start.as_bytes()).await;
        let mut image = 0;
        while sent {
            let mut chunk = String::new();
            for _ in 0..200 {
                chunk.push_str(&format!("<img src=/i{image}.png>"));
                image += 1;
            }
            sent = write_chunk(&mut stream, chunk.as_bytes()).await;
        }
    })
    .await;
    let proxy = start_proxy(&format!("http://{origin}"), |c| {
        c.limits.max_buffered_body = 64 * 1024;
        c.hints.stream_scan_bytes = 256 * 1024;
    })
    .await;
    let mut client = tokio::net::TcpStream::connect(proxy.running.addr)
        .await
        .unwrap();
    client
        .write_all(b"GET / HTTP/1.1\r\nhost: x\r\naccept: text/html\r\n\r\n")
        .await
        .unwrap();
    let head = read_head(&mut client).await.expect("a response head");
    assert!(head.starts_with(b"HTTP/1.1 200"));
    let mut buffer = vec![0u8; 64 * 1024];
    let mut received = 0;
    // Well past the scan's bound: the page goes on flowing.
    while received < 4 << 20 {
        let read = client.read(&mut buffer).await.unwrap();
        assert!(read > 0, "the page goes on");
        received += read;
    }
    // The scan ended at its bound while the page went on, and kept what a buffered
    // page with thousands of references keeps: its best-ranked 64.
    metric_reaches(&proxy, "wirefold_manifests_built_total", 1.0).await;
    let metrics = metrics_text(&proxy).await;
    assert_eq!(metric(&metrics, "wirefold_manifest_entries_total"), 64.0);
    while received < 8 << 20 {
        let read = client.read(&mut buffer).await.unwrap();
        assert!(read > 0, "the page goes on after the scan stopped");
        received += read;
    }
}

/// Writes `data` as one chunk of a chunked body; false once the peer is gone.
async fn write_chunk(stream: &mut tokio::net::TcpStream, data: &[u8]) -> bool {
    use tokio::io::AsyncWriteExt;
    let size = format!("{:x}\r\n", data.len());
    stream.write_all(size.as_bytes()).await.is_ok()
        && stream.write_all(data).await.is_ok()
        && stream.write_all(b"\r\n").await.is_ok()
}
