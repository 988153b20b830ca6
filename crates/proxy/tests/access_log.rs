//! The access log end to end: the fields of a line for each way a response goes
//! (identity, br, a dictionary delta, a cache hit, a 304, HEAD), in both formats; a
//! path that cannot be opened; a writer that cannot keep up drops lines, counted,
//! and no response waits for it.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use base64::Engine;
use proxy::config::AccessFormat;
use sha2::Digest;
use support::*;

const SCRIPT_V1: &str = "assets/w3c__aria/common_script_aria-js/028.js";
const SCRIPT_V2: &str = "assets/w3c__aria/common_script_aria-js/029.js";

/// How long a line may take to appear before the test fails (it is not a measurement).
const PATIENCE: Duration = Duration::from_secs(20);

/// A line's fields, from either format.
#[derive(Debug, PartialEq)]
struct Logged {
    client: String,
    method: String,
    target: String,
    protocol: String,
    status: u16,
    bytes_sent: u64,
    original_bytes: u64,
    mechanism: Option<String>,
    cache: Option<String>,
    has_origin_time: bool,
    user_agent: Option<String>,
}

/// `ip - - [time] "METHOD target PROTO" status bytes "referer" "ua" key=value…`
fn parse_combined(line: &str) -> Logged {
    let (client, rest) = line.split_once(" - - [").expect("client");
    let (time, rest) = rest.split_once("] \"").expect("time");
    assert!(time.ends_with(" +0000") && time.len() == 26, "{time}");
    let (request, rest) = rest.split_once("\" ").expect("request");
    let mut request = request.split(' ');
    let (method, target, protocol) = (
        request.next().unwrap().to_string(),
        request.next().unwrap().to_string(),
        request.next().unwrap().to_string(),
    );
    let mut numbers = rest.splitn(3, ' ');
    let status = numbers.next().unwrap().parse().unwrap();
    let bytes_sent = numbers.next().unwrap().parse().unwrap();
    let rest = numbers.next().unwrap();
    let quoted: Vec<&str> = rest.split('"').collect();
    let (referer, user_agent, extra) = (quoted[1], quoted[3], quoted[4]);
    assert_eq!(referer, "-");
    let fields: HashMap<&str, &str> = extra
        .split_whitespace()
        .map(|kv| kv.split_once('=').expect("key=value"))
        .collect();
    let optional = |key: &str| Some(fields[key]).filter(|v| *v != "-").map(str::to_string);
    assert!(fields["total_time"].parse::<f64>().is_ok(), "{line}");
    Logged {
        client: client.to_string(),
        method,
        target,
        protocol,
        status,
        bytes_sent,
        original_bytes: fields["original"].parse().unwrap(),
        mechanism: optional("mechanism"),
        cache: optional("cache"),
        has_origin_time: optional("origin_time").is_some(),
        user_agent: Some(user_agent.to_string()).filter(|ua| ua != "-"),
    }
}

fn parse_json(line: &str) -> (Logged, serde_json::Value) {
    let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
    let text = |key: &str| v[key].as_str().map(str::to_string);
    assert!(v["total_seconds"].is_f64(), "{line}");
    assert!(
        text("time").is_some_and(|t| t.ends_with('Z') && t.len() == 24),
        "{line}"
    );
    let logged = Logged {
        client: text("client").unwrap(),
        method: text("method").unwrap(),
        target: text("target").unwrap(),
        protocol: text("protocol").unwrap(),
        status: v["status"].as_u64().unwrap() as u16,
        bytes_sent: v["bytes_sent"].as_u64().unwrap(),
        original_bytes: v["original_bytes"].as_u64().unwrap(),
        mechanism: text("mechanism"),
        cache: text("cache"),
        has_origin_time: v["origin_seconds"].is_f64(),
        user_agent: text("user_agent"),
    };
    (logged, v)
}

/// Waits until `path` holds at least `n` complete lines; returns them.
async fn lines(path: &Path, n: usize) -> Vec<String> {
    let started = std::time::Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let complete: Vec<String> = text
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .map(|l| l.trim_end().to_string())
            .collect();
        if complete.len() >= n {
            return complete;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "{} has {} lines, not {n}:\n{text}",
            path.display(),
            complete.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn sha256(data: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(data).into()
}

/// Six requests, each waited for in the log before the next: the lines written, and
/// the body bytes curl received for each.
async fn log_requests(format: AccessFormat) -> (Vec<String>, Vec<u64>) {
    let (v1, v2) = (corpus_file(SCRIPT_V1), corpus_file(SCRIPT_V2));
    let (js1, js2) = (v1.clone(), v2.clone());
    let origin = origin(move |req| {
        let (content_type, body) = match req.uri().path() {
            "/logo.png" => ("image/png", vec![0x89; 2000]),
            "/app.v1.js" => ("application/javascript", js1.clone()),
            "/app.v2.js" => ("application/javascript", js2.clone()),
            _ => return response(404, &[], ""),
        };
        let etag = format!("\"{}\"", hex::encode(&sha256(&body)[..8]));
        let fields = [
            ("content-type", content_type),
            ("cache-control", "max-age=3600"),
            ("etag", etag.as_str()),
        ];
        response(200, &fields, body)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let proxy = start_proxy(&origin.url(""), |c| {
        c.log.access = Some(log.clone());
        c.log.access_format = format;
    })
    .await;
    let br = ["-H", "Accept-Encoding: br"];

    let r = curl(&proxy.url("/logo.png"), &br).await;
    assert_eq!((r.status, r.body.len()), (200, 2000));
    lines(&log, 1).await;
    let first = curl(&proxy.url("/app.v1.js"), &br).await;
    assert_eq!(first.header("content-encoding"), Some("br"));
    lines(&log, 2).await;
    let hit = curl(&proxy.url("/app.v1.js"), &br).await;
    assert!(
        hit.header("cache-status")
            .is_some_and(|s| s.contains("hit")),
        "{:?}",
        hit.headers
    );
    lines(&log, 3).await;
    let etag = first.header("etag").unwrap();
    let not_modified = curl(
        &proxy.url("/app.v1.js"),
        &[
            "-H",
            "Accept-Encoding: br",
            "-H",
            &format!("If-None-Match: {etag}"),
        ],
    )
    .await;
    assert_eq!(not_modified.status, 304);
    lines(&log, 4).await;
    let available = format!(
        "Available-Dictionary: :{}:",
        base64::engine::general_purpose::STANDARD.encode(sha256(&v1))
    );
    let delta = curl(
        &proxy.url("/app.v2.js"),
        &["-H", "Accept-Encoding: br, dcz", "-H", &available],
    )
    .await;
    assert_eq!(delta.header("content-encoding"), Some("dcz"));
    lines(&log, 5).await;
    let head = curl(
        &proxy.url("/app.v1.js"),
        &["-I", "-H", "Accept-Encoding: br"],
    )
    .await;
    assert_eq!(head.status, 200);

    let written = lines(&log, 6).await;
    assert_eq!(written.len(), 6, "one line per request");
    let received = [
        2000,
        first.body.len(),
        hit.body.len(),
        0,
        delta.body.len(),
        0,
    ];
    assert!(received[4] * 5 < v2.len(), "the delta is small");
    (written, received.map(|n| n as u64).to_vec())
}

/// What each of the six lines must say, whatever the format.
fn check(logged: &[Logged], sent: &[u64]) {
    let (v1, v2) = (
        corpus_file(SCRIPT_V1).len() as u64,
        corpus_file(SCRIPT_V2).len() as u64,
    );
    let expected = [
        (
            "GET",
            "/logo.png",
            200,
            sent[0],
            2000,
            Some("identity"),
            Some("miss"),
            true,
        ),
        (
            "GET",
            "/app.v1.js",
            200,
            sent[1],
            v1,
            Some("br"),
            Some("miss"),
            true,
        ),
        (
            "GET",
            "/app.v1.js",
            200,
            sent[2],
            v1,
            Some("br"),
            Some("hit"),
            false,
        ),
        ("GET", "/app.v1.js", 304, 0, 0, None, Some("hit"), false),
        (
            "GET",
            "/app.v2.js",
            200,
            sent[4],
            v2,
            Some("dcz"),
            Some("miss"),
            true,
        ),
        (
            "HEAD",
            "/app.v1.js",
            200,
            0,
            0,
            Some("br"),
            Some("hit"),
            false,
        ),
    ];
    for (line, (method, target, status, bytes, original, mechanism, cache, origin)) in
        logged.iter().zip(expected)
    {
        let want = Logged {
            client: "127.0.0.1".into(),
            method: method.into(),
            target: target.into(),
            protocol: "HTTP/1.1".into(),
            status,
            bytes_sent: bytes,
            original_bytes: original,
            mechanism: mechanism.map(str::to_string),
            cache: cache.map(str::to_string),
            has_origin_time: origin,
            user_agent: line.user_agent.clone().filter(|ua| ua.starts_with("curl/")),
        };
        assert_eq!(line, &want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn combined_lines_say_how_each_response_went() {
    let (lines, sizes) = log_requests(AccessFormat::Combined).await;
    let logged: Vec<Logged> = lines.iter().map(|l| parse_combined(l)).collect();
    check(&logged, &sizes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_say_how_each_response_went() {
    let (lines, sizes) = log_requests(AccessFormat::Json).await;
    let parsed: Vec<(Logged, serde_json::Value)> = lines.iter().map(|l| parse_json(l)).collect();
    let v1 = corpus_file(SCRIPT_V1);
    let delta = &parsed[4].1;
    assert_eq!(delta["dictionary"], hex::encode(sha256(&v1)), "{delta}");
    assert_eq!(parsed[0].1["content_type"], "image/png");
    assert!(parsed[0].1["client_port"].as_u64().unwrap() > 0);
    let logged: Vec<Logged> = parsed.into_iter().map(|(l, _)| l).collect();
    check(&logged, &sizes);
}

/// nginx's convention: a client that leaves before the answer begins is logged 499.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_before_the_answer_is_logged_as_499() {
    use tokio::io::AsyncWriteExt;
    let origin = slow_origin(Duration::from_secs(3), |_| response(200, &[], "late")).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let proxy = start_proxy(&origin.url(""), |c| c.log.access = Some(log.clone())).await;
    let mut client = tokio::net::TcpStream::connect(proxy.running.addr)
        .await
        .unwrap();
    client
        .write_all(b"GET /slow HTTP/1.1\r\nHost: example.org\r\n\r\n")
        .await
        .unwrap();
    // Wait until the origin has the request, then leave.
    while origin.hits() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(client);
    let line = &lines(&log, 1).await[0];
    let logged = parse_combined(line);
    assert_eq!(
        (logged.status, logged.bytes_sent, logged.mechanism),
        (499, 0, None),
        "{line}"
    );
}

#[tokio::test]
async fn an_access_log_that_cannot_be_opened_stops_the_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for unopenable in [
        dir.path().join("no-such-dir/access.log"),
        dir.path().to_path_buf(),
    ] {
        let mut config = test_config(&dir.path().join("data"));
        config.origin = Some("http://127.0.0.1:1".into());
        config.log.access = Some(unopenable.clone());
        let Err(e) = proxy::start(config).await else {
            panic!("started with an access log at {}", unopenable.display());
        };
        let message = e.to_string();
        assert!(
            message.starts_with("`log.access`: cannot open ")
                && message.contains(&unopenable.display().to_string()),
            "{message}"
        );
    }
}

/// The log is a FIFO whose reader does not read: the writer blocks once the pipe is
/// full, the queue (one record) fills, and every later line is dropped and counted
/// while responses keep coming. Draining the pipe then gives every line not dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_cannot_keep_up_drops_lines_and_counts_them() {
    use tokio::io::AsyncReadExt;
    const REQUESTS: usize = 40;
    let origin = origin(|_| response(200, &[("content-type", "text/plain")], "ok")).await;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("access.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");
    // Opened for reading first, so the server's open for writing does not wait.
    let mut reader = tokio::net::unix::pipe::OpenOptions::new()
        .open_receiver(&fifo)
        .unwrap();
    let proxy = start_proxy(&origin.url(""), |c| {
        c.log.access = Some(fifo.clone());
        c.log.access_buffer = 1;
    })
    .await;

    // Lines of about 8 KiB: a few fill the pipe (64 KiB).
    let long_query = "q".repeat(8000);
    let mut args = vec!["-s".to_string(), "--fail".to_string()];
    for i in 0..REQUESTS {
        args.extend(["-o".into(), "/dev/null".into()]);
        args.push(proxy.url(&format!("/r{i}?{long_query}")));
    }
    let out = tokio::process::Command::new("curl")
        .args(&args)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "every response came while the log was stuck"
    );

    let dropped = || proxy.running.metrics.access_log.dropped.get() as usize;
    let mut text = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let started = std::time::Instant::now();
    let count = |text: &[u8]| text.iter().filter(|&&b| b == b'\n').count();
    while count(&text) + dropped() < REQUESTS {
        assert!(
            started.elapsed() < PATIENCE,
            "{} lines and {} dropped of {REQUESTS}",
            count(&text),
            dropped()
        );
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(100), reader.read(&mut buf)).await
        {
            text.extend_from_slice(&buf[..n]);
        }
    }
    let written = count(&text);
    eprintln!("{written} lines written, {} dropped", dropped());
    assert!(dropped() > 0, "{written} written, none dropped");
    assert_eq!(written + dropped(), REQUESTS);
    for line in String::from_utf8(text).unwrap().lines() {
        let logged = parse_combined(line);
        assert_eq!(logged.status, 200, "{line}");
        assert!(logged.target.ends_with(&long_query), "a whole line: {line}");
    }
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric(&metrics, "wirefold_access_log_dropped_total") as usize,
        dropped()
    );
}
