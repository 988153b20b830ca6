//! Idle HTTP/1.1 connections parked outside hyper (`park`): whatever a client sends
//! and whenever, across a park or while one could happen, each request gets its own
//! answer, in order, whole. Real sockets on loopback, a raw client.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use support::{raw_origin, read_head, start_proxy, status_of, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Longer than the server's quiet period before it parks (`park::PARK_AFTER`).
const PARKING_PAUSE: Duration = Duration::from_millis(400);
/// How long a test waits for what must happen: generous, never a measure.
const GIVE_UP: Duration = Duration::from_secs(10);

/// An origin answering every request with `METHOD PATH BODY`, not to be cached.
async fn echo_origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = service_fn(|req: Request<Incoming>| async move {
                let head = format!("{} {} ", req.method(), req.uri().path());
                let body = req.into_body().collect().await.unwrap().to_bytes();
                let echo = [head.as_bytes(), &body].concat();
                let response = Response::builder()
                    .header("cache-control", "no-store")
                    .header("content-type", "application/octet-stream")
                    .body(Full::new(Bytes::from(echo)))
                    .unwrap();
                Ok::<_, Infallible>(response)
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    addr
}

/// An origin answering every request with `body`, cacheable for ten minutes.
async fn cacheable_origin(body: Bytes) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let body = body.clone();
            let service = service_fn(move |_: Request<Incoming>| {
                let response = Response::builder()
                    .header("cache-control", "max-age=600")
                    .header("content-type", "application/octet-stream")
                    .body(Full::new(body.clone()))
                    .unwrap();
                async move { Ok::<_, Infallible>(response) }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    addr
}

async fn proxy_of(origin: SocketAddr, tweak: impl FnOnce(&mut proxy::config::Config)) -> Proxy {
    start_proxy(&format!("http://{origin}"), tweak).await
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: example\r\n\r\n")
}

/// A raw HTTP/1.1 client that keeps what it read past one response for the next.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    async fn connect(proxy: &Proxy) -> Client {
        Client {
            stream: TcpStream::connect(proxy.running.addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Reads more into the buffer; false at the end of the stream.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(GIVE_UP, self.stream.read(&mut chunk))
            .await
            .expect("the server answers in time")
            .unwrap_or(0);
        self.buf.extend_from_slice(&chunk[..n]);
        n > 0
    }

    async fn take(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            assert!(self.fill().await, "the connection ended mid-response");
        }
        self.buf.drain(..n).collect()
    }

    async fn line(&mut self) -> Vec<u8> {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..at + 2).collect();
                return line[..at].to_vec();
            }
            assert!(self.fill().await, "the connection ended mid-response");
        }
    }

    /// One response: its status and body (by `Content-Length` or chunked).
    async fn response(&mut self) -> (u16, Vec<u8>) {
        let mut head = Vec::new();
        loop {
            let line = self.line().await;
            if line.is_empty() {
                break;
            }
            head.extend_from_slice(&line);
            head.extend_from_slice(b"\r\n");
        }
        let status = status_of(&head).expect("a status line");
        let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map(|v| v.trim().parse::<usize>().unwrap());
        let body = match length {
            Some(n) => self.take(n).await,
            None if head.contains("transfer-encoding: chunked") => {
                let mut body = Vec::new();
                loop {
                    let size = String::from_utf8(self.line().await).unwrap();
                    let size = usize::from_str_radix(size.trim(), 16).unwrap();
                    body.extend(self.take(size).await);
                    assert_eq!(self.take(2).await, b"\r\n");
                    if size == 0 {
                        break body;
                    }
                }
            }
            None => Vec::new(),
        };
        (status, body)
    }

    async fn expect(&mut self, echo: &str) {
        let (status, body) = self.response().await;
        assert_eq!(
            (status, String::from_utf8_lossy(&body).into_owned()),
            (200, echo.to_string())
        );
    }

    /// Whether the server closed the connection (read to its end, within `GIVE_UP`).
    async fn closed(&mut self) -> bool {
        let mut chunk = [0u8; 64];
        matches!(
            tokio::time::timeout(GIVE_UP, self.stream.read(&mut chunk)).await,
            Ok(Ok(0) | Err(_))
        )
    }
}

async fn parks(proxy: &Proxy) -> f64 {
    proxy.metric("wirefold_connection_parks_total").await
}

async fn parked_now(proxy: &Proxy) -> f64 {
    proxy.metric("wirefold_connections_parked ").await
}

/// Waits until the server has parked more than `before` times.
async fn parked_since(proxy: &Proxy, before: f64) -> f64 {
    let started = tokio::time::Instant::now();
    loop {
        let now = parks(proxy).await;
        if now > before {
            return now;
        }
        assert!(
            started.elapsed() < GIVE_UP,
            "the idle connection never parked"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_goes_on_across_parks() {
    let proxy = proxy_of(echo_origin().await, |_| {}).await;
    let mut client = Client::connect(&proxy).await;
    let mut seen = parks(&proxy).await;
    for n in 0..6 {
        client.send(get(&format!("/n{n}")).as_bytes()).await;
        client.expect(&format!("GET /n{n} ")).await;
        seen = parked_since(&proxy, seen).await;
        assert_eq!(parked_now(&proxy).await, 1.0);
    }
    // Requests in quick succession are answered too, parked between or not.
    for n in 0..20 {
        client.send(get(&format!("/q{n}")).as_bytes()).await;
        client.expect(&format!("GET /q{n} ")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    let proxy = proxy_of(echo_origin().await, |_| {}).await;
    let mut client = Client::connect(&proxy).await;
    for paths in [&["/a", "/b"][..], &["/c", "/d", "/e"]] {
        let before = parks(&proxy).await;
        let together: String = paths.iter().map(|p| get(p)).collect();
        client.send(together.as_bytes()).await;
        for path in paths {
            client.expect(&format!("GET {path} ")).await;
        }
        parked_since(&proxy, before).await;
    }
    // A second head cut short, then a pause long enough to park: the server holds the
    // part it read (it must not park), and answers the whole once the rest comes.
    let before = parks(&proxy).await;
    let first_and_part = format!("{}GET /g HTTP/1.1\r\nHo", get("/f"));
    client.send(first_and_part.as_bytes()).await;
    client.expect("GET /f ").await;
    tokio::time::sleep(PARKING_PAUSE).await;
    assert_eq!(
        parks(&proxy).await,
        before,
        "parked with a partial head read"
    );
    client.send(b"st: example\r\n\r\n").await;
    client.expect("GET /g ").await;
    // And a head split right before its empty line.
    client.send(b"GET /h HTTP/1.1\r\nHost: example\r\n").await;
    tokio::time::sleep(PARKING_PAUSE).await;
    client.send(b"\r\n").await;
    client.expect("GET /h ").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_ends_like_a_head_is_no_end_of_request() {
    let proxy = proxy_of(echo_origin().await, |_| {}).await;
    let mut client = Client::connect(&proxy).await;
    // The body ends with an empty line, as a head does.
    let body = "x=1\r\n\r\n";
    let post = format!(
        "POST /p HTTP/1.1\r\nHost: example\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    client.send(post.as_bytes()).await;
    client.expect(&format!("POST /p {body}")).await;
    client.send(get("/after-post").as_bytes()).await;
    client.expect("GET /after-post ").await;
    let seen = parked_since(&proxy, 0.0).await;
    // The body sent in two parts with a pause between, after a park.
    let head = "POST /q HTTP/1.1\r\nHost: example\r\nContent-Length: 15\r\n\r\nfirst\r\n\r\n";
    client.send(head.as_bytes()).await;
    tokio::time::sleep(PARKING_PAUSE).await;
    client.send(b"last\r\n").await;
    client.expect("POST /q first\r\n\r\nlast\r\n").await;
    client.send(get("/after").as_bytes()).await;
    client.expect("GET /after ").await;
    parked_since(&proxy, seen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_streamed_response_is_not_cut_by_parking() {
    const CHUNKS: [&str; 4] = ["one ", "two ", "three ", "four"];
    let origin = raw_origin(|mut stream| async move {
        while read_head(&mut stream).await.is_some() {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\
                        Cache-Control: no-store\r\nTransfer-Encoding: chunked\r\n\r\n";
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            for chunk in CHUNKS {
                // Each pause is longer than the server's quiet period before parking.
                tokio::time::sleep(PARKING_PAUSE).await;
                let framed = format!("{:x}\r\n{chunk}\r\n", chunk.len());
                if stream.write_all(framed.as_bytes()).await.is_err() {
                    return;
                }
            }
            let _ = stream.write_all(b"0\r\n\r\n").await;
        }
    })
    .await;
    let proxy = proxy_of(origin, |_| {}).await;
    let mut client = Client::connect(&proxy).await;
    for path in ["/stream", "/again"] {
        client.send(get(path).as_bytes()).await;
        let (status, body) = client.response().await;
        assert_eq!(
            (status, body),
            (200, CHUNKS.concat().into_bytes()),
            "{path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_connection_is_closed_after_the_header_timeout() {
    let proxy = proxy_of(echo_origin().await, |c| c.limits.header_timeout_ms = 1500).await;
    let mut client = Client::connect(&proxy).await;
    client.send(get("/once").as_bytes()).await;
    client.expect("GET /once ").await;
    parked_since(&proxy, 0.0).await;
    assert!(client.closed().await, "the parked connection stayed open");
    assert_eq!(parked_now(&proxy).await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_after_a_park_is_passed_through_and_never_parked() {
    let origin = raw_origin(|mut stream| async move {
        while let Some(head) = read_head(&mut stream).await {
            if !String::from_utf8_lossy(&head)
                .to_ascii_lowercase()
                .contains("upgrade: websocket")
            {
                let ok = "HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: 2\r\n\r\nok";
                if stream.write_all(ok.as_bytes()).await.is_err() {
                    return;
                }
                continue;
            }
            let switching = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                             Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
            if stream.write_all(switching.as_bytes()).await.is_err() {
                return;
            }
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = stream.read(&mut buf).await {
                if stream.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
            return;
        }
    })
    .await;
    let proxy = proxy_of(origin, |_| {}).await;
    let mut client = Client::connect(&proxy).await;
    client.send(get("/before").as_bytes()).await;
    let (status, body) = client.response().await;
    assert_eq!((status, body), (200, b"ok".to_vec()));
    parked_since(&proxy, 0.0).await;
    client
        .send(
            b"GET /chat HTTP/1.1\r\nHost: example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        )
        .await;
    let (status, _) = client.response().await;
    assert_eq!(status, 101);
    // Messages that end as a head does, each followed by a pause longer than the quiet
    // period: the upgraded stream reads through the same IO.
    for message in [&b"hello\r\n\r\n"[..], b"after a pause\r\n\r\n"] {
        client.send(message).await;
        assert_eq!(client.take(message.len()).await, message);
        tokio::time::sleep(PARKING_PAUSE).await;
    }
    client.send(b"still there").await;
    assert_eq!(client.take(11).await, b"still there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_parked_connections_at_once() {
    // Idle connections would be closed by the header timeout only long after.
    let proxy = proxy_of(echo_origin().await, |c| {
        c.limits.header_timeout_ms = 120_000
    })
    .await;
    let mut clients = Vec::new();
    for n in 0..3 {
        let mut client = Client::connect(&proxy).await;
        client.send(get(&format!("/{n}")).as_bytes()).await;
        client.expect(&format!("GET /{n} ")).await;
        clients.push(client);
    }
    let started = tokio::time::Instant::now();
    while parked_now(&proxy).await < 3.0 {
        assert!(
            started.elapsed() < GIVE_UP,
            "the idle connections never parked"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let Proxy {
        running,
        data: _data,
    } = proxy;
    // The grace period (30 s by default) is what a parked connection would hold
    // shutdown for, were it not closed at once.
    tokio::time::timeout(GIVE_UP, running.shutdown())
        .await
        .expect("shutdown with parked connections completes");
    for mut client in clients {
        assert!(client.closed().await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_the_client_reads_late_is_sent_whole() {
    // More than the socket buffers take while the client does not read: long past the
    // quiet period, the server still holds part of the response (its body still
    // being read, or in hyper's write buffer).
    let big: Bytes = (0..6u32 << 20).map(|i| (i % 251) as u8).collect();
    let origin = cacheable_origin(big.clone()).await;
    let proxy = proxy_of(origin, |_| {}).await;
    let mut client = Client::connect(&proxy).await;
    for _ in 0..3 {
        client.send(get("/big.bin").as_bytes()).await;
        tokio::time::sleep(PARKING_PAUSE * 2).await;
        let (status, body) = client.response().await;
        assert_eq!(status, 200);
        assert!(
            body == big,
            "the body was cut: {} of {} bytes",
            body.len(),
            big.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_cached_body_sent_from_its_file_arrives_whole_at_a_slow_reader() {
    // Large enough for the store to keep it in a file of its own, which the server then
    // sends with `sendfile` (`store::sendable`); a reader with a small buffer, late to
    // read, makes each `sendfile` send part of it and wait for room.
    let big: Bytes = (0..1u32 << 20).map(|i| (i % 253) as u8).collect();
    let origin = cacheable_origin(big.clone()).await;
    let proxy = proxy_of(origin, |_| {}).await;
    let mut first = Client::connect(&proxy).await;
    first.send(get("/big.bin").as_bytes()).await;
    assert_eq!(first.response().await, (200, big.to_vec()));
    support::metric_reaches(&proxy, "wirefold_store_sendable_files", 1.0).await;

    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut slow = Client {
        stream: socket.connect(proxy.running.addr).await.unwrap(),
        buf: Vec::new(),
    };
    // Two whole bodies and a range inside the file, pipelined.
    let range = "GET /big.bin HTTP/1.1\r\nHost: example\r\nRange: bytes=70000-900000\r\n\r\n";
    slow.send(format!("{}{range}{}", get("/big.bin"), get("/big.bin")).as_bytes())
        .await;
    // The server fills the small buffer and waits for room before anything is read.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(slow.response().await);
    }
    assert_eq!(answers[0], (200, big.to_vec()));
    assert_eq!(answers[1], (206, big[70000..=900000].to_vec()));
    assert_eq!(answers[2], (200, big.to_vec()));
}
