//! The proxy pair end to end: curl → `wirefold client` → link → `wirefold serve
//! --link` → origin, on loopback. Every answer must be the origin's current instance.

mod servers;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use servers::*;

/// A document with one line that names its version.
fn page(version: usize) -> String {
    let mut text = String::from("<!doctype html><title>pair</title>\n");
    for i in 0..3000 {
        if i == 1500 {
            text.push_str(&format!("<p>version {version}</p>\n"));
        }
        text.push_str(&format!(
            "<p>line {i} of a document that mostly stays</p>\n"
        ));
    }
    text
}

/// An origin (answering after `delay`) whose page is the version the test sets.
async fn versioned(delay: Duration) -> (TestOrigin, Arc<AtomicUsize>) {
    let version = Arc::new(AtomicUsize::new(1));
    let current = version.clone();
    let origin = slow_origin(delay, move |_| {
        let n = current.load(Ordering::SeqCst);
        let etag = format!("\"v{n}\"");
        let fields = [
            ("content-type", "text/html; charset=utf-8"),
            ("cache-control", "no-cache"),
            ("etag", etag.as_str()),
        ];
        response(200, &fields, page(n))
    })
    .await;
    (origin, version)
}

async fn get(pair: &Pair, url: &str) -> Curled {
    curl(url, &["-x", &pair.proxy(), "--noproxy", ""]).await
}

/// How many link responses the server proxy ended with `result`.
async fn server_outcome(server: &Proxy, result: &str) -> f64 {
    let text = String::from_utf8(curl(&server.admin_url("/metrics"), &[]).await.body).unwrap();
    metric(
        &text,
        &format!("wirefold_link_responses_total{{result=\"{result}\"}}"),
    )
}

#[tokio::test]
async fn curl_through_the_pair_gets_each_version_as_the_origin_changes() {
    let (origin, version) = versioned(Duration::ZERO).await;
    let pair = start_pair(|_| {}, |_| {}).await;
    let url = origin.url("/doc.html");

    let first = get(&pair, &url).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body, page(1).as_bytes());
    assert_eq!(
        first.header("content-type"),
        Some("text/html; charset=utf-8")
    );

    let again = get(&pair, &url).await;
    assert_eq!(again.body, page(1).as_bytes());
    assert_eq!(
        server_outcome(&pair.server, "confirm").await,
        1.0,
        "unchanged: confirmed, not resent"
    );

    version.store(2, Ordering::SeqCst);
    let changed = get(&pair, &url).await;
    assert_eq!(changed.body, page(2).as_bytes());
    assert_eq!(
        server_outcome(&pair.server, "delta").await,
        1.0,
        "changed: a delta against version 1"
    );
    assert_eq!(origin.hits(), 3, "no-cache: the origin is asked every time");
}

#[tokio::test]
async fn an_empty_client_gets_the_stale_instance_patched_while_a_slow_origin_answers() {
    let (origin, version) = versioned(Duration::from_millis(400)).await;
    let pair = start_pair(|_| {}, |c| c.keep_instances = 0).await;
    let url = origin.url("/doc.html");
    assert_eq!(get(&pair, &url).await.body, page(1).as_bytes());

    version.store(2, Ordering::SeqCst);
    let changed = get(&pair, &url).await;
    assert_eq!(
        changed.body,
        page(2).as_bytes(),
        "the stale version 1 is never shown"
    );
    let patched = server_outcome(&pair.server, "stale-delta").await
        + server_outcome(&pair.server, "stale-prefix-delta").await;
    assert_eq!(
        patched, 1.0,
        "version 1 went ahead as stale data, then a delta"
    );

    let unchanged = get(&pair, &url).await;
    assert_eq!(unchanged.body, page(2).as_bytes());
    assert_eq!(server_outcome(&pair.server, "stale-confirmed").await, 1.0);
}

/// A server proxy with a fixed certificate, so a restarted one is trusted again.
async fn link_server_at(listen: std::net::SocketAddr, tls: &tempfile::TempDir) -> Proxy {
    let data = tempfile::tempdir().unwrap();
    let mut config = test_config(data.path());
    config.listen = listen;
    config.link.enabled = true;
    // The origins are on loopback.
    config.link.destinations = proxy::destinations::Destinations::Any;
    config.tls.cert = Some(tls.path().join("cert.pem"));
    config.tls.key = Some(tls.path().join("key.pem"));
    let running = start_link_server(config).await;
    Proxy { running, data }
}

#[tokio::test]
async fn a_link_that_drops_fails_clearly_and_comes_back() {
    let (origin, _) = versioned(Duration::ZERO).await;
    let tls = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(tls.path().join("cert.pem"), cert.cert.pem()).unwrap();
    std::fs::write(tls.path().join("key.pem"), cert.signing_key.serialize_pem()).unwrap();
    let server = link_server_at("127.0.0.1:0".parse().unwrap(), &tls).await;
    let addr = server.running.addr;
    let client_data = tempfile::tempdir().unwrap();
    let client = client_proxy::start(client_proxy::ClientConfig {
        upstream: format!("https://localhost:{}", addr.port()),
        upstream_connect: Some(addr),
        upstream_ca: Some(tls.path().join("cert.pem")),
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: "127.0.0.1:0".parse().unwrap(),
        data_dir: client_data.path().to_path_buf(),
        ..Default::default()
    })
    .await
    .unwrap();
    let browse = |url: String| {
        let proxy = format!("http://{}", client.addr);
        async move { curl(&url, &["-x", &proxy, "--noproxy", ""]).await }
    };
    let url = origin.url("/doc.html");
    assert_eq!(browse(url.clone()).await.body, page(1).as_bytes());

    server.running.shutdown().await;
    let down = browse(url.clone()).await;
    assert_eq!(down.status, 502, "the server proxy is gone");
    let text = String::from_utf8_lossy(&down.body);
    assert!(text.contains("server proxy"), "the reason is named: {text}");

    let _back = link_server_at(addr, &tls).await;
    let again = browse(url).await;
    assert_eq!(
        again.status,
        200,
        "{}",
        String::from_utf8_lossy(&again.body)
    );
    assert_eq!(again.body, page(1).as_bytes());
}

/// A TCP relay to `target` that resets its first connection once `cut_after` bytes
/// have gone from the server to the client (both sides get an RST); later
/// connections pass untouched. Counts the connections it relayed.
async fn cutting_relay(
    target: std::net::SocketAddr,
    cut_after: usize,
) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
            tokio::spawn(async move {
                let Ok(mut server) = tokio::net::TcpStream::connect(target).await else {
                    return;
                };
                #[allow(deprecated)] // zero linger: closing sends RST, at once
                for stream in [&client, &server] {
                    let _ = stream.set_linger(Some(Duration::ZERO));
                }
                let (mut client_rd, mut client_wr) = client.split();
                let (mut server_rd, mut server_wr) = server.split();
                let up = tokio::io::copy(&mut client_rd, &mut server_wr);
                let down = async {
                    let mut buf = vec![0u8; 16 * 1024];
                    let mut sent = 0;
                    loop {
                        let n = match server_rd.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        let n = if first { n.min(cut_after - sent) } else { n };
                        if client_wr.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                        sent += n;
                        if first && sent == cut_after {
                            return;
                        }
                    }
                };
                tokio::select! {
                    _ = up => {}
                    () = down => {}
                }
            });
        }
    });
    (addr, connections)
}

#[tokio::test]
async fn a_link_cut_mid_frame_between_the_proxies_is_retried_and_both_keep_serving() {
    // Incompressible, so its DATA frame crosses the link at its full size, and the
    // cut (well past the TLS and HTTP/2 handshakes) falls inside it.
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let body: Vec<u8> = (0..200_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let served = body.clone();
    let origin = origin(move |_| {
        response(
            200,
            &[
                ("content-type", "application/octet-stream"),
                ("cache-control", "no-cache"),
            ],
            served.clone(),
        )
    })
    .await;
    let tls = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(tls.path().join("cert.pem"), cert.cert.pem()).unwrap();
    std::fs::write(tls.path().join("key.pem"), cert.signing_key.serialize_pem()).unwrap();
    let server = link_server_at("127.0.0.1:0".parse().unwrap(), &tls).await;
    let (relay, relayed) = cutting_relay(server.running.addr, 100_000).await;
    let client_data = tempfile::tempdir().unwrap();
    let client = client_proxy::start(client_proxy::ClientConfig {
        upstream: format!("https://localhost:{}", relay.port()),
        upstream_connect: Some(relay),
        upstream_ca: Some(tls.path().join("cert.pem")),
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: "127.0.0.1:0".parse().unwrap(),
        data_dir: client_data.path().to_path_buf(),
        ..Default::default()
    })
    .await
    .unwrap();
    let proxy = format!("http://{}", client.addr);
    let url = origin.url("/blob");

    let first = curl(&url, &["-x", &proxy, "--noproxy", ""]).await;
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    assert!(first.body == body, "the retry's answer, whole");
    assert_eq!(
        relayed.load(Ordering::SeqCst),
        2,
        "cut, then a new connection"
    );
    assert_eq!(
        origin.hits(),
        2,
        "each link request asked the origin (no-cache)"
    );

    let again = curl(&url, &["-x", &proxy, "--noproxy", ""]).await;
    assert_eq!(again.status, 200);
    assert!(again.body == body);
    assert_eq!(
        server_outcome(&server, "confirm").await,
        1.0,
        "the kept instance is the whole one: confirmed"
    );
    let client_metrics = String::from_utf8(
        curl(&format!("http://{}/metrics", client.admin_addr), &[])
            .await
            .body,
    )
    .unwrap();
    assert_eq!(
        metric(&client_metrics, "wirefold_client_link_reconnects_total"),
        1.0
    );
    client.shutdown().await;
}

#[tokio::test]
async fn head_through_the_pair_gets_the_length_without_the_body() {
    let (origin, _) = versioned(Duration::ZERO).await;
    let pair = start_pair(|_| {}, |_| {}).await;
    let url = origin.url("/doc.html");
    assert_eq!(get(&pair, &url).await.status, 200);
    let head = curl(&url, &["-I", "-x", &pair.proxy(), "--noproxy", ""]).await;
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("content-length"),
        Some(page(1).len().to_string().as_str())
    );
    // curl -I writes the head where the body would go; no document follows it.
    assert!(!String::from_utf8_lossy(&head.body).contains("<!doctype"));
    assert_eq!(
        server_outcome(&pair.server, "empty").await,
        1.0,
        "no body crossed the link"
    );
}

#[tokio::test]
async fn a_head_through_the_pair_leaves_no_empty_instance_behind() {
    // Found by the soak (bench/soak.sh): the client proxy kept a HEAD's instance,
    // which has no body, and served it empty to the GETs while it was fresh.
    let origin = slow_origin(Duration::ZERO, |_| {
        let fields = [
            ("content-type", "text/html; charset=utf-8"),
            ("cache-control", "max-age=3600"),
            ("etag", "\"kept\""),
        ];
        response(200, &fields, page(1))
    })
    .await;
    let pair = start_pair(|_| {}, |_| {}).await;
    let url = origin.url("/fresh.html");
    let head = curl(&url, &["-I", "-x", &pair.proxy(), "--noproxy", ""]).await;
    assert_eq!(head.status, 200);
    for _ in 0..2 {
        let got = get(&pair, &url).await;
        assert_eq!(got.status, 200);
        assert!(
            got.body == page(1).as_bytes(),
            "the whole page, not {} bytes",
            got.body.len()
        );
    }
}
