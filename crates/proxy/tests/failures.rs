//! Bad input, each with a clear outcome (issue 2, "Bad input"): malformed and
//! oversized request heads, slow clients, origins that refuse, reset, lie or stall,
//! a corrupt store, a full disk, undecodable and explosive bodies, shutdown while a
//! request is in flight, and `Upgrade` passed through. Real sockets on loopback.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{
    curl, dead_address, exchange, metric, metric_reaches, metrics_text, origin, raw_origin,
    read_head, response, start_proxy, status_of, Proxy,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// ---------------------------------------------------------------------------------
// helpers

/// A raw origin that counts connections and runs `script` on each after reading the
/// request head.
async fn counting_raw_origin<F, Fut>(script: F) -> (SocketAddr, Arc<AtomicUsize>)
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let count = Arc::new(AtomicUsize::new(0));
    let counter = count.clone();
    let script = Arc::new(script);
    let addr = raw_origin(move |mut stream| {
        let counter = counter.clone();
        let script = script.clone();
        async move {
            if read_head(&mut stream).await.is_none() {
                return;
            }
            counter.fetch_add(1, Ordering::SeqCst);
            script(stream).await;
        }
    })
    .await;
    (addr, count)
}

/// Closes with RST instead of FIN.
fn reset(stream: TcpStream) {
    #[allow(deprecated)] // zero linger does not block on drop
    let _ = stream.set_linger(Some(Duration::ZERO));
    drop(stream);
}

/// Distinct, incompressible-looking bytes for item `n`.
fn item_body(n: u32, len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ u64::from(n).wrapping_mul(0xD1B5_4A32_D192_ED03);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn body_text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

// ---------------------------------------------------------------------------------
// client-side bad input

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_request_head_gets_400_and_the_server_keeps_serving() {
    let origin = origin(|_| {
        response(
            200,
            &[
                ("content-type", "text/plain"),
                ("cache-control", "no-store"),
            ],
            "fine",
        )
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let garbage: [&[u8]; 4] = [
        b"\x01\x02 this is not http\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nX-\x01name: y\r\n\r\n",
        b"GET / HTTP/9.9 extra\r\nHost: x\r\n\r\n",
    ];
    for (i, request) in garbage.iter().enumerate() {
        let reply = exchange(proxy.running.addr, request).await;
        assert_eq!(
            status_of(&reply),
            Some(400),
            "request {i}: {:?}",
            body_text(&reply)
        );
        let ok = curl(&proxy.url("/"), &[]).await;
        assert_eq!(
            (ok.status, ok.body.as_slice()),
            (200, &b"fine"[..]),
            "after malformed request {i}"
        );
    }
    assert_eq!(
        origin.hits(),
        garbage.len(),
        "malformed requests never reach the origin"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_request_head_gets_431() {
    let origin = origin(|_| response(200, &[("cache-control", "no-store")], "fine")).await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let mut request = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    request.extend(std::iter::repeat_n(b'a', 100 * 1024));
    request.extend_from_slice(b"\r\n\r\n");
    let reply = exchange(proxy.running.addr, &request).await;
    assert_eq!(
        status_of(&reply),
        Some(431),
        "{:?}",
        body_text(&reply[..reply.len().min(200)])
    );

    // Many small fields adding up past the limit as well.
    let mut request = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
    for i in 0..90 {
        request.extend_from_slice(format!("X-Field-{i}: {}\r\n", "b".repeat(1000)).as_bytes());
    }
    request.extend_from_slice(b"\r\n");
    let reply = exchange(proxy.running.addr, &request).await;
    assert_eq!(
        status_of(&reply),
        Some(431),
        "{:?}",
        body_text(&reply[..reply.len().min(200)])
    );

    let ok = curl(&proxy.url("/"), &[]).await;
    assert_eq!(ok.status, 200);
    assert_eq!(origin.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_methods_content_types_and_statuses_do_not_grow_the_metrics() {
    // The origin labels each path with its own made-up media type, and answers
    // `/status/N` with the unregistered status 520 + N.
    let origin = origin(|req| {
        let path = req.uri().path();
        if let Some(n) = path.strip_prefix("/status/") {
            let status = 520 + n.parse::<u16>().unwrap();
            return response(status, &[("content-type", "text/plain")], "odd");
        }
        let content_type = format!("application/x-made-up{}", path.replace('/', "-"));
        response(200, &[("content-type", &content_type)], "fine")
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let metrics_lines = || async {
        let text = curl(&proxy.admin_url("/metrics"), &[]).await.body;
        String::from_utf8(text).unwrap().lines().count()
    };
    let exchange = |i: usize| {
        let url = proxy.url(&format!("/type/{i}"));
        let odd_status = proxy.url(&format!("/status/{i}"));
        async move {
            let method = format!("MADEUP{i}");
            curl(&url, &["-X", &method]).await;
            curl(&url, &[]).await;
            curl(&odd_status, &[]).await;
        }
    };
    // One of each first, so every label value the rest could map to exists already.
    exchange(0).await;
    let before = metrics_lines().await;
    for i in 1..=50 {
        exchange(i).await;
    }
    let after = metrics_lines().await;
    assert!(
        after <= before + 4,
        "50 made-up methods, content types and statuses grew /metrics from {before} to {after} lines"
    );
}

/// How a slow client's connection ended.
#[derive(Debug, PartialEq)]
enum Ending {
    /// The server closed it (EOF or reset), possibly after a 408.
    Closed,
    /// Still open when the test gave up.
    StillOpen,
}

/// Connects, sends `prefix`, then trickles `trickle` one byte per 100 ms; returns how
/// the connection ended within `give_up`, and when.
async fn slow_client(
    addr: SocketAddr,
    prefix: &'static [u8],
    trickle: &'static [u8],
    give_up: Duration,
) -> (Ending, Duration, Vec<u8>) {
    let started = Instant::now();
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = stream.into_split();
    let writer = tokio::spawn(async move {
        if wr.write_all(prefix).await.is_err() {
            return;
        }
        for b in trickle.iter().cycle() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if wr.write_all(&[*b]).await.is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    let ending = loop {
        match tokio::time::timeout(give_up.saturating_sub(started.elapsed()), rd.read(&mut buf))
            .await
        {
            Err(_) => break Ending::StillOpen,
            Ok(Ok(0)) | Ok(Err(_)) => break Ending::Closed,
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    };
    writer.abort();
    (ending, started.elapsed(), seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_at_the_header_timeout() {
    let origin = origin(|_| response(200, &[("cache-control", "no-store")], "fine")).await;
    let proxy = start_proxy(&origin.url(""), |c| c.limits.header_timeout_ms = 500).await;
    let addr = proxy.running.addr;
    let give_up = Duration::from_secs(5); // 10x the timeout: generous, never exact

    let cases: [(&str, &'static [u8], &'static [u8]); 4] = [
        (
            "partial head, then silence",
            b"GET / HTTP/1.1\r\nHost: x\r\n",
            b"",
        ),
        (
            "partial head, then a byte every 100 ms",
            b"GET / HTTP/1.1\r\nHost: x\r\n",
            b"X-Slow: aaaaaaaa\r\n",
        ),
        ("connected, nothing sent", b"", b""),
        (
            "part of the HTTP/2 preface, then silence",
            b"PRI * HTTP/2.0\r\n",
            b"",
        ),
    ];
    let clients: Vec<_> = cases
        .iter()
        .map(|(name, prefix, trickle)| {
            let (prefix, trickle) = (*prefix, *trickle);
            (
                *name,
                tokio::spawn(async move {
                    if trickle.is_empty() {
                        // No trickle: send the prefix and wait.
                        slow_client_silent(addr, prefix, give_up).await
                    } else {
                        slow_client(addr, prefix, trickle, give_up).await
                    }
                }),
            )
        })
        .collect();

    // Meanwhile, other clients are served.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..3 {
        let ok = curl(&proxy.url("/"), &[]).await;
        assert_eq!((ok.status, ok.body.as_slice()), (200, &b"fine"[..]));
    }

    let mut failures = Vec::new();
    for (name, client) in clients {
        let (ending, took, seen) = client.await.unwrap();
        if ending != Ending::Closed {
            failures.push(format!("{name}: still open after {took:?}"));
        } else if !seen.is_empty() {
            assert_eq!(
                status_of(&seen),
                Some(408),
                "{name}: only a 408 may precede the close: {:?}",
                body_text(&seen)
            );
        }
    }
    assert!(
        failures.is_empty(),
        "slow clients not cut off: {failures:#?}"
    );
    assert_eq!(origin.hits(), 3);
}

/// A new connection on which `/` has been asked for, to be closed after its answer.
async fn asking_once(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    stream
}

/// What `stream` receives until the server closes it; `what` fails the test when
/// that takes over ten seconds.
async fn read_to_close(stream: &mut TcpStream, what: &str) -> Vec<u8> {
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut received))
        .await
        .expect(what)
        .unwrap();
    received
}

/// At `limits.max_connections` the listener accepts no more until one closes: idle
/// connections cannot take every file descriptor, and the next client is answered
/// as soon as a place frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_limit_the_next_client_waits_for_a_place() {
    let origin = origin(|_| response(200, &[("cache-control", "no-store")], "fine")).await;
    let proxy = start_proxy(&origin.url(""), |c| c.limits.max_connections = 2).await;
    let addr = proxy.running.addr;
    // Two connections that have sent nothing yet: neither is idle between requests.
    let first = TcpStream::connect(addr).await.unwrap();
    let _second = TcpStream::connect(addr).await.unwrap();
    metric_reaches(&proxy, "wirefold_connections_open", 2.0).await;
    // The kernel completes the handshake (the listen backlog); the server does not
    // take the connection.
    let mut third = asking_once(addr).await;
    let mut answer = Vec::new();
    let waited =
        tokio::time::timeout(Duration::from_millis(500), third.read_to_end(&mut answer)).await;
    assert!(
        waited.is_err(),
        "answered beyond the limit: {}",
        body_text(&answer)
    );
    assert_eq!(proxy.metric("wirefold_connections_open").await, 2.0);
    assert_eq!(
        proxy.metric("wirefold_connection_limit_waits_total").await,
        1.0
    );
    drop(first);
    answer.extend(read_to_close(&mut third, "answered once a place freed").await);
    assert_eq!(status_of(&answer), Some(200), "{}", body_text(&answer));
}

/// At the limit an idle keep-alive connection gives way to a new client (its client
/// opens a new connection for its next request), as nginx's do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_limit_idle_connections_give_way() {
    let origin = origin(|_| response(200, &[("cache-control", "no-store")], "fine")).await;
    let proxy = start_proxy(&origin.url(""), |c| c.limits.max_connections = 2).await;
    let addr = proxy.running.addr;
    // The first is answered once and then idles (parked).
    let mut first = TcpStream::connect(addr).await.unwrap();
    first
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0; 12];
    first.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    metric_reaches(&proxy, "wirefold_connections_parked", 1.0).await;
    let _second = TcpStream::connect(addr).await.unwrap();
    metric_reaches(&proxy, "wirefold_connections_open", 2.0).await;
    // At the limit, but nobody waits: the idle one keeps its place.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(proxy.metric("wirefold_connections_parked").await, 1.0);
    let mut third = asking_once(addr).await;
    let answer = read_to_close(&mut third, "the idle connection gave its place").await;
    assert_eq!(status_of(&answer), Some(200), "{}", body_text(&answer));
    // The idle one was closed: the rest of its response, then the end.
    read_to_close(&mut first, "the idle connection is closed").await;
    assert_eq!(
        proxy.metric("wirefold_parked_closed_for_room_total").await,
        1.0
    );
    // Once more at the limit after the third was taken, perhaps.
    assert!(proxy.metric("wirefold_connection_limit_waits_total").await >= 1.0);
}

/// With no parked connection to close, an HTTP/2 connection answering nothing gives
/// way (GOAWAY) to a new client at the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_limit_an_idle_http2_connection_gives_way() {
    let origin = origin(|_| response(200, &[("cache-control", "no-store")], "fine")).await;
    let proxy = start_proxy(&origin.url(""), |c| c.limits.max_connections = 2).await;
    let addr = proxy.running.addr;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
    let mut connection = tokio::spawn(connection);
    let request = http::Request::get(proxy.url("/")).body(()).unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    while let Some(data) = body.data().await {
        data.unwrap();
    }
    let _silent = TcpStream::connect(addr).await.unwrap();
    // The HTTP/2 connection is under a second old (too young to close) when the
    // third arrives: room is asked for again while it waits.
    let mut third = asking_once(addr).await;
    let answer = read_to_close(&mut third, "the idle HTTP/2 connection gave its place").await;
    assert_eq!(status_of(&answer), Some(200), "{}", body_text(&answer));
    let ended = tokio::time::timeout(Duration::from_secs(10), &mut connection).await;
    assert!(
        matches!(ended, Ok(Ok(Ok(())))),
        "closed gracefully: {ended:?}"
    );
    assert_eq!(
        proxy.metric("wirefold_http2_closed_for_room_total").await,
        1.0
    );
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_on_the_admin_port_are_cut_off_at_the_header_timeout() {
    let origin = origin(|_| response(200, &[], "fine")).await;
    let proxy = start_proxy(&origin.url(""), |c| c.limits.header_timeout_ms = 500).await;
    let admin = proxy.running.admin_addr;
    let give_up = Duration::from_secs(5); // 10x the timeout: generous, never exact

    let silent = tokio::spawn(slow_client_silent(admin, b"", give_up));
    let partial = tokio::spawn(slow_client_silent(
        admin,
        b"GET /metrics HTTP/1.1\r\n",
        give_up,
    ));
    let trickle = tokio::spawn(slow_client(
        admin,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n",
        b"X-Slow: aaaaaaaa\r\n",
        give_up,
    ));
    // Meanwhile, the admin endpoint answers others.
    let healthy = curl(&proxy.admin_url("/healthz"), &[]).await;
    assert_eq!(healthy.status, 200);

    for (name, client) in [
        ("connected, nothing sent", silent),
        ("partial head, then silence", partial),
        ("partial head, then a byte every 100 ms", trickle),
    ] {
        let (ending, took, seen) = client.await.unwrap();
        assert_eq!(ending, Ending::Closed, "{name}: still open after {took:?}");
        if !seen.is_empty() {
            assert_eq!(
                status_of(&seen),
                Some(408),
                "{name}: {:?}",
                body_text(&seen)
            );
        }
    }
}

async fn slow_client_silent(
    addr: SocketAddr,
    prefix: &'static [u8],
    give_up: Duration,
) -> (Ending, Duration, Vec<u8>) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(prefix).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    let ending = loop {
        match tokio::time::timeout(
            give_up.saturating_sub(started.elapsed()),
            stream.read(&mut buf),
        )
        .await
        {
            Err(_) => break Ending::StillOpen,
            Ok(Ok(0)) | Ok(Err(_)) => break Ending::Closed,
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    };
    (ending, started.elapsed(), seen)
}

// ---------------------------------------------------------------------------------
// origin-side bad input

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_origin_connection_is_a_502_and_counted() {
    let proxy = start_proxy(&format!("http://{}", dead_address()), |_| {}).await;
    let fetched = curl(&proxy.url("/page"), &[]).await;
    assert_eq!(fetched.status, 502);
    let text = body_text(&fetched.body);
    assert!(text.starts_with("wirefold: origin unreachable"), "{text}");
    assert_eq!(fetched.header("cache-control"), Some("no-store"));
    // An uncacheable request takes the other path; it fails the same way.
    let posted = curl(&proxy.url("/form"), &["-X", "POST", "--data", "a=1"]).await;
    assert_eq!(posted.status, 502);
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric(&metrics, "wirefold_origin_errors_total{result=\"connect\"}"),
        2.0,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_reset_mid_body_is_a_502_and_not_cached() {
    let (addr, connections) = counting_raw_origin(|mut stream| async move {
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\
                    Cache-Control: max-age=3600\r\nContent-Length: 100000\r\n\r\n";
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(&[b'x'; 1000]).await;
        let _ = stream.flush().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        reset(stream);
    })
    .await;
    let proxy = start_proxy(&format!("http://{addr}"), |_| {}).await;
    for attempt in 1..=2 {
        let fetched = curl(&proxy.url("/big"), &[]).await;
        assert_eq!(
            fetched.status,
            502,
            "attempt {attempt}: {:?}",
            body_text(&fetched.body)
        );
        assert!(
            body_text(&fetched.body).starts_with("wirefold: "),
            "{:?}",
            body_text(&fetched.body)
        );
        assert_ne!(
            fetched.header("cache-status").map(|s| s.contains("hit")),
            Some(true)
        );
        assert_eq!(
            connections.load(Ordering::SeqCst),
            attempt,
            "each attempt goes to the origin"
        );
    }
    let metrics = metrics_text(&proxy).await;
    assert!(
        metric(&metrics, "wirefold_origin_errors_total{result=\"body\"}") >= 2.0,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_reset_mid_stream_aborts_the_client_transfer() {
    // Larger than the buffer: the head went out before the body failed, so the only
    // honest signal left is an aborted transfer, never a short body that looks complete.
    let (addr, connections) = counting_raw_origin(|mut stream| async move {
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\
                    Cache-Control: max-age=3600\r\nContent-Length: 100000\r\n\r\n";
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(&[b'x'; 30_000]).await;
        let _ = stream.flush().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        reset(stream);
    })
    .await;
    let proxy = start_proxy(&format!("http://{addr}"), |c| {
        c.limits.max_buffered_body = 16 * 1024
    })
    .await;
    for attempt in 1..=2 {
        let out = tokio::process::Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "--max-time",
                "10",
                "-w",
                "%{http_code} %{size_download}",
            ])
            .arg(proxy.url("/streamed"))
            .output()
            .await
            .unwrap();
        let report = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            !out.status.success(),
            "attempt {attempt}: curl must see the transfer fail, saw {report}"
        );
        assert_eq!(
            connections.load(Ordering::SeqCst),
            attempt,
            "nothing was cached"
        );
    }
    // Counted although the client had its head already.
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric(&metrics, "wirefold_origin_errors_total{result=\"body\"}"),
        2.0,
        "{metrics}"
    );
}

/// An origin whose first answer stalls: the head and the first `sent` bytes of
/// `body`, then silence on an open connection until the proxy hangs up. Later answers
/// are whole. Returns its address and how many requests it has answered.
async fn origin_stalling_once(body: Vec<u8>, sent: usize) -> (SocketAddr, Arc<AtomicUsize>) {
    let body = Arc::new(body);
    let answered = Arc::new(AtomicUsize::new(0));
    let counter = answered.clone();
    let (addr, _) = counting_raw_origin(move |mut stream| {
        let (body, counter) = (body.clone(), counter.clone());
        async move {
            let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\
                 Cache-Control: max-age=3600\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            if !first {
                let _ = stream.write_all(&body).await;
                return;
            }
            let _ = stream.write_all(&body[..sent]).await;
            let _ = stream.flush().await;
            // Silent, but open: only the proxy can end this exchange.
            let mut sink = [0u8; 1024];
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
        }
    })
    .await;
    (addr, answered)
}

/// The idle timeout the stalling origins run into: small, so the tests are quick.
const TEST_BODY_IDLE_TIMEOUT_MS: u64 = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_stalling_mid_body_is_a_504_and_not_cached() {
    let body = item_body(11, 100_000);
    let (addr, answered) = origin_stalling_once(body.clone(), 1000).await;
    let proxy = start_proxy(&format!("http://{addr}"), |c| {
        c.upstream.body_idle_timeout_ms = TEST_BODY_IDLE_TIMEOUT_MS
    })
    .await;
    // Nothing has gone to the client when the origin stalls: a 504 says so, and curl
    // returns (its own limit is 30 s) instead of waiting on the origin.
    let stalled = curl(&proxy.url("/stalls"), &[]).await;
    assert_eq!(stalled.status, 504, "{:?}", body_text(&stalled.body));
    let text = body_text(&stalled.body);
    assert!(
        text.starts_with("wirefold: origin stopped sending its body"),
        "{text}"
    );
    assert_eq!(stalled.header("cache-control"), Some("no-store"));

    let again = curl(&proxy.url("/stalls"), &[]).await;
    assert_eq!(again.status, 200);
    assert!(again.body == body, "the whole body, fetched again");
    assert_eq!(
        answered.load(Ordering::SeqCst),
        2,
        "the stalled body was not cached"
    );
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric(
            &metrics,
            "wirefold_origin_errors_total{result=\"body_timeout\"}"
        ),
        1.0,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_stalling_mid_stream_aborts_the_client_transfer() {
    // Larger than the buffer: the head and the first bytes are on their way to the
    // client when the origin stalls, so the transfer must end as an error.
    let body = item_body(12, 100_000);
    let (addr, answered) = origin_stalling_once(body.clone(), 30_000).await;
    let proxy = start_proxy(&format!("http://{addr}"), |c| {
        c.upstream.body_idle_timeout_ms = TEST_BODY_IDLE_TIMEOUT_MS;
        c.limits.max_buffered_body = 16 * 1024;
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new("curl")
        .args(["-s", "--max-time", "30", "-w", "%{http_code}", "-o"])
        .arg(dir.path().join("body"))
        .arg(proxy.url("/stalls"))
        .output()
        .await
        .unwrap();
    let received = std::fs::read(dir.path().join("body")).unwrap_or_default();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    assert!(
        !out.status.success(),
        "curl must see the transfer fail ({} of {} bytes received)",
        received.len(),
        body.len()
    );
    assert_ne!(
        out.status.code(),
        Some(28),
        "the proxy ended the transfer, not curl's own time limit"
    );
    assert!(received.len() < body.len());
    assert!(
        received[..] == body[..received.len()],
        "what came was right"
    );

    let again = curl(&proxy.url("/stalls"), &[]).await;
    assert_eq!(again.status, 200);
    assert!(again.body == body, "the whole body, fetched again");
    assert_eq!(
        answered.load(Ordering::SeqCst),
        2,
        "the stalled body was not cached"
    );
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric(
            &metrics,
            "wirefold_origin_errors_total{result=\"body_timeout\"}"
        ),
        1.0,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_origin_response_is_a_502() {
    let (addr, connections) = counting_raw_origin(|mut stream| async move {
        let _ = stream
            .write_all(b"HELLO THERE \x01\x02\r\nnonsense\r\n\r\n")
            .await;
        let _ = stream.shutdown().await;
    })
    .await;
    let proxy = start_proxy(&format!("http://{addr}"), |_| {}).await;
    let fetched = curl(&proxy.url("/x"), &[]).await;
    assert_eq!(fetched.status, 502, "{:?}", body_text(&fetched.body));
    let text = body_text(&fetched.body);
    assert!(
        text.starts_with("wirefold: origin sent an invalid response"),
        "{text}"
    );
    assert!(connections.load(Ordering::SeqCst) >= 1);
    let metrics = metrics_text(&proxy).await;
    assert!(
        metric(
            &metrics,
            "wirefold_origin_errors_total{result=\"protocol\"}"
        ) >= 1.0,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_content_length_is_a_502_and_nothing_is_cached() {
    let (addr, connections) = counting_raw_origin(|mut stream| async move {
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nCache-Control: max-age=3600\r\n\
                    Content-Length: 5000\r\n\r\n";
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(&[b'y'; 1000]).await;
        let _ = stream.shutdown().await; // FIN: the body is simply short
    })
    .await;
    let proxy = start_proxy(&format!("http://{addr}"), |_| {}).await;
    for attempt in 1..=2 {
        let fetched = curl(&proxy.url("/short"), &[]).await;
        assert_eq!(
            fetched.status,
            502,
            "attempt {attempt}: {:?}",
            body_text(&fetched.body)
        );
        assert_eq!(
            connections.load(Ordering::SeqCst),
            attempt,
            "nothing was cached"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_too_slow_for_the_head_is_a_504() {
    let (addr, _) = counting_raw_origin(|mut stream| async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nlate")
            .await;
    })
    .await;
    let proxy = start_proxy(&format!("http://{addr}"), |c| {
        c.upstream.header_timeout_ms = 300
    })
    .await;
    let fetched = curl(&proxy.url("/slow"), &[]).await;
    assert_eq!(fetched.status, 504, "{:?}", body_text(&fetched.body));
    let text = body_text(&fetched.body);
    assert!(
        text.starts_with("wirefold: origin did not answer"),
        "{text}"
    );
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric(&metrics, "wirefold_origin_errors_total{result=\"timeout\"}"),
        1.0,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_origin_gzip_is_a_502_and_not_cached() {
    let origin = origin(|_| {
        response(
            200,
            &[
                ("content-type", "text/plain"),
                ("content-encoding", "gzip"),
                ("cache-control", "max-age=3600"),
            ],
            &b"\x1f\x8b this is certainly not deflate data \x00\xff\xfe"[..],
        )
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let fetched = curl(&proxy.url("/doc"), &[]).await;
    assert_eq!(fetched.status, 502);
    let text = body_text(&fetched.body);
    assert!(text.contains("undecodable"), "{text}");
    // Even a client that accepts gzip gets no garbage, and nothing was cached.
    let again = curl(&proxy.url("/doc"), &["-H", "Accept-Encoding: gzip"]).await;
    assert_eq!(again.status, 502);
    assert_eq!(origin.hits(), 2);
}

/// gzip of 300 MiB of zeros (about 1.3 MiB), made by the reference tool.
fn gzip_bomb() -> Vec<u8> {
    let out = std::process::Command::new("sh")
        .args(["-c", "head -c 300M /dev/zero | gzip -1 -c"])
        .output()
        .expect("sh, head and gzip run");
    assert!(out.status.success());
    out.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decompression_bomb_fails_clearly() {
    let bomb = bytes::Bytes::from(gzip_bomb());
    assert!(bomb.len() < 2 << 20, "bomb is {} bytes", bomb.len());
    let served = bomb.clone();
    let origin = origin(move |_| {
        response(
            200,
            &[
                ("content-type", "text/plain"),
                ("content-encoding", "gzip"),
                ("cache-control", "max-age=3600"),
            ],
            served.clone(),
        )
    })
    .await;

    // Buffered (the encoded body fits the buffer): decoding stops at the limit, 502.
    let proxy = start_proxy(&origin.url(""), |c| c.limits.max_decoded_body = 10 << 20).await;
    let fetched = curl(&proxy.url("/bomb"), &[]).await;
    assert_eq!(fetched.status, 502, "{} body bytes", fetched.body.len());
    assert!(
        body_text(&fetched.body).contains("undecodable"),
        "{:?}",
        body_text(&fetched.body)
    );

    // Streamed (the encoded body exceeds the buffer): the stream is cut off with an
    // error, never ended as if complete.
    let proxy = start_proxy(&origin.url(""), |c| {
        c.limits.max_decoded_body = 10 << 20;
        c.limits.max_buffered_body = 64 * 1024;
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new("curl")
        .args(["-s", "-S", "--max-time", "30", "-o"])
        .arg(dir.path().join("body"))
        .args(["-w", "%{http_code}"])
        .arg(proxy.url("/bomb"))
        .output()
        .await
        .unwrap();
    let received = std::fs::metadata(dir.path().join("body"))
        .map(|m| m.len())
        .unwrap_or(0);
    let code = String::from_utf8_lossy(&out.stdout).into_owned();
    let clean_200 = out.status.success() && code == "200";
    eprintln!(
        "streamed bomb: curl {:?}, status {code}, {received} bytes received",
        out.status.code()
    );
    assert!(
        !clean_200,
        "a bomb must not end as a complete 200: curl {:?} code {code}, {received} bytes",
        out.status
    );
    assert!(
        received <= (11 << 20),
        "no more than the limit is sent: {received} bytes"
    );
}

/// The decode budget of the bombs' proxy: below the decoded limit, so every bomb
/// runs out of budget before it is found out (debug-built decoding is slow: small
/// limits keep the test quick).
const TEST_DECODE_BUDGET: usize = 2 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_gzip_bombs_fail_clearly_within_the_decode_budget() {
    const BOMBS: usize = 16;
    let bomb = bytes::Bytes::from(gzip_bomb());
    let origin = origin(move |req| {
        let (ct, body) = match req.uri().path() {
            "/fine" => ("text/plain", bytes::Bytes::from_static(b"still serving")),
            _ => ("text/plain", bomb.clone()),
        };
        let coding = if req.uri().path() == "/fine" {
            "identity"
        } else {
            "gzip"
        };
        response(
            200,
            &[
                ("content-type", ct),
                ("content-encoding", coding),
                ("cache-control", "no-store"),
            ],
            body,
        )
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |c| {
        c.limits.max_decoded_body = 4 << 20;
        c.limits.max_decoding_memory = TEST_DECODE_BUDGET;
    })
    .await;
    let url = proxy.url("/bomb");
    let bombs: Vec<_> = (0..BOMBS)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { curl(&url, &[]).await })
        })
        .collect();
    for bomb in bombs {
        let fetched = bomb.await.unwrap();
        assert_eq!(fetched.status, 502, "{}", body_text(&fetched.body));
        assert!(
            body_text(&fetched.body).contains("limits.max_decoded_body"),
            "the 502 names the limit: {:?}",
            body_text(&fetched.body)
        );
    }
    let fine = curl(&proxy.url("/fine"), &[]).await;
    assert_eq!(
        (fine.status, fine.body.as_slice()),
        (200, &b"still serving"[..])
    );

    let metrics = metrics_text(&proxy).await;
    let peak = metric(&metrics, "wirefold_decode_memory_peak_bytes ");
    assert!(peak > 0.0, "bombs were decoded into the budget");
    assert!(
        peak <= TEST_DECODE_BUDGET as f64,
        "decoded bytes held at once ({peak}) stay within the budget"
    );
    // Every bomb ran out of budget before it was found to exceed the limit; nothing
    // is held now.
    assert_eq!(
        metric(&metrics, "wirefold_decodes_unheld_total{reason=\"budget\"}"),
        BOMBS as f64
    );
    assert_eq!(metric(&metrics, "wirefold_decode_memory_bytes "), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_without_room_in_the_decode_budget_is_streamed_whole() {
    let content: Vec<u8> = (0..60_000u32)
        .flat_map(|i| format!("line {i} of a page that compresses well\n").into_bytes())
        .collect();
    assert!(content.len() > 2 << 20);
    let coded = bytes::Bytes::from(codec::compress(
        wirefold_http::ContentCoding::Gzip,
        6,
        &content,
    ));
    let origin = origin(move |_| {
        response(
            200,
            &[
                ("content-type", "text/plain"),
                ("content-encoding", "gzip"),
                ("cache-control", "max-age=3600"),
            ],
            coded.clone(),
        )
    })
    .await;
    // Room for less than the decoded body: it cannot be buffered, so it is not stored
    // either, and is sent decoded as a stream.
    let proxy = start_proxy(&origin.url(""), |c| c.limits.max_decoding_memory = 1 << 20).await;
    for _ in 0..2 {
        let fetched = curl(&proxy.url("/page"), &[]).await;
        assert_eq!(fetched.status, 200);
        assert!(fetched.body == content, "the whole content arrives decoded");
    }
    assert_eq!(origin.hits(), 2, "a body not buffered is not stored");
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric(&metrics, "wirefold_decodes_unheld_total{reason=\"budget\"}"),
        2.0
    );
    assert_eq!(metric(&metrics, "wirefold_decode_memory_bytes "), 0.0);
}

/// Reads one chunk of a chunked HTTP/1.1 body, discarding its bytes; its size, or
/// `None` at the last chunk.
async fn read_chunk(reader: &mut tokio::io::BufReader<TcpStream>) -> Option<usize> {
    use tokio::io::AsyncBufReadExt;
    let mut line = String::new();
    reader.read_line(&mut line).await.ok()?;
    let size = usize::from_str_radix(line.trim().split(';').next()?, 16).ok()?;
    if size == 0 {
        return None;
    }
    let mut left = size;
    let mut buf = vec![0u8; 64 * 1024];
    while left > 0 {
        let want = left.min(buf.len());
        let n = reader.read(&mut buf[..want]).await.ok()?;
        if n == 0 {
            return None;
        }
        left -= n;
    }
    let mut crlf = [0u8; 2];
    reader.read_exact(&mut crlf).await.ok()?;
    Some(size)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_gzip_body_is_decoded_for_a_slow_client_window_by_window() {
    // An endless gzip body (one member of 8 MiB of zeros, repeated): each member is
    // a few KiB that decode to 8 MiB.
    let member = bytes::Bytes::from(codec::compress(
        wirefold_http::ContentCoding::Gzip,
        9,
        &vec![0u8; 8 << 20],
    ));
    let written = Arc::new(AtomicUsize::new(0));
    let counter = written.clone();
    let origin = raw_origin(move |mut stream| {
        let (member, counter) = (member.clone(), counter.clone());
        async move {
            if read_head(&mut stream).await.is_none() {
                return;
            }
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-encoding: gzip\r\n\
                        transfer-encoding: chunked\r\n\r\n";
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            loop {
                let chunk = format!("{:x}\r\n", member.len());
                let sent = async {
                    stream.write_all(chunk.as_bytes()).await?;
                    stream.write_all(&member).await?;
                    stream.write_all(b"\r\n").await
                };
                if sent.await.is_err() {
                    return;
                }
                counter.fetch_add(member.len(), Ordering::SeqCst);
            }
        }
    })
    .await;
    let proxy = start_proxy(&format!("http://{origin}"), |c| {
        c.limits.max_buffered_body = 64 * 1024;
        c.limits.max_decoded_body = usize::MAX;
    })
    .await;

    // An identity client (no Accept-Encoding) that reads 16 MiB, then stops reading.
    let mut client = TcpStream::connect(proxy.running.addr).await.unwrap();
    client
        .write_all(b"GET /endless HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let head = read_head(&mut client).await.expect("a response head");
    let head = String::from_utf8_lossy(&head).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    let mut reader = tokio::io::BufReader::new(client);
    let (mut received, mut largest) = (0, 0);
    while received < 16 << 20 {
        let size = read_chunk(&mut reader).await.expect("the body goes on");
        received += size;
        largest = largest.max(size);
    }
    // Each chunk is one piece of decoded output the proxy held at once: a window (and
    // the codec's one step past it), never what a whole coded chunk decodes to.
    assert!(
        largest <= 2 * 64 * 1024,
        "decoded output goes out in windows: a chunk of {largest} bytes"
    );
    // The client reads no more: the proxy stops reading the origin, which stops once
    // the socket buffers between them are full.
    let mut before = written.load(Ordering::SeqCst);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = written.load(Ordering::SeqCst);
        if now == before || now >= 64 << 20 {
            before = now;
            break;
        }
        before = now;
    }
    assert!(
        before < 64 << 20,
        "the origin was read {before} bytes ahead of a client that took {received} decoded"
    );
    drop(reader);
}

// ---------------------------------------------------------------------------------
// the store

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_store_index_refuses_to_start_and_is_left_alone() {
    let data = tempfile::tempdir().unwrap();
    let store_dir = data.path().join("store");
    std::fs::create_dir_all(&store_dir).unwrap();
    let index = store_dir.join("index.redb");
    let garbage: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&index, &garbage).unwrap();

    let mut config = support::test_config(data.path());
    config.origin = Some(format!("http://{}", dead_address()));
    let err = match proxy::start(config).await {
        Ok(_) => panic!("a corrupt index must stop the start"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(&index.display().to_string()),
        "the error names the file: {err}"
    );
    assert_eq!(
        std::fs::read(&index).unwrap(),
        garbage,
        "the corrupt file is left untouched"
    );
}

/// Every file under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_blob_file_after_restart_is_refetched_never_served() {
    let origin = origin(|_| {
        response(
            200,
            &[
                ("content-type", "application/octet-stream"),
                ("cache-control", "max-age=3600"),
            ],
            item_body(7, 20_000),
        )
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_path_buf();
    let proxy = start_proxy(&origin.url(""), {
        let d = data_dir.clone();
        move |c| c.data_dir = d
    })
    .await;
    let first = curl(&proxy.url("/blob"), &[]).await;
    assert_eq!(first.status, 200);
    let Proxy {
        running,
        data: _unused,
    } = proxy;
    running.shutdown().await;

    // Same length, different bytes: only the hash check on read can tell.
    let blobs = files_under(&data_dir.join("store").join("blobs"));
    assert!(!blobs.is_empty(), "the body was stored");
    for blob in &blobs {
        let mut bytes = std::fs::read(blob).unwrap();
        bytes[100] ^= 0xff;
        std::fs::write(blob, bytes).unwrap();
    }

    let proxy = start_proxy(&origin.url(""), move |c| c.data_dir = data_dir).await;
    let again = curl(&proxy.url("/blob"), &[]).await;
    assert_eq!(again.status, 200);
    assert!(
        again.body == item_body(7, 20_000),
        "never the damaged bytes"
    );
    assert_eq!(
        origin.hits(),
        2,
        "the damaged copy was dropped and the origin asked again"
    );
}

/// Unmounts the tmpfs even when the test panics.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_full_while_caching_serves_anyway() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=300k", "tmpfs"])
        .arg(&data)
        .output();
    match mounted {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            return eprintln!(
                "SKIP disk_full_while_caching_serves_anyway: mount failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        }
        Err(e) => return eprintln!("SKIP disk_full_while_caching_serves_anyway: mount: {e}"),
    }
    let _guard = Mounted(data.clone());

    const LEN: usize = 100 * 1024;
    let origin = origin(|req| {
        let n: u32 = req
            .uri()
            .path()
            .trim_start_matches("/item/")
            .parse()
            .unwrap_or(0);
        response(
            200,
            &[
                ("content-type", "application/octet-stream"),
                ("cache-control", "max-age=3600"),
            ],
            item_body(n, LEN),
        )
    })
    .await;
    let data_dir = data.clone();
    let proxy = start_proxy(&origin.url(""), move |c| c.data_dir = data_dir).await;
    const ITEMS: u32 = 12;
    for n in 0..ITEMS {
        let fetched = curl(&proxy.url(&format!("/item/{n}")), &[]).await;
        assert_eq!(fetched.status, 200, "item {n}");
        assert!(
            fetched.body == item_body(n, LEN),
            "item {n}: body differs ({} bytes)",
            fetched.body.len()
        );
    }
    assert_eq!(origin.hits(), ITEMS as usize);
    let metrics = metrics_text(&proxy).await;
    assert!(
        metric(&metrics, "wirefold_store_write_errors_total") > 0.0,
        "{metrics}"
    );

    // What was cached before the disk filled is still served from the cache.
    let first = curl(&proxy.url("/item/0"), &[]).await;
    assert_eq!(first.status, 200);
    assert!(first.body == item_body(0, LEN));
    assert!(
        first
            .header("cache-status")
            .is_some_and(|s| s.contains("hit")),
        "item 0 served from the cache: {:?}",
        first.header("cache-status")
    );
    assert_eq!(origin.hits(), ITEMS as usize);
    // And what could not be cached is served from the origin, right.
    let last = curl(&proxy.url(&format!("/item/{}", ITEMS - 1)), &[]).await;
    assert_eq!(last.status, 200);
    assert!(last.body == item_body(ITEMS - 1, LEN));
    let Proxy {
        running,
        data: _data,
    } = proxy;
    running.shutdown().await;
}

// ---------------------------------------------------------------------------------
// shutdown and upgrade

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_in_flight_requests_and_refuses_new_ones() {
    let body: &'static [u8] = b"slow but complete";
    let (addr, _) = counting_raw_origin(move |mut stream| async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let head = format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nCache-Control: no-store\r\nContent-Length: {}\r\n\r\n", body.len());
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(body).await;
        let _ = stream.flush().await;
    })
    .await;
    let proxy = start_proxy(&format!("http://{addr}"), |_| {}).await;
    let url = proxy.url("/slow");
    let proxy_addr = proxy.running.addr;
    let in_flight = tokio::spawn(async move { curl(&url, &[]).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let Proxy {
        running,
        data: _data,
    } = proxy;
    tokio::time::timeout(Duration::from_secs(20), running.shutdown())
        .await
        .expect("shutdown drains in time");
    let fetched = in_flight.await.unwrap();
    assert_eq!(fetched.status, 200);
    assert_eq!(fetched.body, body);
    assert!(
        TcpStream::connect(proxy_addr).await.is_err(),
        "no new connections after shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrade_passes_through() {
    let (addr, _) = counting_raw_origin(|mut stream| async move {
        let head =
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                    Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
        if stream.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if stream.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    })
    .await;
    let proxy = start_proxy(&format!("http://{addr}"), |_| {}).await;
    let mut client = TcpStream::connect(proxy.running.addr).await.unwrap();
    client
        .write_all(
            b"GET /chat HTTP/1.1\r\nHost: example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        )
        .await
        .unwrap();
    let head = tokio::time::timeout(Duration::from_secs(5), read_head(&mut client))
        .await
        .expect("101 in time")
        .expect("a response head");
    let head = String::from_utf8_lossy(&head).into_owned();
    assert_eq!(status_of(head.as_bytes()), Some(101), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("upgrade: websocket"),
        "{head}"
    );
    for message in [&b"hello through the proxy"[..], &[0u8, 1, 2, 255, 254][..]] {
        client.write_all(message).await.unwrap();
        let mut echoed = vec![0u8; message.len()];
        tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut echoed))
            .await
            .expect("echo in time")
            .unwrap();
        assert_eq!(echoed, message);
    }
    // The upgraded connection keeps its place among `limits.max_connections` (the
    // copy holds it) until it closes.
    assert_eq!(proxy.metric("wirefold_connections_open").await, 1.0);
    drop(client);
    for _ in 0..100 {
        if proxy.metric("wirefold_connections_open").await == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(proxy.metric("wirefold_connections_open").await, 0.0);
}
