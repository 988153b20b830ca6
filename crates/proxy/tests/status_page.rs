//! The status page on the admin listener: the page, its script, and the status it
//! draws after some traffic (bytes saved by mechanism and content type, hit rates,
//! top resources, origin latency, the configuration with its secrets redacted). The
//! drawing itself is checked in a browser (crates/cli/tests/chromium.rs).
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

mod support;

use std::time::Duration;

use serde_json::Value;
use support::*;

async fn status(proxy: &Proxy) -> Value {
    let r = curl(&proxy.admin_url("/status.json"), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    serde_json::from_slice(&r.body).expect("status.json is JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_shows_what_the_traffic_saved() {
    let page = "<p>the same words again and again</p>\n".repeat(300);
    let origin = origin(move |req| match req.uri().path() {
        "/page.html" => response(
            200,
            &[
                ("content-type", "text/html; charset=utf-8"),
                ("cache-control", "max-age=60"),
            ],
            page.clone(),
        ),
        _ => response(404, &[("content-type", "text/plain")], "no"),
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |c| {
        c.admin_token = Some("s3cret-admin".into());
    })
    .await;
    for coding in ["br", "br", "gzip"] {
        let r = curl(
            &proxy.url("/page.html"),
            &["-H", &format!("Accept-Encoding: {coding}")],
        )
        .await;
        assert_eq!(r.header("content-encoding"), Some(coding));
    }
    assert_eq!(curl(&proxy.url("/missing"), &[]).await.status, 404);

    // Records arrive as each response's body ends: wait for all four.
    let started = std::time::Instant::now();
    let status = loop {
        let status = status(&proxy).await;
        if status["requests"] == 4 {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    let mechanisms: Vec<&str> = status["saved_by_mechanism"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(
        mechanisms.contains(&"br") && mechanisms.contains(&"gzip"),
        "{mechanisms:?}"
    );
    let br = &status["saved_by_mechanism"][0];
    let values = br["values"].as_array().unwrap();
    assert_eq!(values.len(), status["minutes"].as_array().unwrap().len());
    let charted: u64 = values.iter().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(charted, br["total"].as_u64().unwrap());
    assert_eq!(status["saved_by_content_type"][0]["name"], "html");
    let totals = &status["totals"];
    assert!(totals["saved"].as_u64().unwrap() > 3 * 10_000, "{totals}");

    let cache: std::collections::HashMap<String, u64> =
        serde_json::from_value(status["cache"]["counts"].clone()).unwrap();
    // The origin's 404 is a miss too.
    assert_eq!((cache["miss"], cache["hit"]), (2, 2), "{cache:?}");
    assert_eq!(status["cache"]["hit_rate"].as_f64(), Some(0.5));
    let top = &status["top_resources"][0];
    assert!(
        top["name"].as_str().unwrap().ends_with("/page.html") && top["responses"] == 3,
        "{top}"
    );
    let latency = &status["origin"];
    assert_eq!(latency["exchanges"], 2, "the miss and the 404: {latency}");
    assert!(latency["mean_ms"].as_f64().unwrap() > 0.0, "{latency}");
    assert!(status["encoding_cache"]["hit_rate"].is_number());

    let config = status["config"].as_str().unwrap();
    assert!(
        config.contains("admin_token = \"(redacted)\"") && !config.contains("s3cret-admin"),
        "{config}"
    );
    assert!(config.contains(&format!("origin = \"{}\"", origin.url(""))));
}

#[tokio::test]
async fn the_page_and_its_script_come_from_the_admin_listener_alone() {
    let origin = origin(|_| response(200, &[], "x")).await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let page = curl(&proxy.admin_url("/"), &[]).await;
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let policy = page.header("content-security-policy").unwrap();
    assert!(
        policy.contains("default-src 'none'") && policy.contains("script-src 'self'"),
        "{policy}"
    );
    let html = String::from_utf8(page.body).unwrap();
    assert!(html.contains("<title>wirefold status</title>"));
    // The first status is inline, so the page draws without waiting for a fetch.
    let (_, inline) = html.split_once("id=\"initial-status\">").unwrap();
    let (inline, _) = inline.split_once("</script>").unwrap();
    let initial: Value = serde_json::from_str(inline).unwrap();
    assert!(initial["minutes"].is_array());
    // Nothing is loaded from elsewhere.
    for attribute in ["src=\"", "href=\""] {
        for reference in html.split(attribute).skip(1) {
            assert!(reference.starts_with('/'), "{attribute}{reference:.40}");
        }
    }

    let script = curl(&proxy.admin_url("/status.js"), &[]).await;
    assert_eq!(script.status, 200);
    assert_eq!(
        script.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert!(String::from_utf8(script.body)
        .unwrap()
        .contains("fetch(\"/status.json\""));
}
