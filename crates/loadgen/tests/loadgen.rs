//! Both modes against small HTTP/1.1 servers started here on loopback: what is
//! counted, what is refused, and that a stalled server shows in the latency of the
//! requests queued behind it (coordinated omission corrected). No timing is asserted
//! except bounds that follow from causality: an answer cannot come before it is sent.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use loadgen::idle::{self, IdleOptions};
use loadgen::rate::{self, RateOptions};
use loadgen::schedule::Schedule;
use loadgen::target::Target;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How the test server answers.
#[derive(Clone, Copy)]
enum Behaviour {
    Ok,
    Unavailable,
    /// Answers, then closes the connection.
    CloseAfter,
    /// Holds every answer until the test adds permits to `release`.
    Stalled,
}

const BODY: &[u8] = &[b'x'; 1000];

struct TestServer {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    /// The `accept-encoding` of every request.
    seen: Arc<Mutex<Vec<String>>>,
    first_request: Arc<Mutex<Option<Instant>>>,
    release: Arc<Semaphore>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

async fn serve(behaviour: Behaviour) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let first_request = Arc::new(Mutex::new(None));
    let release = Arc::new(Semaphore::new(0));
    let accepting = {
        let (connections, requests, seen, first_request, release) = (
            connections.clone(),
            requests.clone(),
            seen.clone(),
            first_request.clone(),
            release.clone(),
        );
        tokio::spawn(async move {
            let mut open = tokio::task::JoinSet::new();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                connections.fetch_add(1, Ordering::SeqCst);
                let (requests, seen, first_request, release) = (
                    requests.clone(),
                    seen.clone(),
                    first_request.clone(),
                    release.clone(),
                );
                let service = service_fn(move |req: Request<Incoming>| {
                    requests.fetch_add(1, Ordering::SeqCst);
                    first_request
                        .lock()
                        .unwrap()
                        .get_or_insert_with(Instant::now);
                    let ae = req
                        .headers()
                        .get("accept-encoding")
                        .map(|v| v.to_str().unwrap().to_string())
                        .unwrap_or_default();
                    seen.lock().unwrap().push(ae);
                    let release = release.clone();
                    async move {
                        let mut response = Response::new(Full::new(Bytes::from_static(BODY)));
                        match behaviour {
                            Behaviour::Ok => {}
                            Behaviour::Unavailable => {
                                *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE
                            }
                            Behaviour::CloseAfter => {
                                response
                                    .headers_mut()
                                    .insert("connection", "close".parse().unwrap());
                            }
                            Behaviour::Stalled => release.acquire().await.unwrap().forget(),
                        }
                        Ok::<_, Infallible>(response)
                    }
                });
                // Connections end with the accept loop (the test's end).
                open.spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        })
    };
    TestServer {
        addr,
        connections,
        requests,
        seen,
        first_request,
        release,
        accepting,
    }
}

fn url(server: &TestServer) -> String {
    format!("http://{}/page.html", server.addr)
}

#[tokio::test]
async fn every_scheduled_request_is_sent_with_its_fields_and_answered() {
    let server = serve(Behaviour::Ok).await;
    let target = Target::from_url(&url(&server), &["Accept-Encoding: gzip, br".into()]).unwrap();
    let schedule = Schedule::new(400.0, Duration::from_millis(250), 4).unwrap();
    let report = rate::run(RateOptions {
        target,
        schedule,
        drain: Duration::from_secs(30),
    })
    .await;
    assert_eq!(schedule.count(), 100);
    assert_eq!(
        (
            report.answered,
            report.failed,
            report.non_2xx,
            report.unfinished()
        ),
        (100, 0, 0, 0)
    );
    assert_eq!(report.latency.count(), 100);
    assert_eq!(report.dispatch_lag.count(), 100);
    assert_eq!(report.body_bytes_per_answer(), BODY.len() as u64);
    assert_eq!(server.requests.load(Ordering::SeqCst), 100);
    // Kept alive: the four connections opened before the start carried everything.
    assert_eq!(server.connections.load(Ordering::SeqCst), 4);
    assert!(server
        .seen
        .lock()
        .unwrap()
        .iter()
        .all(|ae| ae == "gzip, br"));

    let json = report.json(&url(&server));
    assert_eq!(json["answered"], 100);
    assert_eq!(json["scheduled"], 100);
    assert!(json["latency_ms"]["p99.9"].is_number());
    assert!(report.text(&url(&server)).contains("p99.9"));
}

#[tokio::test]
async fn a_stalled_server_shows_in_the_latency_of_the_requests_queued_behind_it() {
    let server = serve(Behaviour::Stalled).await;
    let target = Target::from_url(&url(&server), &[]).unwrap();
    // One connection, 50 requests due 10 ms apart; the server holds the first answer
    // until the schedule is over, so the other 49 wait on the connection.
    let schedule = Schedule::new(100.0, Duration::from_millis(500), 1).unwrap();
    let run = tokio::spawn(rate::run(RateOptions {
        target,
        schedule,
        drain: Duration::from_secs(30),
    }));
    while server.first_request.lock().unwrap().is_none() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    // Taken before the release, so no answer can come before it.
    let released = Instant::now();
    server.release.add_permits(schedule.count() as usize);
    let report = run.await.unwrap();
    assert_eq!((report.answered, report.unfinished()), (50, 0));
    // Request i was due at most i × 10 ms after the first arrived (the start is no
    // later than that), and answered after the release: so the k-th smallest latency
    // is at least the stall minus (50 - k) × 10 ms. Measured from when each was sent,
    // 49 of them would be near zero.
    let first = server.first_request.lock().unwrap().unwrap();
    let stall = released - first;
    let p50_bound = stall.saturating_sub(Duration::from_millis(250));
    let p50 = Duration::from_secs_f64(report.latency.summary().p50 / 1000.0);
    assert!(
        p50 >= p50_bound.saturating_sub(Duration::from_millis(1)),
        "p50 {p50:?} below {p50_bound:?} after a {stall:?} stall"
    );
    assert!(report.latency.summary().max * 1000.0 >= stall.as_micros() as f64 * 0.999);
}

#[tokio::test]
async fn answers_that_are_not_2xx_are_counted_apart() {
    let server = serve(Behaviour::Unavailable).await;
    let target = Target::from_url(&url(&server), &[]).unwrap();
    let schedule = Schedule::new(200.0, Duration::from_millis(100), 2).unwrap();
    let report = rate::run(RateOptions {
        target,
        schedule,
        drain: Duration::from_secs(30),
    })
    .await;
    assert_eq!(
        (report.answered, report.non_2xx, report.failed),
        (20, 20, 0)
    );
}

#[tokio::test]
async fn a_server_that_is_not_there_fails_every_request_by_name() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/");
    let target = Target::from_url(&url, &[]).unwrap();
    let schedule = Schedule::new(100.0, Duration::from_millis(100), 2).unwrap();
    let report = rate::run(RateOptions {
        target,
        schedule,
        drain: Duration::from_secs(30),
    })
    .await;
    assert_eq!((report.answered, report.failed), (0, 10));
    let failure = report.first_error.unwrap();
    assert!(failure.starts_with("connect to 127.0.0.1:"), "{failure}");
}

#[tokio::test]
async fn idle_connections_are_opened_answered_and_held() {
    let server = serve(Behaviour::Ok).await;
    let target = Target::from_addr(
        &server.addr.to_string(),
        "/page.html",
        &["accept-encoding: br".into()],
    )
    .unwrap();
    let mut announced = None;
    let report = idle::run(
        IdleOptions {
            target,
            connections: 40,
            hold: Duration::from_millis(200),
            open_at_once: 8,
        },
        |opened| announced = Some(opened.clone()),
    )
    .await
    .unwrap();
    let announced = announced.unwrap();
    assert_eq!((announced.established, announced.failed), (40, 0));
    assert_eq!(report.closed_by_server, 0);
    assert_eq!(report.open_at_end(), 40);
    assert!(report.complete());
    assert_eq!(server.connections.load(Ordering::SeqCst), 40);
    assert_eq!(server.requests.load(Ordering::SeqCst), 40);
    assert!(server.seen.lock().unwrap().iter().all(|ae| ae == "br"));
    assert_eq!(
        report.json(&server.addr.to_string())["body_bytes_per_answer"],
        1000
    );
}

#[tokio::test]
async fn connections_the_server_closes_are_counted_and_the_run_is_incomplete() {
    let server = serve(Behaviour::CloseAfter).await;
    let target = Target::from_addr(&server.addr.to_string(), "/", &[]).unwrap();
    let report = idle::run(
        IdleOptions {
            target,
            connections: 10,
            hold: Duration::from_millis(500),
            open_at_once: 10,
        },
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(report.opened.established, 10);
    assert_eq!(report.closed_by_server, 10);
    assert!(!report.complete());
}
