//! File serving and compression, checked with real clients: curl (HTTP/1.1, h2c,
//! HTTP/2 over TLS) and the gzip, brotli and zstd command-line tools.

mod support;

use support::*;

const PAGE: &str = "html/w3c__manifest/index-html/013.html";
const SCRIPT: &str = "assets/w3c__aria/common_script_aria-js/005.js";
const LARGE_SCRIPT: &str = "assets/w3c__aria/common_script_roleInfo-js/001.js";

fn site() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), corpus_file(PAGE)).unwrap();
    std::fs::write(dir.path().join("aria.js"), corpus_file(SCRIPT)).unwrap();
    std::fs::write(dir.path().join("roles.js"), corpus_file(LARGE_SCRIPT)).unwrap();
    std::fs::write(dir.path().join("small.txt"), "tiny").unwrap();
    std::fs::write(dir.path().join("photo.jpg"), vec![0xffu8; 20_000]).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_coding_decodes_with_the_reference_tools() {
    let dir = site();
    let server = start_root(dir.path(), |_| {}).await;
    let original = corpus_file(PAGE);
    for (token, tool) in [("br", "brotli"), ("zstd", "zstd"), ("gzip", "gzip")] {
        let r = curl(
            &server.url("/index.html"),
            &["-H", &format!("Accept-Encoding: {token}")],
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-encoding"), Some(token));
        assert!(r
            .header("vary")
            .unwrap()
            .to_ascii_lowercase()
            .contains("accept-encoding"));
        assert!(
            r.body.len() < original.len() / 3,
            "{token} should compress HTML well"
        );
        assert_eq!(
            r.header("content-length").unwrap(),
            r.body.len().to_string()
        );
        assert_eq!(
            decode_with_cli(tool, &r.body),
            original,
            "{tool} decodes our {token} body"
        );
        // curl's own decoder agrees.
        let d = curl(
            &server.url("/index.html"),
            &["--compressed", "-H", &format!("Accept-Encoding: {token}")],
        )
        .await;
        assert_eq!(d.body, original);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negotiation_follows_q_values_and_skips_what_does_not_pay() {
    let dir = site();
    let server = start_root(dir.path(), |_| {}).await;
    let coding = |ae: &'static str, path: &'static str| {
        let url = server.url(path);
        async move {
            curl(&url, &["-H", &format!("Accept-Encoding: {ae}")])
                .await
                .header("content-encoding")
                .map(str::to_string)
        }
    };
    assert_eq!(
        coding("gzip, br", "/index.html").await.as_deref(),
        Some("br")
    );
    assert_eq!(
        coding("gzip;q=1, br;q=0.5", "/index.html").await.as_deref(),
        Some("gzip")
    );
    assert_eq!(coding("*", "/index.html").await.as_deref(), Some("br"));
    assert_eq!(
        coding("br;q=0, *", "/index.html").await.as_deref(),
        Some("zstd")
    );
    assert_eq!(coding("identity", "/index.html").await, None);
    assert_eq!(
        coding("gzip, br", "/small.txt").await,
        None,
        "below min_size"
    );
    assert_eq!(
        coding("gzip, br", "/photo.jpg").await,
        None,
        "already compressed type"
    );
    let none = curl(&server.url("/index.html"), &[]).await;
    assert_eq!(none.header("content-encoding"), None);
    assert_eq!(none.body, corpus_file(PAGE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_cleartext_and_tls_alpn() {
    let dir = site();
    let server = start_root(dir.path(), |_| {}).await;
    let r = curl(
        &server.url("/aria.js"),
        &["--http2-prior-knowledge", "--compressed"],
    )
    .await;
    assert_eq!(r.version, "HTTP/2");
    assert_eq!(r.body, corpus_file(SCRIPT));

    let tls = start_root(dir.path(), |c| c.tls.self_signed = true).await;
    let r = curl(&tls.url("/aria.js"), &["--http2", "--compressed"]).await;
    assert_eq!(r.version, "HTTP/2", "ALPN negotiates h2");
    assert_eq!(r.body, corpus_file(SCRIPT));
    let r = curl(
        &tls.url("/aria.js"),
        &["--http1.1", "-H", "Accept-Encoding: zstd"],
    )
    .await;
    assert_eq!(r.version, "HTTP/1.1");
    assert_eq!(decode_with_cli("zstd", &r.body), corpus_file(SCRIPT));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validators_give_304_per_representation() {
    let dir = site();
    let server = start_root(dir.path(), |_| {}).await;
    let url = server.url("/index.html");
    let plain = curl(&url, &[]).await;
    let etag = plain.header("etag").unwrap().to_string();
    assert!(etag.starts_with('"'), "identity gets a strong etag: {etag}");
    let r = curl(&url, &["-H", &format!("If-None-Match: {etag}")]).await;
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());

    let br = curl(&url, &["-H", "Accept-Encoding: br"]).await;
    let br_etag = br.header("etag").unwrap().to_string();
    assert_ne!(br_etag, etag, "an encoding has its own validator");
    assert!(
        br_etag.starts_with("W/") && br_etag.contains("-br"),
        "{br_etag}"
    );
    let r = curl(
        &url,
        &[
            "-H",
            "Accept-Encoding: br",
            "-H",
            &format!("If-None-Match: {br_etag}"),
        ],
    )
    .await;
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some(br_etag.as_str()));
    // The identity validator does not match the br representation.
    let r = curl(
        &url,
        &[
            "-H",
            "Accept-Encoding: br",
            "-H",
            &format!("If-None-Match: {etag}"),
        ],
    )
    .await;
    assert_eq!(r.status, 200);

    let lm = plain.header("last-modified").unwrap().to_string();
    let r = curl(&url, &["-H", &format!("If-Modified-Since: {lm}")]).await;
    assert_eq!(r.status, 304);

    // A changed file gets a new validator and a fresh body.
    std::fs::write(
        dir.path().join("index.html"),
        b"<p>changed, and long enough to matter maybe</p>",
    )
    .unwrap();
    let r = curl(&url, &["-H", &format!("If-None-Match: {etag}")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"<p>changed, and long enough to matter maybe</p>");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_byte_ranges_on_identity() {
    let dir = site();
    let server = start_root(dir.path(), |c| c.limits.max_buffered_body = 64 * 1024).await;
    let original = corpus_file(PAGE);
    let url = server.url("/index.html");
    let r = curl(
        &url,
        &["-H", "Range: bytes=100-199", "-H", "Accept-Encoding: br"],
    )
    .await;
    assert_eq!(r.status, 206);
    assert_eq!(
        r.header("content-encoding"),
        None,
        "ranges are served on identity"
    );
    assert_eq!(
        r.header("content-range").unwrap(),
        format!("bytes 100-199/{}", original.len())
    );
    assert_eq!(r.body, &original[100..200]);
    let r = curl(&url, &["-H", "Range: bytes=-50"]).await;
    assert_eq!(r.body, &original[original.len() - 50..]);
    let r = curl(
        &url,
        &["-H", &format!("Range: bytes={}-", original.len() + 10)],
    )
    .await;
    assert_eq!(r.status, 416);
    assert_eq!(
        r.header("content-range").unwrap(),
        format!("bytes */{}", original.len())
    );
    // Multiple ranges are answered with the whole body (allowed by RFC 9110).
    let r = curl(&url, &["-H", "Range: bytes=0-1,5-6"]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, original);
    // Larger than the buffer limit: streamed from disk, ranges still exact.
    let js = corpus_file(LARGE_SCRIPT);
    assert!(js.len() > 64 * 1024);
    let r = curl(
        &server.url("/roles.js"),
        &["-H", "Range: bytes=70000-70099"],
    )
    .await;
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &js[70000..70100]);
    let r = curl(&server.url("/roles.js"), &["--compressed"]).await;
    assert_eq!(r.body, js, "large file streamed compressed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_path_escapes_the_root() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("ok.txt"), "fine").unwrap();
    std::fs::write(outer.path().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(outer.path().join("secret.txt"), root.join("link.txt")).unwrap();
    let server = start_root(&root, |_| {}).await;
    assert_eq!(curl(&server.url("/ok.txt"), &[]).await.body, b"fine");
    for path in [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2e%2e%2fsecret.txt",
        "/link.txt",
        "/./../secret.txt",
    ] {
        let r = curl(&server.url(path), &["--path-as-is"]).await;
        assert_eq!(r.status, 404, "{path}");
        assert!(
            !String::from_utf8_lossy(&r.body).contains("secret"),
            "{path}"
        );
    }
    let r = curl(&server.url("/ok.txt"), &["-X", "POST"]).await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD"));
}

/// A root with dotfiles (and a link to one), a `.well-known` file and a plain file.
fn root_with_dotfiles() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join(".env"), "SECRET=1").unwrap();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::write(root.join(".git/config"), "[core]").unwrap();
    std::fs::create_dir_all(root.join(".well-known")).unwrap();
    std::fs::write(root.join(".well-known/security.txt"), "Contact: x").unwrap();
    std::fs::write(root.join(".well-known/.htpasswd"), "admin:x").unwrap();
    std::fs::create_dir_all(root.join("assets/.cache")).unwrap();
    std::fs::write(root.join("assets/.cache/state"), "state").unwrap();
    std::fs::write(root.join("file.txt"), "fine").unwrap();
    std::os::unix::fs::symlink(root.join(".env"), root.join("env.txt")).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dotfiles_and_a_file_path_with_a_trailing_slash_are_404() {
    let root = root_with_dotfiles();
    let server = start_root(root.path(), |_| {}).await;
    for path in [
        "/.env",
        "/%2eenv",
        "/.git/config",
        "/.git/",
        "/assets/.cache/state",
        "/.well-known/.htpasswd",
        "/env.txt",
        "/file.txt/",
        "/file.txt/.",
    ] {
        let r = curl(&server.url(path), &["--path-as-is"]).await;
        assert_eq!(r.status, 404, "{path}");
    }
    let r = curl(&server.url("/.well-known/security.txt"), &[]).await;
    assert_eq!((r.status, r.body.as_slice()), (200, &b"Contact: x"[..]));
    let r = curl(&server.url("/file.txt"), &[]).await;
    assert_eq!((r.status, r.body.as_slice()), (200, &b"fine"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_dotfiles_are_served() {
    let root = root_with_dotfiles();
    let server = start_root(root.path(), |c| c.files.serve_dotfiles = true).await;
    for (path, body) in [
        ("/.env", "SECRET=1"),
        ("/.git/config", "[core]"),
        ("/env.txt", "SECRET=1"),
    ] {
        let r = curl(&server.url(path), &[]).await;
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, body.as_bytes()),
            "{path}"
        );
    }
    let r = curl(&server.url("/file.txt/"), &["--path-as-is"]).await;
    assert_eq!(r.status, 404, "a file is never a directory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_bytes_sent_count_each_get_and_no_head() {
    let dir = site();
    let server = start_root(dir.path(), |_| {}).await;
    let sent = |m: &str| metric(m, "wirefold_body_bytes_sent_total{");
    let metrics = || async {
        String::from_utf8(curl(&server.admin_url("/metrics"), &[]).await.body).unwrap()
    };
    // Each GET counts its body, the repeated ones (prepared answers) too.
    let mut got = 0;
    for _ in 0..3 {
        got += curl(&server.url("/index.html"), &[]).await.body.len();
    }
    let after_get = sent(&metrics().await);
    assert_eq!(after_get, got as f64);
    // HEAD counts none, repeated or not.
    for coding in ["identity", "gzip", "gzip", "gzip"] {
        let head = curl(
            &server.url("/index.html"),
            &["-I", "-H", &format!("Accept-Encoding: {coding}")],
        )
        .await;
        assert_eq!(head.status, 200);
    }
    assert_eq!(sent(&metrics().await), after_get);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_matches_get_without_a_body() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = site();
    let server = start_root(dir.path(), |_| {}).await;
    // The first answer is the quick level and a kept level may replace it at any
    // moment: HEAD must match the GET just before or just after it.
    let before = curl(&server.url("/index.html"), &["-H", "Accept-Encoding: gzip"]).await;
    let mut tcp = tokio::net::TcpStream::connect(server.running.addr)
        .await
        .unwrap();
    tcp.write_all(b"HEAD /index.html HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8(raw).expect("a HEAD answer is all text: no body");
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(rest, "", "no body after the head");
    let after = curl(&server.url("/index.html"), &["-H", "Accept-Encoding: gzip"]).await;
    let lower = head.to_ascii_lowercase();
    let length_of = |r: &Curled| format!("content-length: {}", r.header("content-length").unwrap());
    assert!(
        lower.contains(&length_of(&before)) || lower.contains(&length_of(&after)),
        "{head}"
    );
    assert!(lower.contains("content-encoding: gzip"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_requests_reuse_the_cached_encoding_and_metrics_say_so() {
    let dir = site();
    let server = start_root(dir.path(), |_| {}).await;
    let original = corpus_file(PAGE);
    for _ in 0..3 {
        let r = curl(&server.url("/index.html"), &["-H", "Accept-Encoding: br"]).await;
        assert_eq!(decode_with_cli("brotli", &r.body), original);
    }
    // Wait for the background high-level encode, then it is what gets served.
    let mut best = usize::MAX;
    for _ in 0..50 {
        let r = curl(&server.url("/index.html"), &["-H", "Accept-Encoding: br"]).await;
        best = best.min(r.body.len());
        let m = String::from_utf8(curl(&server.admin_url("/metrics"), &[]).await.body).unwrap();
        if metric(&m, "wirefold_encoding_cache_lookups_total{result=\"hit\"}") > 0.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let m = String::from_utf8(curl(&server.admin_url("/metrics"), &[]).await.body).unwrap();
    assert!(
        metric(&m, "wirefold_encoding_cache_lookups_total{result=\"hit\"}") > 0.0,
        "{m}"
    );
    assert!(metric(&m, "wirefold_body_bytes_sent_total{mechanism=\"br\"") > 0.0);
    assert!(metric(&m, "wirefold_requests_total") >= 4.0);
    assert!(m.contains("wirefold_response_latency_seconds_bucket"));
    let health = curl(&server.admin_url("/healthz"), &[]).await;
    assert_eq!(health.body, b"ok\n");
}
