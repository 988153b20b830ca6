//! Delta encoding end to end: RFC 9842 dictionaries (dcz/dcb) and RFC 3229 deltas
//! (226 IM Used with VCDIFF), decoded by the reference tools.

mod support;

use std::sync::{Arc, Mutex};

use base64::Engine;
use sha2::Digest;
use support::*;

const SCRIPT_V1: &str = "assets/w3c__aria/common_script_aria-js/028.js";
const SCRIPT_V2: &str = "assets/w3c__aria/common_script_aria-js/029.js";
const PAGE_V1: &str = "html/w3c__manifest/index-html--recent/028.html";
const PAGE_V2: &str = "html/w3c__manifest/index-html--recent/029.html";

fn sha256(data: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(data).into()
}

fn available(data: &[u8]) -> String {
    format!(
        "Available-Dictionary: :{}:",
        base64::engine::general_purpose::STANDARD.encode(sha256(data))
    )
}

fn with_tool(tool: &str, args: &[&str], files: &[(&str, &[u8])]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    for (name, data) in files {
        std::fs::write(dir.path().join(name), data).unwrap();
    }
    let out = std::process::Command::new(tool)
        .args(args)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{tool} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Path, content type, cache control and body of each resource.
type Files = Arc<Mutex<Vec<(String, &'static str, String, Vec<u8>)>>>;

/// An origin whose resources can be replaced while it runs.
async fn mutable_origin(files: Files) -> TestOrigin {
    origin(move |req| {
        let files = files.lock().unwrap();
        let Some((_, ct, cc, body)) = files.iter().find(|(p, ..)| p == req.uri().path()) else {
            return response(404, &[], "");
        };
        let etag = format!("\"{}\"", hex::encode(&sha256(body)[..8]));
        if req
            .headers()
            .get("if-none-match")
            .and_then(|v| v.to_str().ok())
            == Some(etag.as_str())
        {
            return response(304, &[("etag", &etag), ("cache-control", cc)], "");
        }
        response(
            200,
            &[("content-type", ct), ("cache-control", cc), ("etag", &etag)],
            body.clone(),
        )
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versioned_script_is_compressed_against_its_previous_version() {
    let (v1, v2) = (corpus_file(SCRIPT_V1), corpus_file(SCRIPT_V2));
    let files = Arc::new(Mutex::new(vec![
        (
            "/js/app.v1.js".to_string(),
            "application/javascript",
            "max-age=3600".to_string(),
            v1.clone(),
        ),
        (
            "/js/app.v2.js".to_string(),
            "application/javascript",
            "max-age=3600".to_string(),
            v2.clone(),
        ),
    ]));
    let origin = mutable_origin(files).await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;

    let first = curl(&proxy.url("/js/app.v1.js"), &["--compressed"]).await;
    assert_eq!(first.body, v1);
    assert_eq!(
        first.header("use-as-dictionary"),
        Some("match=\"/js/app.*.js\"")
    );

    for (token, expected_magic) in [
        ("dcz", &[0x5e, 0x2a, 0x4d, 0x18][..]),
        ("dcb", &[0xff, 0x44, 0x43, 0x42][..]),
    ] {
        let r = curl(
            &proxy.url("/js/app.v2.js"),
            &[
                "-H",
                &format!("Accept-Encoding: gzip, br, zstd, {token}"),
                "-H",
                &available(&v1),
            ],
        )
        .await;
        assert_eq!(r.header("content-encoding"), Some(token), "{:?}", r.headers);
        let vary = r.header("vary").unwrap().to_ascii_lowercase();
        assert!(
            vary.contains("accept-encoding") && vary.contains("available-dictionary"),
            "{vary}"
        );
        assert_eq!(&r.body[..4], expected_magic);
        assert_eq!(
            &r.body[4 + (token == "dcz") as usize * 4..][..32],
            &sha256(&v1)
        );
        let br = curl(&proxy.url("/js/app.v2.js"), &["-H", "Accept-Encoding: br"]).await;
        assert!(
            r.body.len() * 5 < br.body.len(),
            "{token} {} vs br {}",
            r.body.len(),
            br.body.len()
        );
        let decoded = match token {
            // The reference tool decodes the whole body: the header is a skippable frame.
            "dcz" => with_tool(
                "zstd",
                &["-d", "-c", "-D", "dict", "body"],
                &[("dict", &v1), ("body", &r.body)],
            ),
            _ => codec::dictionary::decode(
                codec::dictionary::DictionaryCoding::Dcb,
                &v1,
                &r.body,
                1 << 24,
            )
            .unwrap(),
        };
        assert_eq!(decoded, v2, "{token} decodes to the new version");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_or_foreign_dictionaries_fall_back_to_plain_compression() {
    let v1 = corpus_file(SCRIPT_V1);
    let files = Arc::new(Mutex::new(vec![
        (
            "/a.js".to_string(),
            "application/javascript",
            "max-age=3600".to_string(),
            v1.clone(),
        ),
        (
            "/secret.js".to_string(),
            "application/javascript",
            "private, max-age=3600".to_string(),
            corpus_file(SCRIPT_V2),
        ),
    ]));
    let origin = mutable_origin(files).await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    curl(&proxy.url("/secret.js"), &[]).await;
    let ae = "Accept-Encoding: br, dcz, dcb";
    // A hash nobody stored.
    let r = curl(
        &proxy.url("/a.js"),
        &["-H", ae, "-H", &available(b"never seen")],
    )
    .await;
    assert_eq!(r.header("content-encoding"), Some("br"));
    // A private response is never stored, so never a dictionary for anyone.
    let r = curl(
        &proxy.url("/a.js"),
        &["-H", ae, "-H", &available(&corpus_file(SCRIPT_V2))],
    )
    .await;
    assert_eq!(r.header("content-encoding"), Some("br"));
    // A malformed header is ignored.
    let r = curl(
        &proxy.url("/a.js"),
        &["-H", ae, "-H", "Available-Dictionary: :not-base64!:"],
    )
    .await;
    assert_eq!(r.header("content-encoding"), Some("br"));
    // A cross-site no-cors fetch may not use a dictionary (RFC 9842 readability).
    curl(&proxy.url("/a.js"), &[]).await;
    let r = curl(
        &proxy.url("/a.js"),
        &[
            "-H",
            ae,
            "-H",
            &available(&v1),
            "-H",
            "Sec-Fetch-Site: cross-site",
            "-H",
            "Sec-Fetch-Mode: no-cors",
        ],
    )
    .await;
    assert_eq!(r.header("content-encoding"), Some("br"));
    let r = curl(
        &proxy.url("/a.js"),
        &[
            "-H",
            ae,
            "-H",
            &available(&v1),
            "-H",
            "Sec-Fetch-Site: same-origin",
            "-H",
            "Sec-Fetch-Mode: cors",
        ],
    )
    .await;
    assert_eq!(r.header("content-encoding"), Some("dcz"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc3229_clients_get_226_with_a_vcdiff_delta() {
    let (v1, v2) = (corpus_file(PAGE_V1), corpus_file(PAGE_V2));
    let files = Arc::new(Mutex::new(vec![(
        "/spec".to_string(),
        "text/html",
        "no-cache".to_string(),
        v1.clone(),
    )]));
    let origin = mutable_origin(files.clone()).await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let first = curl(&proxy.url("/spec"), &[]).await;
    let etag_v1 = first.header("etag").unwrap().to_string();
    files.lock().unwrap()[0].3 = v2.clone();

    let r = curl(
        &proxy.url("/spec"),
        &[
            "-H",
            "A-IM: vcdiff",
            "-H",
            &format!("If-None-Match: {etag_v1}"),
        ],
    )
    .await;
    assert_eq!(r.status, 226, "{:?}", r.headers);
    assert_eq!(r.header("im"), Some("vcdiff"));
    assert_eq!(r.header("delta-base"), Some(etag_v1.as_str()));
    assert_eq!(r.header("cache-control"), Some("no-store, im"));
    let etag_v2 = r.header("etag").unwrap().to_string();
    assert_ne!(etag_v2, etag_v1);
    assert!(
        r.body.len() * 20 < v2.len(),
        "delta {} vs page {}",
        r.body.len(),
        v2.len()
    );
    let rebuilt = with_tool(
        "xdelta3",
        &["-d", "-c", "-s", "base", "delta"],
        &[("base", &v1), ("delta", &r.body)],
    );
    assert_eq!(rebuilt, v2, "xdelta3 applies our delta");

    // Holding the current instance: 304, not a delta.
    let r = curl(
        &proxy.url("/spec"),
        &[
            "-H",
            "A-IM: vcdiff",
            "-H",
            &format!("If-None-Match: {etag_v1}, {etag_v2}"),
        ],
    )
    .await;
    assert_eq!(r.status, 304);
    // A base we never had, or no A-IM: an ordinary 200.
    let r = curl(
        &proxy.url("/spec"),
        &[
            "-H",
            "A-IM: vcdiff",
            "-H",
            "If-None-Match: \"nope\"",
            "--compressed",
        ],
    )
    .await;
    assert_eq!((r.status, r.body.as_slice()), (200, v2.as_slice()));
    let r = curl(
        &proxy.url("/spec"),
        &["-H", &format!("If-None-Match: {etag_v1}"), "--compressed"],
    )
    .await;
    assert_eq!((r.status, r.body.as_slice()), (200, v2.as_slice()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_a_browser_will_not_keep_get_a_derived_dictionary() {
    let (v1, v2) = (corpus_file(PAGE_V1), corpus_file(PAGE_V2));
    let files = Arc::new(Mutex::new(vec![(
        "/news".to_string(),
        "text/html",
        "no-cache".to_string(),
        v1.clone(),
    )]));
    let origin = mutable_origin(files.clone()).await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let first = curl(&proxy.url("/news"), &["--compressed"]).await;
    assert_eq!(
        first.header("use-as-dictionary"),
        None,
        "instantly stale: Chromium would not keep it"
    );
    let link = first
        .dictionary_links()
        .first()
        .expect("a derived dictionary is announced")
        .to_string();
    assert!(link.ends_with("rel=\"compression-dictionary\""), "{link}");
    let path = link
        .trim_start_matches('<')
        .split('>')
        .next()
        .unwrap()
        .to_string();
    let dict = curl(&proxy.url(&path), &["--compressed"]).await;
    assert_eq!(dict.status, 200);
    assert_eq!(dict.body, v1);
    assert_eq!(
        dict.header("use-as-dictionary"),
        Some("match=\"/news\", match-dest=(\"document\")")
    );
    assert!(dict
        .header("cache-control")
        .unwrap()
        .contains("max-age=31536000"));

    files.lock().unwrap()[0].3 = v2.clone();
    let r = curl(
        &proxy.url("/news"),
        &[
            "-H",
            "Accept-Encoding: br, dcz",
            "-H",
            &available(&v1),
            "-H",
            "Sec-Fetch-Mode: navigate",
        ],
    )
    .await;
    assert_eq!(r.header("content-encoding"), Some("dcz"));
    assert_eq!(
        with_tool(
            "zstd",
            &["-d", "-c", "-D", "dict", "body"],
            &[("dict", &v1), ("body", &r.body)]
        ),
        v2
    );
    // The dictionary stays the same while the page changes: fetched once, not per change.
    assert_eq!(r.dictionary_links(), [link.as_str()]);
    // Unknown dictionaries are 404, never an error page with content.
    assert_eq!(
        curl(&proxy.url("/.wirefold/dict/00"), &[]).await.status,
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_mode_keeps_versions_of_changed_files() {
    let dir = tempfile::tempdir().unwrap();
    let (v1, v2) = (corpus_file(PAGE_V1), corpus_file(PAGE_V2));
    std::fs::write(dir.path().join("spec.html"), &v1).unwrap();
    let server = start_root(dir.path(), |_| {}).await;
    let first = curl(&server.url("/spec.html"), &[]).await;
    let etag_v1 = first.header("etag").unwrap().to_string();
    std::fs::write(dir.path().join("spec.html"), &v2).unwrap();
    let r = curl(
        &server.url("/spec.html"),
        &[
            "-H",
            "A-IM: vcdiff",
            "-H",
            &format!("If-None-Match: {etag_v1}"),
        ],
    )
    .await;
    assert_eq!(r.status, 226);
    let rebuilt = with_tool(
        "xdelta3",
        &["-d", "-c", "-s", "base", "delta"],
        &[("base", &v1), ("delta", &r.body)],
    );
    assert_eq!(rebuilt, v2);
}

/// Waits until two scanner passes have completed after this call: the second
/// started after any change made before the call, and finished its work.
async fn settle(server: &Proxy) {
    let scans = || async {
        metric(
            &String::from_utf8(curl(&server.admin_url("/metrics"), &[]).await.body).unwrap(),
            "wirefold_root_scans_total",
        )
    };
    let start = scans().await;
    for _ in 0..1200 {
        if scans().await >= start + 2.0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the scanner never finished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_mode_precomputes_encodings_and_deltas_before_the_first_request() {
    let dir = tempfile::tempdir().unwrap();
    let (v1, v2) = (corpus_file(SCRIPT_V1), corpus_file(SCRIPT_V2));
    std::fs::create_dir(dir.path().join("js")).unwrap();
    std::fs::write(dir.path().join("js/app.js"), &v1).unwrap();
    std::fs::write(dir.path().join("js/lib.1a2b3c4d.js"), &v1).unwrap();
    let server = start_root(dir.path(), |c| c.delta.scan_interval_ms = 100).await;
    settle(&server).await;
    let first = curl(&server.url("/js/app.js"), &["-H", "Accept-Encoding: br"]).await;
    let etag_v1 = first.header("etag").unwrap().to_string();
    assert_eq!(first.header("cache-control"), Some("no-cache"));
    let versioned = curl(
        &server.url("/js/lib.1a2b3c4d.js"),
        &["-H", "Accept-Encoding: br"],
    )
    .await;
    assert_eq!(
        versioned.header("cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    assert_eq!(
        versioned.header("use-as-dictionary"),
        Some("match=\"/js/lib.*.js\"")
    );

    // A deploy: a new version of the plain file and a new versioned file.
    std::fs::write(dir.path().join("js/app.js"), &v2).unwrap();
    std::fs::write(dir.path().join("js/lib.9f8e7d6c.js"), &v2).unwrap();
    settle(&server).await;
    let metrics = || async {
        String::from_utf8(curl(&server.admin_url("/metrics"), &[]).await.body).unwrap()
    };
    let misses_before = metric(
        &metrics().await,
        "wirefold_encoding_cache_lookups_total{result=\"miss\"}",
    );

    let r = curl(
        &server.url("/js/app.js"),
        &[
            "-H",
            "A-IM: vcdiff",
            "-H",
            &format!("If-None-Match: {etag_v1}"),
        ],
    )
    .await;
    assert_eq!(r.status, 226, "{etag_v1} {:?}", r.headers);
    assert_eq!(
        with_tool(
            "xdelta3",
            &["-d", "-c", "-s", "base", "delta"],
            &[("base", &v1), ("delta", &r.body)]
        ),
        v2
    );
    let r = curl(
        &server.url("/js/lib.9f8e7d6c.js"),
        &["-H", "Accept-Encoding: br, dcz", "-H", &available(&v1)],
    )
    .await;
    assert_eq!(r.header("content-encoding"), Some("dcz"));
    assert_eq!(
        with_tool(
            "zstd",
            &["-d", "-c", "-D", "dict", "body"],
            &[("dict", &v1), ("body", &r.body)]
        ),
        v2
    );
    let r = curl(&server.url("/js/app.js"), &["-H", "Accept-Encoding: br"]).await;
    assert_eq!(decode_with_cli("brotli", &r.body), v2);

    let misses_after = metric(
        &metrics().await,
        "wirefold_encoding_cache_lookups_total{result=\"miss\"}",
    );
    let text = metrics().await;
    assert_eq!(
        misses_after,
        misses_before,
        "every body served after the deploy was made before it was asked for: {}",
        text.lines()
            .filter(|l| l.contains("lookups") || l.contains("body_bytes_sent"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trained_dictionary_serves_first_visits_to_unseen_pages() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/corpus/siblings/whatwg__whatwg.org");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".html"))
        .collect();
    names.sort();
    let pages: Arc<Vec<(String, Vec<u8>)>> = Arc::new(
        names
            .iter()
            .map(|n| (format!("/list/{n}"), std::fs::read(dir.join(n)).unwrap()))
            .collect(),
    );
    let served = pages.clone();
    let origin = origin(
        move |req| match served.iter().find(|(p, _)| p == req.uri().path()) {
            Some((_, body)) => response(
                200,
                &[
                    ("content-type", "text/html"),
                    ("cache-control", "max-age=600"),
                ],
                body.clone(),
            ),
            None => response(404, &[], ""),
        },
    )
    .await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let (seen, unseen) = pages.split_at(pages.len() * 4 / 5);
    for (path, _) in seen {
        curl(&proxy.url(path), &[]).await;
    }
    let (status, report) = proxy::server::call_admin(
        proxy.running.admin_addr,
        http::Method::POST,
        "/dictionaries/train?pattern=%2Flist%2F*&max_size=32768",
        None,
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{report}");
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["samples"], seen.len());
    let url = report["url"].as_str().unwrap().to_string();
    let dictionary = curl(&proxy.url(&url), &["--compressed"]).await;
    assert_eq!(
        dictionary.header("use-as-dictionary"),
        Some("match=\"/list/*\", match-dest=(\"document\")")
    );

    let (mut plain_total, mut dict_total) = (0, 0);
    for (path, body) in unseen {
        let first = curl(&proxy.url(path), &["-H", "Accept-Encoding: br"]).await;
        assert!(
            first.dictionary_links().iter().any(|l| l.contains(&url)),
            "unseen pages announce the trained dictionary"
        );
        let with_dict = curl(
            &proxy.url(path),
            &[
                "-H",
                "Accept-Encoding: br, dcz",
                "-H",
                &available(&dictionary.body),
                "-H",
                "Sec-Fetch-Mode: navigate",
            ],
        )
        .await;
        assert_eq!(with_dict.header("content-encoding"), Some("dcz"), "{path}");
        assert_eq!(
            with_tool(
                "zstd",
                &["-d", "-c", "-D", "dict", "body"],
                &[("dict", &dictionary.body), ("body", &with_dict.body)]
            ),
            *body
        );
        plain_total += first.body.len();
        dict_total += with_dict.body.len();
    }
    println!("first visits to {} unseen pages: br {plain_total} bytes, dcz with the trained dictionary {dict_total} bytes", unseen.len());
    assert!(
        dict_total < plain_total,
        "the trained dictionary pays on first visits"
    );
    // Bad requests to the admin endpoint are explained.
    let (status, body) = proxy::server::call_admin(
        proxy.running.admin_addr,
        http::Method::POST,
        "/dictionaries/train?pattern=%2Fnothing%2F*",
        None,
    )
    .await
    .unwrap();
    assert_eq!(status, 400);
    assert!(body.contains("no stored pages"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_admin_token_is_required_to_train() {
    let origin = origin(|_| response(200, &[("content-type", "text/html")], "<p>page</p>")).await;
    let proxy = start_proxy(&origin.url(""), |c| c.admin_token = Some("s3cret".into())).await;
    let train = |token: Option<&'static str>| {
        proxy::server::call_admin(
            proxy.running.admin_addr,
            http::Method::POST,
            "/dictionaries/train?pattern=%2Fnothing%2F*",
            token,
        )
    };
    for wrong in [None, Some("guess"), Some("s3cre")] {
        let (status, body) = train(wrong).await.unwrap();
        assert_eq!(status, 401, "{wrong:?}: {body}");
        assert!(body.contains("admin token"), "{body}");
    }
    // With the token, the request reaches training (which finds nothing to train on).
    let (status, body) = train(Some("s3cret")).await.unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("no stored pages"), "{body}");
    // Reads stay open.
    let (status, _) = proxy::server::call_admin(
        proxy.running.admin_addr,
        http::Method::GET,
        "/metrics",
        None,
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
}

/// A `no-cache` script or stylesheet changed in place: the page referencing it links
/// its derived dictionary (`match` its path, `match-dest` its destination), and the
/// changed script is sent as dcz against it. Never linked: what a browser keeps by
/// itself, what is not for everyone (private, or only asked for with a cookie), what
/// is on another site, an HTML page referenced as a script (the page itself included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_link_the_derived_dictionaries_of_their_instantly_stale_subresources() {
    let (v1, v2) = (corpus_file(SCRIPT_V1), corpus_file(SCRIPT_V2));
    let css = corpus_file("assets/whatwg__whatwg.org/resources-whatwg-org_standard-css/030.css");
    // Above `compression.min_size`: smaller bodies are sent as they are.
    let page = format!(
        "<!DOCTYPE html><html><head>\
        <link rel=stylesheet href=/site.css>\
        <script src=/cached.js></script><script src=/private.js></script>\
        <script src=http://cross.example/app.js></script>\
        <script src=/other.html></script><script src=/></script>\
        <script src=/cookied.js></script>\
        </head><body>{}<script src=app.js></script></body></html>",
        "<p>Text of the page.</p>\n".repeat(64)
    );
    let entry = |path: &str, ct, cc: &str, body: &[u8]| {
        (path.to_string(), ct, cc.to_string(), body.to_vec())
    };
    let files = Arc::new(Mutex::new(vec![
        entry("/", "text/html", "no-cache", page.as_bytes()),
        entry("/app.js", "application/javascript", "no-cache", &v1),
        entry("/site.css", "text/css", "max-age=0", &css),
        entry("/cached.js", "application/javascript", "max-age=3600", &v1),
        entry(
            "/private.js",
            "application/javascript",
            "private, no-cache",
            &v2,
        ),
        entry(
            "/other.html",
            "text/html",
            "no-cache",
            &corpus_file(PAGE_V1),
        ),
        entry("/cookied.js", "application/javascript", "no-cache", &v2),
    ]));
    let origin = mutable_origin(files.clone()).await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    curl(&proxy.url("/"), &["--compressed"]).await;
    for path in [
        "/app.js",
        "/site.css",
        "/cached.js",
        "/private.js",
        "/other.html",
    ] {
        assert_eq!(curl(&proxy.url(path), &["--compressed"]).await.status, 200);
    }
    // Only ever asked for with a cookie: personal, never derived from.
    let cookied = curl(
        &proxy.url("/cookied.js"),
        &["--compressed", "-H", "Cookie: session=1"],
    )
    .await;
    assert_eq!(cookied.status, 200);
    let page = curl(&proxy.url("/"), &["--compressed"]).await;
    let links: Vec<String> = page
        .dictionary_links()
        .into_iter()
        .map(|v| {
            v.trim_start_matches('<')
                .split('>')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    let mut announced = Vec::new();
    for link in &links {
        let dict = curl(&proxy.url(link), &["--compressed"]).await;
        assert_eq!(dict.status, 200, "{link}");
        announced.push((
            dict.header("use-as-dictionary").unwrap().to_string(),
            dict.body,
        ));
    }
    announced.sort();
    let expected = [
        ("match=\"/\", match-dest=(\"document\")", page.body.clone()),
        ("match=\"/app.js\", match-dest=(\"script\")", v1.clone()),
        ("match=\"/site.css\", match-dest=(\"style\")", css.clone()),
    ];
    let announced: Vec<(&str, &[u8])> = announced
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_slice()))
        .collect();
    let expected: Vec<(&str, &[u8])> = expected.iter().map(|(a, b)| (*a, b.as_slice())).collect();
    assert_eq!(announced.len(), 3, "{links:?}");
    for (want, got) in expected.iter().zip(&announced) {
        assert_eq!(want.0, got.0, "{links:?}");
        assert!(want.1 == got.1, "{} serves the instance it names", want.0);
    }

    // A dictionary the store does not hold is 404.
    let unknown = format!("/.wirefold/dict/{}", "0".repeat(64));
    assert_eq!(curl(&proxy.url(&unknown), &[]).await.status, 404);

    // The script changes in place: a request naming its derived dictionary gets dcz.
    files.lock().unwrap()[1].3 = v2.clone();
    let r = curl(
        &proxy.url("/app.js"),
        &[
            "-H",
            "Accept-Encoding: br, dcz",
            "-H",
            &available(&v1),
            "-H",
            "Sec-Fetch-Mode: no-cors",
            "-H",
            "Sec-Fetch-Site: same-origin",
            "-H",
            "Sec-Fetch-Dest: script",
        ],
    )
    .await;
    assert_eq!(r.header("content-encoding"), Some("dcz"));
    let decoded = with_tool(
        "zstd",
        &["-d", "-c", "-D", "dict", "body"],
        &[("dict", &v1), ("body", &r.body)],
    );
    assert!(decoded == v2, "dcz decodes to the new script");
}

/// `delta.subresource_dictionaries` bounds the links a page carries, however many
/// scripts it names; 0 turns subresource links off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subresource_dictionary_links_are_bounded() {
    let script = corpus_file(SCRIPT_V1);
    let mut page = String::from("<!DOCTYPE html><html><body>");
    let mut entries = Vec::new();
    for i in 0..10_000 {
        page.push_str(&format!("<script src=/s{i}.js></script>"));
        if i < 6 {
            let mut body = script.clone();
            body.extend_from_slice(format!("\n// {i}\n").as_bytes());
            entries.push((
                format!("/s{i}.js"),
                "application/javascript",
                "no-cache".to_string(),
                body,
            ));
        }
    }
    entries.push((
        "/".into(),
        "text/html",
        "max-age=60".into(),
        page.into_bytes(),
    ));
    let files = Arc::new(Mutex::new(entries));
    let origin = mutable_origin(files).await;
    for (limit, expected) in [(4, 4), (0, 0)] {
        let proxy = start_proxy(&origin.url(""), |c| {
            c.delta.subresource_dictionaries = limit;
        })
        .await;
        for i in 0..6 {
            curl(&proxy.url(&format!("/s{i}.js")), &["--compressed"]).await;
        }
        let page = curl(&proxy.url("/"), &["--compressed"]).await;
        assert_eq!(page.status, 200);
        let links = page.dictionary_links().len();
        assert_eq!(links, expected, "limit {limit}: {:?}", page.headers);
    }
}
