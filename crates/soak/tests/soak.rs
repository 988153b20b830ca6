//! Short soak runs on loopback. Through wirefold (a server in front of the soak
//! origin, and the proxy pair), every answer verifies; against an origin that
//! corrupts bodies, the driver finds them: the check cannot pass silently.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

use std::time::Duration;

use soak::drive::{DriveOptions, PairTarget};
use soak::origin::OriginOptions;
use soak::report::Report;
use soak::sample::Watched;

/// A server in a debug build cannot afford br 11 on pages that change every few
/// seconds: every profile gets the on-the-fly levels for cached bodies too.
fn cheap_levels(config: &mut proxy::Config) {
    for profile in &mut config.compression.profile {
        profile.cached = profile.on_the_fly.clone();
    }
}

fn this_process() -> Vec<Watched> {
    vec![Watched {
        name: "test".into(),
        pid: std::process::id(),
    }]
}

/// The last line's JSON, parsed, with the keys.
fn parsed_line(report: &Report) -> serde_json::Value {
    let line = report.json_line();
    let value: serde_json::Value = serde_json::from_str(&line).expect("the line is JSON");
    for key in [
        "requests",
        "wrong_bodies",
        "errors",
        "rss_mb",
        "fds",
        "p99_ms",
    ] {
        assert!(value.get(key).is_some(), "{key} in {line}");
    }
    value
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn through_wirefold_and_the_pair_every_body_verifies() {
    let origin = soak::origin::start("127.0.0.1:0".parse().unwrap(), OriginOptions::default())
        .await
        .unwrap();

    let direct_data = tempfile::tempdir().unwrap();
    let mut direct_config = proxy::Config {
        origin: Some(format!("http://{}", origin.addr)),
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: "127.0.0.1:0".parse().unwrap(),
        data_dir: direct_data.path().to_path_buf(),
        ..proxy::Config::default()
    };
    cheap_levels(&mut direct_config);
    let direct = link_server::start(direct_config)
        .await
        .expect("the server starts");

    let link_data = tempfile::tempdir().unwrap();
    let mut link_config = proxy::Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: "127.0.0.1:0".parse().unwrap(),
        data_dir: link_data.path().to_path_buf(),
        ..proxy::Config::default()
    };
    link_config.link.enabled = true;
    // The soak origin is on loopback.
    link_config.link.destinations = proxy::destinations::Destinations::Any;
    link_config.tls.self_signed = true;
    cheap_levels(&mut link_config);
    let link = link_server::start(link_config)
        .await
        .expect("the server proxy starts");
    let client_data = tempfile::tempdir().unwrap();
    let client = client_proxy::start(client_proxy::ClientConfig {
        upstream: format!("https://localhost:{}", link.addr.port()),
        upstream_connect: Some(link.addr),
        upstream_ca: Some(link_data.path().join("self-signed-cert.pem")),
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: "127.0.0.1:0".parse().unwrap(),
        data_dir: client_data.path().to_path_buf(),
        ..Default::default()
    })
    .await
    .expect("the client proxy starts");

    let report = soak::drive::run(DriveOptions {
        direct: Some(direct.addr),
        pair: Some(PairTarget {
            proxy: client.addr,
            origin: origin.addr,
        }),
        duration: Duration::from_secs(15),
        connections: 8,
        // Many hostile requests in a short run, so that most cases come up.
        hostile_share: 0.15,
        watch: this_process(),
        sample_every: Duration::from_secs(5),
        ..DriveOptions::default()
    })
    .await
    .expect("the run starts");

    let line = parsed_line(&report);
    assert_eq!(line["wrong_bodies"], 0, "{report:#?}");
    assert_eq!(report.wrong_bodies, 0);
    assert!(report.errors.is_empty(), "errors: {:#?}", report.examples);
    // Both routes answered, and correctly. (How much of the mix a 15 s debug run
    // reaches depends on the machine; bench/soak.sh reports it.)
    for kind in ["direct.plain", "pair.plain"] {
        let outcomes = report.kinds.get(kind).copied().unwrap_or_default();
        assert!(outcomes.correct > 0, "{kind}: {:?}", report.kinds);
    }
    assert!(!report.samples.is_empty());

    client.shutdown().await;
    link.shutdown().await;
    direct.shutdown().await;
}

#[tokio::test]
async fn a_corrupting_origin_is_caught() {
    let origin = soak::origin::start(
        "127.0.0.1:0".parse().unwrap(),
        OriginOptions {
            corrupt_one_in: Some(5),
        },
    )
    .await
    .unwrap();
    let report = soak::drive::run(DriveOptions {
        // Straight at the origin: nothing in between to blame or to hide it.
        direct: Some(origin.addr),
        duration: Duration::from_secs(2),
        connections: 2,
        hostile_share: 0.0,
        watch: this_process(),
        ..DriveOptions::default()
    })
    .await
    .expect("the run starts");
    let line = parsed_line(&report);
    assert!(report.wrong_bodies > 0, "{report:#?}");
    assert_eq!(line["wrong_bodies"], report.wrong_bodies);
    assert_eq!(line["errors"]["wrong_body"], report.wrong_bodies);
}
