//! Prepared responses: a repeat of a request is answered by the answer kept for it
//! while nothing it was made from changed, and by the stages as soon as something
//! did: a file rewritten, a cached response no longer fresh (its `Age` counting up
//! meanwhile), an encoding kept at the cached level after the first answers, a
//! configuration reloaded. Requests with credentials are never answered so. A server
//! verifying every prepared answer against the stages finds no difference over a
//! site that changes under it.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proxy::config::Config;
use proxy::live::{ConfigLoader, LiveConfig};
use support::*;
use wirefold_http::ContentCoding;

const SCRIPT_V1: &str = "assets/w3c__aria/common_script_aria-js/028.js";
const SCRIPT_V2: &str = "assets/w3c__aria/common_script_aria-js/029.js";
const SENT: &str = "wirefold_prepared_responses_total{result=\"sent\"}";
const KEPT: &str = "wirefold_prepared_responses_total{result=\"kept\"}";
const VERIFIED: &str = "wirefold_prepared_responses_total{result=\"verified\"}";
const MISMATCH: &str = "wirefold_prepared_responses_total{result=\"mismatch\"}";

/// With the `minify` feature a text's answers change once its minified variant is
/// made in the background (they gain `Alternates`; a first sight is never kept): the
/// tests of what else an answer rests on serve text without variants, and
/// `text_with_variants_is_prepared_once_its_ladder_is_made` covers them.
fn without_text_variants(config: &mut Config) {
    if fidelity::text::MINIFIERS {
        config.fidelity.enabled = false;
    }
}

fn site(files: &[(&str, &[u8])]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for (name, content) in files {
        std::fs::write(root.path().join(name), content).unwrap();
    }
    root
}

/// Asks for `url` until an answer comes from a prepared copy (the `sent` count
/// grows), at most for ten seconds; returns that answer.
async fn until_prepared(proxy: &Proxy, url: &str, args: &[&str]) -> Curled {
    for _ in 0..200 {
        let before = proxy.metric(SENT).await;
        let answer = curl(url, args).await;
        if proxy.metric(SENT).await > before {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{url} {args:?} was never answered by a prepared copy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_file_is_served_new_at_once() {
    let (v1, v2) = (corpus_file(SCRIPT_V1), corpus_file(SCRIPT_V2));
    let root = site(&[("app.js", &v1)]);
    let proxy = start_root(root.path(), without_text_variants).await;
    let url = proxy.url("/app.js");
    let args = ["--compressed"];
    assert!(until_prepared(&proxy, &url, &args).await.body == v1);

    std::fs::write(root.path().join("app.js"), &v2).unwrap();
    let after = curl(&url, &args).await;
    assert!(after.body == v2, "the next answer after the rewrite");
    // The same size, another modification time, other bytes: new as well.
    let mut same_size = v2.clone();
    same_size[0] = if same_size[0] == b'/' { b' ' } else { b'/' };
    assert!(until_prepared(&proxy, &url, &args).await.body == v2);
    tokio::time::sleep(Duration::from_millis(20)).await;
    std::fs::write(root.path().join("app.js"), &same_size).unwrap();
    assert!(
        curl(&url, &args).await.body == same_size,
        "rewritten at the same size"
    );
    // Replaced by a rename, as deploys do.
    assert!(until_prepared(&proxy, &url, &args).await.body == same_size);
    std::fs::write(root.path().join(".app.js.new"), &v1).unwrap();
    std::fs::rename(root.path().join(".app.js.new"), root.path().join("app.js")).unwrap();
    assert!(curl(&url, &args).await.body == v1, "replaced by a rename");
    std::fs::remove_file(root.path().join("app.js")).unwrap();
    assert_eq!(curl(&url, &args).await.status, 404, "a removed file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_gets_the_answer_made_for_its_own_fields() {
    let page = corpus_file(SCRIPT_V1);
    let root = site(&[("app.js", &page)]);
    let proxy = start_root(root.path(), without_text_variants).await;
    let url = proxy.url("/app.js");
    let br = until_prepared(&proxy, &url, &["-H", "Accept-Encoding: br"]).await;
    assert_eq!(br.header("content-encoding"), Some("br"));
    assert!(decode_with_cli("brotli", &br.body) == page);

    let gzip = curl(&url, &["-H", "Accept-Encoding: gzip"]).await;
    assert_eq!(gzip.header("content-encoding"), Some("gzip"));
    assert!(decode_with_cli("gzip", &gzip.body) == page);
    let plain = curl(&url, &[]).await;
    assert_eq!(plain.header("content-encoding"), None);
    assert!(plain.body == page);

    // A HEAD's answer has the GET's length. The first br answers are at the
    // on-the-fly level until the cached level is made in the background (slow when
    // the machine is busy), so the two are compared as prepared in turn until both
    // are of the same encoding.
    let mut same_length = false;
    for _ in 0..50 {
        let head = until_prepared(&proxy, &url, &["-I", "-H", "Accept-Encoding: br"]).await;
        assert_eq!(head.status, 200);
        let get = until_prepared(&proxy, &url, &["-H", "Accept-Encoding: br"]).await;
        if head.header("content-length") == get.header("content-length") {
            same_length = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        same_length,
        "a HEAD's Content-Length never matched its GET's"
    );

    // A part is never kept: it shares the whole body's buffer.
    let kept = proxy.metric(KEPT).await;
    for _ in 0..3 {
        let part = curl(&url, &["-H", "Range: bytes=0-9"]).await;
        assert_eq!((part.status, part.body.as_slice()), (206, &page[..10]));
    }
    assert_eq!(proxy.metric(KEPT).await, kept);

    let etag = br.header("etag").unwrap().to_string();
    let held = [
        "-H",
        "Accept-Encoding: br",
        "-H",
        &format!("If-None-Match: {etag}"),
    ];
    let not_modified = until_prepared(&proxy, &url, &held).await;
    assert_eq!(not_modified.status, 304);
    assert_eq!(not_modified.header("etag"), Some(etag.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_answer_carries_its_own_fields_and_none_of_the_request() {
    // A repeat's fields are written into the request's own map (its memory reused):
    // the request's fields must all be gone from it, and the answer's all there.
    let script = corpus_file(SCRIPT_V1);
    let root = site(&[("app.js", &script)]);
    let proxy = start_root(root.path(), without_text_variants).await;
    let url = proxy.url("/app.js");
    let args = [
        "-H",
        "Accept-Encoding: br",
        "-H",
        "X-Probe: from-the-client",
        "-H",
        "Accept-Language: da, en-gb;q=0.8",
    ];
    let stages = curl(&url, &args).await;
    let prepared = until_prepared(&proxy, &url, &args).await;
    for name in [
        "x-probe",
        "accept-language",
        "accept-encoding",
        "user-agent",
        "host",
    ] {
        assert_eq!(prepared.header(name), None, "{name} came back");
    }
    let names = |c: &Curled| {
        let mut names: Vec<String> = c.headers.iter().map(|(n, _)| n.to_lowercase()).collect();
        names.sort();
        names
    };
    assert_eq!(names(&prepared), names(&stages));
    assert!(decode_with_cli("brotli", &prepared.body) == script);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_with_credentials_are_always_answered_by_the_stages() {
    let root = site(&[("app.js", &corpus_file(SCRIPT_V1))]);
    let proxy = start_root(root.path(), without_text_variants).await;
    let url = proxy.url("/app.js");
    for args in [
        &["-H", "Cookie: session=a"][..],
        &["-H", "Authorization: Bearer a"],
    ] {
        for _ in 0..5 {
            assert_eq!(curl(&url, args).await.status, 200);
        }
    }
    assert_eq!(proxy.metric(KEPT).await, 0.0);
    assert_eq!(proxy.metric(SENT).await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_hit_is_repeated_while_fresh_with_its_age_counting_up() {
    let body = corpus_file(SCRIPT_V1);
    let served = body.clone();
    let origin = origin(move |_| {
        response(
            200,
            &[
                ("content-type", "text/javascript"),
                ("cache-control", "max-age=3"),
                ("etag", "\"v1\""),
            ],
            served.clone(),
        )
    })
    .await;
    let proxy = start_proxy(&origin.url(""), without_text_variants).await;
    let url = proxy.url("/app.js");
    let first = until_prepared(&proxy, &url, &[]).await;
    assert!(first.body == body);
    let hits = origin.hits();
    let first_age: u64 = first.header("age").unwrap().parse().unwrap();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let later = until_prepared(&proxy, &url, &[]).await;
    let later_age: u64 = later.header("age").unwrap().parse().unwrap();
    assert!(later_age > first_age, "Age {first_age} then {later_age}");
    // A 304 carries no `Age`, kept or not.
    let etag = first.header("etag").unwrap().to_string();
    let held = ["-H", &format!("If-None-Match: {etag}")];
    let not_modified = until_prepared(&proxy, &url, &held).await;
    assert_eq!(not_modified.status, 304);
    assert_eq!(not_modified.header("age"), None);
    assert_eq!(
        origin.hits(),
        hits,
        "answered without the origin while fresh"
    );

    // Past its freshness the stages answer, and they ask the origin.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let sent = proxy.metric(SENT).await;
    assert!(curl(&url, &[]).await.body == body);
    assert!(origin.hits() > hits, "the origin was asked once stale");
    assert_eq!(proxy.metric(SENT).await, sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encoding_kept_later_replaces_the_answers_made_before_it() {
    let page = corpus_file(SCRIPT_V1);
    let root = site(&[("app.js", &page)]);
    // No root scan: it would make the encoding ahead of the first request.
    let proxy = start_root(root.path(), |c| {
        c.delta.scan_interval_ms = 0;
        without_text_variants(c);
    })
    .await;
    let url = proxy.url("/app.js");
    let args = ["-H", "Accept-Encoding: br"];
    // The first answers go out at the on-the-fly level while the cached level is
    // made in the background; copies of them stand only until it is kept.
    let config = Config::default();
    let profile = config.compression.profile_for("text/javascript").unwrap();
    let level = |list: &proxy::config::CodingList| {
        list.0
            .iter()
            .find(|(c, _)| *c == ContentCoding::Br)
            .unwrap()
            .1
    };
    assert!(level(&profile.on_the_fly) < level(&profile.cached));
    let kept = codec::compress(ContentCoding::Br, level(&profile.cached), &page);
    let first = curl(&url, &args).await;
    assert!(first.body != kept, "the first answer is made on the fly");
    for _ in 0..100 {
        if until_prepared(&proxy, &url, &args).await.body == kept {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("copies kept answering at the on-the-fly level");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_puts_its_configuration_into_the_next_answer() {
    let root = site(&[("app.js", &corpus_file(SCRIPT_V1))]);
    let data = tempfile::tempdir().unwrap();
    let cache_control = Arc::new(Mutex::new("no-cache".to_string()));
    let config = {
        let (root, data, cache_control) = (
            root.path().to_path_buf(),
            data.path().to_path_buf(),
            cache_control.clone(),
        );
        move || {
            let mut config: Config = test_config(&data);
            config.root = Some(root.clone());
            config.files.cache_control = cache_control.lock().unwrap().clone();
            without_text_variants(&mut config);
            config
        }
    };
    let first = config();
    let loader: ConfigLoader = Arc::new(move || Ok(config()));
    let running = proxy::server::start_with(LiveConfig::new(first, Some(loader)), None)
        .await
        .unwrap();
    let proxy = Proxy { running, data };
    let url = proxy.url("/app.js");
    let before = until_prepared(&proxy, &url, &[]).await;
    assert_eq!(before.header("cache-control"), Some("no-cache"));

    *cache_control.lock().unwrap() = "max-age=60".to_string();
    proxy.running.reload().unwrap();
    let after = curl(&url, &[]).await;
    assert_eq!(after.header("cache-control"), Some("max-age=60"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verified_copies_match_the_stages_while_the_site_changes() {
    let (v1, v2) = (corpus_file(SCRIPT_V1), corpus_file(SCRIPT_V2));
    let root = site(&[("app.js", &v1), ("note.txt", b"a short text")]);
    let proxy = start_root(root.path(), |c| {
        c.cache.prepared_verify = true;
        without_text_variants(c);
    })
    .await;
    let asks: [&[&str]; 6] = [
        &[],
        &["-H", "Accept-Encoding: br"],
        &["-H", "Accept-Encoding: gzip, zstd"],
        &["-I", "-H", "Accept-Encoding: br"],
        &["-H", "Range: bytes=10-99"],
        &["-H", "If-None-Match: \"nothing-held\""],
    ];
    for round in 0..8 {
        if round == 4 {
            std::fs::write(root.path().join("app.js"), &v2).unwrap();
        }
        let want = if round < 4 { &v1 } else { &v2 };
        for path in ["/app.js", "/note.txt", "/missing.js"] {
            for args in asks {
                let answer = curl(&proxy.url(path), args).await;
                if path == "/app.js" && args.is_empty() {
                    assert!(&answer.body == want, "round {round}");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(proxy.metric(VERIFIED).await > 0.0, "copies were verified");
    assert_eq!(proxy.metric(MISMATCH).await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pages_dictionary_links_are_read_again_when_the_stages_would_read_them() {
    let page = b"<!doctype html><html><head><title>t</title><script src=\"/app.js\"></script></head><body>".repeat(40);
    let root = site(&[("index.html", &page), ("app.js", &corpus_file(SCRIPT_V1))]);
    let proxy = start_root(root.path(), without_text_variants).await;
    let url = proxy.url("/");
    let args = ["-H", "Accept-Encoding: br"];
    let copy = until_prepared(&proxy, &url, &args).await;
    assert!(
        !copy.dictionary_links().is_empty(),
        "the page links its derived dictionary: {:?}",
        copy.headers
    );
    // The links are read from the store again once their memo expires (5 s): a copy
    // made from them stands no longer.
    tokio::time::sleep(Duration::from_millis(5_200)).await;
    let (sent, kept) = (proxy.metric(SENT).await, proxy.metric(KEPT).await);
    curl(&url, &args).await;
    assert_eq!(proxy.metric(SENT).await, sent, "answered by the stages");
    assert!(proxy.metric(KEPT).await > kept, "and kept again");
}

#[cfg(feature = "minify")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_with_variants_is_prepared_once_its_ladder_is_made() {
    let script = corpus_file(SCRIPT_V1);
    let root = site(&[("app.js", &script)]);
    let proxy = start_root(root.path(), |c| c.cache.prepared_verify = true).await;
    let url = proxy.url("/app.js");
    let mut listed = false;
    for _ in 0..200 {
        let answer = curl(&url, &["--compressed"]).await;
        assert_eq!(answer.status, 200);
        if answer.header("alternates").is_some() {
            listed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(listed, "the script's minified variant was made and offered");
    for _ in 0..5 {
        let answer = curl(&url, &["--compressed"]).await;
        assert!(answer.header("alternates").is_some());
    }
    // Kept once listed, and each repeat's choice checked against the stages'.
    assert!(proxy.metric(KEPT).await > 0.0);
    assert!(proxy.metric(VERIFIED).await > 0.0);
    assert_eq!(proxy.metric(MISMATCH).await, 0.0);
}
