//! Headless Chromium end to end: compression dictionaries (RFC 9842) as a real
//! browser uses them through wirefold.
//!
//! Chromium talks to a small recording TCP relay in front of wirefold, so the tests
//! see Chromium's own requests (`Available-Dictionary`, `Accept-Encoding`) and
//! wirefold's responses (`Content-Encoding: dcz|dcb`) byte for byte, and check with
//! `--dump-dom` that the page ran what the new version computes.
//!
//! Needs `chromium` (Debian package; scripts/test.sh installs it). Without it the
//! tests fail, unless `WIREFOLD_SKIP_BROWSER=1` is set.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

mod servers;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use servers::*;
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const SCRIPT_V1: &str = "assets/w3c__aria/common_script_aria-js/028.js";
const SCRIPT_V2: &str = "assets/w3c__aria/common_script_aria-js/029.js";
const PAGE_V1: &str = "html/w3c__manifest/index-html--recent/028.html";
const PAGE_V2: &str = "html/w3c__manifest/index-html--recent/029.html";

/// One Chromium at a time: it is slow to start on small machines.
static BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long one Chromium run may take before it is killed and the test fails.
const RUN_LIMIT: Duration = Duration::from_secs(45);

// ---------------------------------------------------------------------------
// Chromium

/// The Chromium executable, or `None` (test skipped) when WIREFOLD_SKIP_BROWSER=1.
/// Panics when Chromium is missing: a browser test must not pass silently.
fn chromium() -> Option<PathBuf> {
    if std::env::var("WIREFOLD_SKIP_BROWSER").is_ok_and(|v| v == "1") {
        eprintln!("skipped: WIREFOLD_SKIP_BROWSER=1");
        return None;
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("chromium"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let found = on_path
        .into_iter()
        .chain([PathBuf::from("/usr/bin/chromium")])
        .find(|p| p.is_file());
    match found {
        Some(path) => Some(path),
        None => panic!(
            "headless Chromium is required by this test but `chromium` is not installed \
             (not on PATH, no /usr/bin/chromium). Install it (`apt-get install chromium`, \
             or run scripts/test.sh, which does), or set WIREFOLD_SKIP_BROWSER=1 to skip."
        ),
    }
}

fn chromium_command(exe: &Path, profile: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    // Its own process group, so its helpers can be stopped with it and nothing else.
    .process_group(0)
    .kill_on_drop(true);
    cmd
}

/// Sends `signal` to the process group we created for one Chromium run.
fn signal_group(group: u32, signal: &str) {
    let _ = std::process::Command::new("kill")
        .args([&format!("-{signal}"), "--", &format!("-{group}")])
        .stderr(std::process::Stdio::null())
        .status();
}

/// Loads `url` in headless Chromium with the profile in `profile` and returns the
/// DOM after the load (plus `budget_ms` of virtual time).
async fn dump_dom(exe: &Path, profile: &Path, url: &str, budget_ms: u32) -> String {
    dump_dom_with(exe, profile, url, budget_ms, &[]).await
}

/// [`dump_dom`] with extra Chromium flags (a proxy, say).
async fn dump_dom_with(
    exe: &Path,
    profile: &Path,
    url: &str,
    budget_ms: u32,
    extra: &[String],
) -> String {
    let mut cmd = chromium_command(exe, profile);
    cmd.args(extra)
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .arg("--dump-dom")
        .arg(url);
    let started = std::time::Instant::now();
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{} starts: {e}", exe.display()));
    let group = child.id().expect("chromium has a pid");
    let outcome = tokio::time::timeout(RUN_LIMIT, child.wait_with_output()).await;
    // Helpers left behind (zygote, utility processes) are in the group we created.
    signal_group(group, "KILL");
    let out = match outcome {
        Ok(out) => out.expect("chromium runs"),
        Err(_) => panic!("chromium did not finish loading {url} within {RUN_LIMIT:?}"),
    };
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!(
        "chromium loaded {url} in {:.1} s ({} bytes of DOM)",
        started.elapsed().as_secs_f64(),
        dom.len()
    );
    assert!(
        out.status.success() && dom.contains("<html"),
        "chromium failed on {url}: {}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    dom
}

/// A headless Chromium kept running in real time, driven through the DevTools HTTP
/// endpoints (`/json/new` opens a tab, `/json/list` shows each tab's URL and
/// `document.title`): several navigations in one browser, no WebSocket needed.
struct Session {
    child: tokio::process::Child,
    group: u32,
    port: u16,
}

impl Session {
    async fn start(exe: &Path, profile: &Path) -> Session {
        let mut cmd = chromium_command(exe, profile);
        cmd.arg("--remote-debugging-port=0").arg("about:blank");
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{} starts: {e}", exe.display()));
        let group = child.id().expect("chromium has a pid");
        let file = profile.join("DevToolsActivePort");
        let started = std::time::Instant::now();
        let port = loop {
            let port = std::fs::read_to_string(&file)
                .ok()
                .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<u16>().ok()));
            if let Some(port) = port {
                break port;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("chromium exited at start: {status}");
            }
            if started.elapsed() > RUN_LIMIT {
                signal_group(group, "KILL");
                panic!("chromium did not open its DevTools port within {RUN_LIMIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        eprintln!(
            "chromium session up in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        Session { child, group, port }
    }

    /// Opens `url` in a new tab (a browser-initiated navigation, like typing it).
    async fn open(&self, url: &str) {
        let r = curl(
            &format!("http://127.0.0.1:{}/json/new?{url}", self.port),
            &["-X", "PUT"],
        )
        .await;
        assert_eq!(
            r.status,
            200,
            "DevTools /json/new: {}",
            String::from_utf8_lossy(&r.body)
        );
    }

    /// (url, title) of every page tab.
    async fn tabs(&self) -> Vec<(String, String)> {
        let r = curl(&format!("http://127.0.0.1:{}/json/list", self.port), &[]).await;
        let list: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
        list.as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["type"] == "page")
            .map(|t| {
                (
                    t["url"].as_str().unwrap_or_default().to_string(),
                    t["title"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// Waits until a tab shows `title`; false after `limit`.
    async fn wait_for_title(&self, title: &str, limit: Duration) -> bool {
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            if self.tabs().await.iter().any(|(_, t)| t == title) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// Waits until `done` holds; false after `limit`.
    async fn wait_until(&self, done: impl Fn() -> bool, limit: Duration) -> bool {
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            if done() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// A clean shutdown (SIGTERM to the browser), then whatever is left of its group.
    async fn close(mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.group.to_string()])
            .status();
        let _ = tokio::time::timeout(Duration::from_secs(15), self.child.wait()).await;
        signal_group(self.group, "KILL");
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // A failed assertion between start and close must not leave a browser behind.
        if let Ok(None) = self.child.try_wait() {
            signal_group(self.group, "KILL");
        }
    }
}

// ---------------------------------------------------------------------------
// A recording relay between Chromium and wirefold

#[derive(Default)]
struct Connection {
    /// Bytes from the browser.
    up: Mutex<Vec<u8>>,
    /// Bytes from wirefold.
    down: Mutex<Vec<u8>>,
}

/// Relays TCP connections to `target`, keeping every byte in both directions.
struct Recorder {
    addr: SocketAddr,
    connections: Arc<Mutex<Vec<Arc<Connection>>>>,
}

/// One HTTP/1.1 request and its final response as they crossed the relay.
#[derive(Debug)]
struct Exchange {
    method: String,
    target: String,
    request: Vec<(String, String)>,
    status: u16,
    response: Vec<(String, String)>,
    body_len: usize,
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

impl Exchange {
    fn request(&self, name: &str) -> Option<&str> {
        field(&self.request, name)
    }
    fn response(&self, name: &str) -> Option<&str> {
        field(&self.response, name)
    }
}

async fn recorder(target: SocketAddr) -> Recorder {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections: Arc<Mutex<Vec<Arc<Connection>>>> = Arc::default();
    let list = connections.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(target).await else {
                continue;
            };
            let connection = Arc::new(Connection::default());
            list.lock().unwrap().push(connection.clone());
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            let up = connection.clone();
            tokio::spawn(async move { pump(client_read, server_write, &up.up).await });
            tokio::spawn(async move { pump(server_read, client_write, &connection.down).await });
        }
    });
    Recorder { addr, connections }
}

/// Copies `from` to `to`, recording each chunk before it is passed on.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    record: &Mutex<Vec<u8>>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        record.lock().unwrap().extend_from_slice(&buf[..n]);
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl Recorder {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every exchange so far, connection by connection, in order.
    fn exchanges(&self) -> Vec<Exchange> {
        let connections = self.connections.lock().unwrap().clone();
        let mut all = Vec::new();
        for c in connections {
            let up = c.up.lock().unwrap().clone();
            let down = c.down.lock().unwrap().clone();
            let requests = parse_requests(&up);
            let responses = parse_responses(&down);
            for ((method, target, request), (status, response, body_len)) in
                requests.into_iter().zip(responses)
            {
                all.push(Exchange {
                    method,
                    target,
                    request,
                    status,
                    response,
                    body_len,
                });
            }
        }
        all
    }

    /// Exchanges for `path` (exact request target).
    fn exchanges_for(&self, path: &str) -> Vec<Exchange> {
        self.exchanges()
            .into_iter()
            .filter(|e| e.target == path)
            .collect()
    }
}

type Fields = Vec<(String, String)>;
type Head = (String, Fields);

/// The head at the start of `data`: its first line and fields, and its length.
fn parse_head(data: &[u8]) -> Option<(Head, usize)> {
    let end = data.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let text = String::from_utf8_lossy(&data[..end - 4]).into_owned();
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default().to_string();
    let fields = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Some(((first, fields), end))
}

/// (method, target, fields) of each request; bodies skipped.
fn parse_requests(mut data: &[u8]) -> Vec<(String, String, Fields)> {
    let mut out = Vec::new();
    while let Some(((line, fields), len)) = parse_head(data) {
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let body: usize = field(&fields, "content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        data = &data[(len + body).min(data.len())..];
        out.push((method, target, fields));
    }
    out
}

/// Final responses (interim 1xx skipped) with their body lengths as framed on the wire.
fn parse_responses(mut data: &[u8]) -> Vec<(u16, Fields, usize)> {
    let mut out = Vec::new();
    while let Some(((line, fields), len)) = parse_head(data) {
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        data = &data[len..];
        if (100..200).contains(&status) {
            continue;
        }
        let body_len = if status == 204 || status == 304 {
            0
        } else if field(&fields, "transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
        {
            let mut total = 0;
            loop {
                let Some(eol) = data.windows(2).position(|w| w == b"\r\n") else {
                    return out;
                };
                let size_text = String::from_utf8_lossy(&data[..eol]).into_owned();
                let size =
                    usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                        .unwrap_or(0);
                data = &data[eol + 2..];
                if size == 0 {
                    // Trailers, then the empty line.
                    let Some(end) = data.windows(2).position(|w| w == b"\r\n") else {
                        return out;
                    };
                    let end = if end == 0 {
                        2
                    } else {
                        data.windows(4)
                            .position(|w| w == b"\r\n\r\n")
                            .map_or(data.len(), |p| p + 4)
                    };
                    data = &data[end.min(data.len())..];
                    break;
                }
                if data.len() < size + 2 {
                    out.push((status, fields, total + data.len()));
                    return out;
                }
                total += size;
                data = &data[size + 2..];
            }
            total
        } else if let Some(n) =
            field(&fields, "content-length").and_then(|v| v.parse::<usize>().ok())
        {
            let n = n.min(data.len());
            data = &data[n..];
            n
        } else {
            let n = data.len();
            data = &data[n..];
            n
        };
        out.push((status, fields, body_len));
    }
    out
}

// ---------------------------------------------------------------------------
// Content

fn sha256_b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(data))
}

/// A real script from the corpus, version `v`, plus a few lines that compute a
/// value from this version's own constant and write it into the DOM.
fn script(v: u32) -> Vec<u8> {
    let mut body = corpus_file(if v == 1 { SCRIPT_V1 } else { SCRIPT_V2 });
    body.extend_from_slice(
        format!(
            "\n;(function () {{\n  var WIREFOLD_APP_VERSION = {v};\n  var sum = 0;\n  \
             for (var i = 1; i <= 100; i++) sum += i * WIREFOLD_APP_VERSION;\n  \
             document.body.dataset.result = \"app-v\" + WIREFOLD_APP_VERSION + \":\" + sum;\n}})();\n"
        )
        .as_bytes(),
    );
    body
}

/// What `script(v)` writes into `data-result`.
fn script_result(v: u32) -> String {
    format!("app-v{v}:{}", 5050 * v)
}

fn script_page(v: u32) -> String {
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>wirefold app</title></head>\n\
         <body><h1>App</h1><p>Loads its versioned script.</p>\n<script src=\"/js/app.v{v}.js\"></script>\n</body></html>\n"
    )
}

/// A page of realistic size: a corpus spec page shown as text (so it loads nothing
/// from the network), with a version marker.
fn document_page(v: u32) -> Vec<u8> {
    let source =
        String::from_utf8_lossy(&corpus_file(if v == 1 { PAGE_V1 } else { PAGE_V2 })).into_owned();
    let escaped = source
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>page-v{v}</title></head>\n\
         <body><h1 id=\"version\">page-v{v}</h1>\n<pre>{escaped}</pre>\n</body></html>\n"
    )
    .into_bytes()
}

fn describe(exchanges: &[Exchange]) -> String {
    exchanges
        .iter()
        .map(|e| {
            format!(
                "{} {} -> {} ce={:?} len={}",
                e.method,
                e.target,
                e.status,
                e.response("content-encoding"),
                e.body_len
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------
// Tests

/// The issue's scenario: a page loads `/js/app.v1.js`, which Chromium keeps as a
/// dictionary; the page moves to `/js/app.v2.js`, and the next load gets it
/// compressed against v1 with `coding` and runs it.
async fn versioned_script_scenario(coding: &'static str) {
    let Some(exe) = chromium() else { return };
    let _one_at_a_time = BROWSER.lock().await;

    let page_version = Arc::new(Mutex::new(1u32));
    let (v1, v2) = (script(1), script(2));
    let state = page_version.clone();
    let (s1, s2) = (v1.clone(), v2.clone());
    let origin = origin(move |req| {
        let js = [
            ("content-type", "application/javascript"),
            ("cache-control", "max-age=3600"),
        ];
        match req.uri().path() {
            "/" => {
                let v = *state.lock().unwrap();
                response(
                    200,
                    &[
                        ("content-type", "text/html; charset=utf-8"),
                        ("cache-control", "no-cache"),
                    ],
                    script_page(v),
                )
            }
            "/js/app.v1.js" => response(200, &js, s1.clone()),
            "/js/app.v2.js" => response(200, &js, s2.clone()),
            _ => response(404, &[("content-type", "text/plain")], "not found"),
        }
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |c| {
        c.delta.dictionary_codings = coding.to_string()
    })
    .await;
    let relay = recorder(proxy.running.addr).await;
    let profile = tempfile::tempdir().unwrap();

    // Load 1: v1 arrives announced as a dictionary for every version of the script.
    let dom = dump_dom(&exe, profile.path(), &relay.url("/"), 5000).await;
    assert!(
        dom.contains(&format!("data-result=\"{}\"", script_result(1))),
        "load 1 ran v1:\n{dom}"
    );
    let first = relay.exchanges_for("/js/app.v1.js");
    let first = first
        .first()
        .unwrap_or_else(|| panic!("Chromium fetched v1:\n{}", describe(&relay.exchanges())));
    assert_eq!(first.status, 200);
    assert_eq!(
        first.response("use-as-dictionary"),
        Some("match=\"/js/app.*.js\""),
        "{first:#?}"
    );

    // The origin moves the page to v2.
    *page_version.lock().unwrap() = 2;

    // Load 2, same profile: Chromium offers v1 as a dictionary and decodes the delta.
    let dom = dump_dom(&exe, profile.path(), &relay.url("/"), 5000).await;
    let exchanges = relay.exchanges_for("/js/app.v2.js");
    let second = exchanges
        .first()
        .unwrap_or_else(|| panic!("Chromium fetched v2:\n{}", describe(&relay.exchanges())));
    eprintln!("[{coding}] Chromium's request for /js/app.v2.js:");
    for (k, v) in &second.request {
        eprintln!("    {k}: {v}");
    }
    eprintln!(
        "[{coding}] wirefold's answer: {} content-encoding={:?} vary={:?}, {} body bytes for a {}-byte script",
        second.status,
        second.response("content-encoding"),
        second.response("vary"),
        second.body_len,
        v2.len()
    );
    let accept = second.request("accept-encoding").unwrap_or_default();
    assert!(
        accept.split(',').any(|t| t.trim() == coding),
        "Chromium offers {coding}: {accept:?}"
    );
    assert_eq!(
        second.request("available-dictionary"),
        Some(format!(":{}:", sha256_b64(&v1)).as_str()),
        "Chromium names v1 as its dictionary: {:#?}",
        second.request
    );
    assert_eq!(second.status, 200);
    assert_eq!(
        second.response("content-encoding"),
        Some(coding),
        "{second:#?}"
    );
    assert!(
        second.body_len * 5 < v2.len(),
        "the delta pays: {} bytes for {}",
        second.body_len,
        v2.len()
    );
    assert!(
        dom.contains(&format!("data-result=\"{}\"", script_result(2))),
        "load 2 ran the new script (decoded from {coding}):\n{dom}"
    );
    let metrics = metrics_text(&proxy).await;
    assert!(
        metric(
            &metrics,
            &format!("wirefold_body_bytes_sent_total{{mechanism=\"{coding}\"")
        ) > 0.0,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_runs_a_new_script_sent_as_dcz_against_the_old() {
    versioned_script_scenario("dcz").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_runs_a_new_script_sent_as_dcb_against_the_old() {
    versioned_script_scenario("dcb").await;
}

/// A `no-cache` page Chromium will not keep: wirefold links a derived dictionary,
/// Chromium fetches it after load, and the next navigation gets the changed page
/// as dcz against it. One browser session for both loads: after a restart,
/// Chromium's first navigation may run before it has read its stored dictionaries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_uses_the_derived_dictionary_of_a_no_cache_page() {
    let Some(exe) = chromium() else { return };
    let _one_at_a_time = BROWSER.lock().await;

    let page_version = Arc::new(Mutex::new(1u32));
    let state = page_version.clone();
    let origin = origin(move |req| match req.uri().path() {
        "/page" => {
            let v = *state.lock().unwrap();
            response(
                200,
                &[
                    ("content-type", "text/html; charset=utf-8"),
                    ("cache-control", "no-cache"),
                ],
                document_page(v),
            )
        }
        _ => response(404, &[("content-type", "text/plain")], "not found"),
    })
    .await;
    let proxy = start_proxy(&origin.url(""), |_| {}).await;
    let relay = recorder(proxy.running.addr).await;
    let profile = tempfile::tempdir().unwrap();
    let (v1, v2) = (document_page(1), document_page(2));
    let limit = Duration::from_secs(30);
    let session = Session::start(&exe, profile.path()).await;

    // Load 1: the page links its derived dictionary; Chromium fetches it after load,
    // at idle time, in real time.
    session.open(&relay.url("/page")).await;
    assert!(
        session.wait_for_title("page-v1", limit).await,
        "load 1 shows v1: {:?}",
        session.tabs().await
    );
    let dictionary_fetched = || {
        relay.exchanges().iter().any(|e| {
            e.target.starts_with("/.wirefold/dict/")
                && e.body_len > 0
                && (e.response("transfer-encoding").is_some()
                    || Some(e.body_len)
                        == e.response("content-length").and_then(|v| v.parse().ok()))
        })
    };
    let started = std::time::Instant::now();
    let fetched = session.wait_until(dictionary_fetched, limit).await;
    eprintln!(
        "load 1 exchanges (dictionary fetched {:.1} s after the title showed):\n{}",
        started.elapsed().as_secs_f64(),
        describe(&relay.exchanges())
    );
    let page = relay.exchanges_for("/page");
    let first = page.first().expect("Chromium loaded the page");
    assert!(
        first.response("use-as-dictionary").is_none(),
        "instantly stale: no Use-As-Dictionary: {first:#?}"
    );
    let link = first
        .response
        .iter()
        .find(|(k, v)| k.eq_ignore_ascii_case("link") && v.contains("compression-dictionary"))
        .map(|(_, v)| v.clone())
        .expect("the page links a dictionary");
    eprintln!("load 1: Link: {link}");
    let dict_path = link
        .trim_start_matches('<')
        .split('>')
        .next()
        .unwrap()
        .to_string();
    assert!(
        fetched,
        "Chromium did not fetch the linked dictionary {dict_path} within {limit:?} of real time"
    );
    let dict = relay.exchanges_for(&dict_path);
    let dict = dict.first().expect("the fetch is for the linked URL");
    assert_eq!(dict.status, 200);
    assert_eq!(
        dict.response("use-as-dictionary"),
        Some("match=\"/page\", match-dest=(\"document\")"),
        "{dict:#?}"
    );
    eprintln!("Chromium's dictionary fetch:");
    for (k, v) in &dict.request {
        eprintln!("    {k}: {v}");
    }
    // Storing the dictionary follows the fetch; give it a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;

    *page_version.lock().unwrap() = 2;

    // Load 2: a new navigation to the page names the derived dictionary and renders
    // the dcz body.
    session.open(&relay.url("/page")).await;
    let shown = session.wait_for_title("page-v2", limit).await;
    let tabs = session.tabs().await;
    session.close().await;
    let pages = relay.exchanges_for("/page");
    let second = pages.last().unwrap();
    eprintln!("load 2: Chromium's request for /page:");
    for (k, v) in &second.request {
        eprintln!("    {k}: {v}");
    }
    eprintln!(
        "load 2: wirefold's answer: {} content-encoding={:?}, {} body bytes for a {}-byte page",
        second.status,
        second.response("content-encoding"),
        second.body_len,
        v2.len()
    );
    assert_eq!(pages.len(), 2, "{}", describe(&relay.exchanges()));
    assert_eq!(
        second.request("available-dictionary"),
        Some(format!(":{}:", sha256_b64(&v1)).as_str()),
        "{:#?}",
        second.request
    );
    assert!(second
        .request("accept-encoding")
        .unwrap_or_default()
        .split(',')
        .any(|t| t.trim() == "dcz"));
    assert_eq!(
        second.response("content-encoding"),
        Some("dcz"),
        "{second:#?}"
    );
    assert!(
        second.body_len * 5 < v2.len(),
        "the delta pays: {} bytes for {}",
        second.body_len,
        v2.len()
    );
    assert!(shown, "load 2 shows v2 (decoded from dcz): tabs {tabs:?}");
    let metrics = metrics_text(&proxy).await;
    assert!(
        metric(&metrics, "wirefold_body_bytes_sent_total{mechanism=\"dcz\"") > 0.0,
        "{metrics}"
    );
}

/// Chromium with `--proxy-server` at the client proxy of a pair: every load renders
/// the origin's current instance, as it changes, through confirm and delta.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_through_the_proxy_pair_renders_the_current_instance() {
    let Some(exe) = chromium() else { return };
    let _one = BROWSER.lock().await;
    let version = Arc::new(Mutex::new(1u32));
    let state = version.clone();
    let (v1, v2) = (document_page(1), document_page(2));
    let origin = origin(move |req| {
        if req.uri().path() != "/spec.html" {
            return response(404, &[("content-type", "text/plain")], "not found");
        }
        let body = if *state.lock().unwrap() == 1 {
            v1.clone()
        } else {
            v2.clone()
        };
        response(
            200,
            &[
                ("content-type", "text/html; charset=utf-8"),
                ("cache-control", "no-cache"),
            ],
            body,
        )
    })
    .await;
    let pair = start_pair(|_| {}, |_| {}).await;
    let profile = tempfile::tempdir().unwrap();
    // Chromium sends loopback straight to the target unless told not to.
    let flags = [
        format!("--proxy-server={}", pair.proxy()),
        "--proxy-bypass-list=<-loopback>".to_string(),
    ];
    let url = origin.url("/spec.html");
    let mut outcomes = Vec::new();
    for (load, expected) in [(1, 1), (2, 1), (3, 2), (4, 2)] {
        if load == 3 {
            *version.lock().unwrap() = 2;
        }
        let dom = dump_dom_with(&exe, profile.path(), &url, 3000, &flags).await;
        assert!(
            dom.contains(&format!("<h1 id=\"version\">page-v{expected}</h1>")),
            "load {load} renders version {expected}"
        );
        let text = String::from_utf8(
            curl(&format!("http://{}/metrics", pair.client.admin_addr), &[])
                .await
                .body,
        )
        .unwrap();
        outcomes.push((
            metric(&text, "wirefold_client_requests_total{outcome=\"full\"}"),
            metric(&text, "wirefold_client_requests_total{outcome=\"confirm\"}"),
            metric(&text, "wirefold_client_requests_total{outcome=\"delta\"}"),
        ));
    }
    eprintln!("client outcomes after each load (full, confirm, delta): {outcomes:?}");
    let (full, confirm, delta) = outcomes[3];
    assert!(
        origin.hits() >= 4,
        "every load reached the origin: {}",
        origin.hits()
    );
    assert!(
        full >= 1.0 && confirm >= 1.0 && delta >= 1.0,
        "{outcomes:?}"
    );
    // Chromium may ask twice per navigation; what matters is that the change came as a delta.
    assert!(
        outcomes[2].2 > outcomes[1].2,
        "the changed page came as a delta: {outcomes:?}"
    );
}

/// Where the in-place scenario's site comes from.
#[derive(Clone, Copy, Debug)]
enum Serving {
    /// `wirefold serve --root DIR`: the files change on disk.
    Root,
    /// `wirefold serve --origin URL`: the origin's answers change.
    Origin,
}

/// A page title of the in-place script's version `v`: the script sets it when it
/// runs, so the DevTools tab list shows which version ran.
fn in_place_title(v: u32) -> String {
    format!("app-v{v}")
}

/// A real corpus script, version `v`, that writes its version into the page title.
fn in_place_script(v: u32) -> Vec<u8> {
    let mut body = corpus_file(if v == 1 { SCRIPT_V1 } else { SCRIPT_V2 });
    body.extend_from_slice(format!("\n;document.title = \"{}\";\n", in_place_title(v)).as_bytes());
    body
}

/// The page that loads `/app.js` from its own site; above `compression.min_size`
/// (smaller bodies are sent as they are, without dictionary links).
fn in_place_page() -> String {
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>loading</title></head>\n\
         <body><h1>App</h1>\n{}<script src=\"/app.js\"></script>\n</body></html>\n",
        "<p>Loads its unversioned script.</p>\n".repeat(40)
    )
}

/// The issue's second scenario: `/app.js` is `no-cache` (its name carries no version)
/// and changes in place. The page referencing it links a derived dictionary of the
/// script (`match="/app.js"`, `match-dest=("script")`); Chromium fetches it, and
/// after the change the next load gets the script as `coding` against it and runs
/// the new version. One browser session for every load, as for the page's derived
/// dictionary.
async fn script_changed_in_place(serving: Serving) {
    let Some(exe) = chromium() else { return };
    let _one_at_a_time = BROWSER.lock().await;

    let version = Arc::new(Mutex::new(1u32));
    let root = tempfile::tempdir().unwrap();
    let (_origin, proxy) = match serving {
        Serving::Root => {
            std::fs::write(root.path().join("index.html"), in_place_page()).unwrap();
            std::fs::write(root.path().join("app.js"), in_place_script(1)).unwrap();
            (None, start_root(root.path(), |_| {}).await)
        }
        Serving::Origin => {
            let state = version.clone();
            let origin = origin(move |req| match req.uri().path() {
                "/" => response(
                    200,
                    &[
                        ("content-type", "text/html; charset=utf-8"),
                        ("cache-control", "no-cache"),
                    ],
                    in_place_page(),
                ),
                "/app.js" => response(
                    200,
                    &[
                        ("content-type", "text/javascript"),
                        ("cache-control", "no-cache"),
                    ],
                    in_place_script(*state.lock().unwrap()),
                ),
                _ => response(404, &[("content-type", "text/plain")], "not found"),
            })
            .await;
            let proxy = start_proxy(&origin.url(""), |_| {}).await;
            (Some(origin), proxy)
        }
    };
    let relay = recorder(proxy.running.addr).await;
    let profile = tempfile::tempdir().unwrap();
    let limit = Duration::from_secs(30);
    let session = Session::start(&exe, profile.path()).await;

    // Load 1: the script is served, and its derived dictionary published.
    session.open(&relay.url("/")).await;
    assert!(
        session.wait_for_title(&in_place_title(1), limit).await,
        "load 1 runs v1: {:?}\n{}",
        session.tabs().await,
        describe(&relay.exchanges())
    );
    let script = relay.exchanges_for("/app.js");
    let script = script.first().expect("Chromium fetched /app.js");
    assert!(
        script.response("use-as-dictionary").is_none(),
        "instantly stale: Chromium would not keep it: {script:#?}"
    );

    // Chromium fetches the dictionary load 1's page linked (its own derived one) when
    // idle after the load; load 2 must follow that fetch, or its page is a 304, which
    // carries no `Link`, instead of a delta with the page's links.
    let page_dictionary = || {
        relay
            .exchanges()
            .iter()
            .any(|e| e.target.starts_with("/.wirefold/dict/") && e.status == 200)
    };
    assert!(
        session.wait_until(page_dictionary, limit).await,
        "Chromium fetched the page's dictionary after load 1: {}",
        describe(&relay.exchanges())
    );

    // Load 2: the page links the script's derived dictionary; Chromium fetches it.
    session.open(&relay.url("/")).await;
    let script_dictionary = || {
        relay.exchanges().into_iter().find(|e| {
            e.target.starts_with("/.wirefold/dict/")
                && e.status == 200
                && e.response("use-as-dictionary")
                    == Some("match=\"/app.js\", match-dest=(\"script\")")
                // Whole: the relay has seen every byte of the body.
                && (e.response("transfer-encoding").is_some()
                    || Some(e.body_len)
                        == e.response("content-length").and_then(|v| v.parse().ok()))
        })
    };
    let fetched = session
        .wait_until(|| script_dictionary().is_some(), limit)
        .await;
    let pages = relay.exchanges_for("/");
    let links: Vec<String> = pages
        .iter()
        .flat_map(|e| {
            e.response
                .iter()
                .filter(|(k, v)| {
                    k.eq_ignore_ascii_case("link") && v.contains("compression-dictionary")
                })
                .map(|(_, v)| v.clone())
        })
        .collect();
    eprintln!(
        "[{serving:?}] loads 1-2: page links {links:?}\n{}",
        describe(&relay.exchanges())
    );
    assert!(
        fetched,
        "Chromium fetched the script's derived dictionary within {limit:?}"
    );
    let dictionary = script_dictionary().unwrap();
    assert!(
        links.iter().any(|l| l.contains(&dictionary.target)),
        "the page linked {}: {links:?}",
        dictionary.target
    );
    // Storing the dictionary follows the fetch; give it a moment (more than a page's:
    // the test may share the machine with builds).
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The script changes in place.
    match serving {
        Serving::Root => std::fs::write(root.path().join("app.js"), in_place_script(2)).unwrap(),
        Serving::Origin => *version.lock().unwrap() = 2,
    }

    // Load 3: Chromium names the dictionary, gets the script as dcz or dcb, runs v2.
    let before = relay.exchanges_for("/app.js").len();
    session.open(&relay.url("/")).await;
    let shown = session.wait_for_title(&in_place_title(2), limit).await;
    let tabs = session.tabs().await;
    session.close().await;
    let scripts = relay.exchanges_for("/app.js");
    let changed = scripts.get(before).unwrap_or_else(|| {
        panic!(
            "Chromium fetched /app.js after the change:\n{}",
            describe(&relay.exchanges())
        )
    });
    eprintln!("[{serving:?}] load 3: Chromium's request for /app.js:");
    for (k, v) in &changed.request {
        eprintln!("    {k}: {v}");
    }
    let v2 = in_place_script(2);
    eprintln!(
        "[{serving:?}] load 3: wirefold's answer: {} content-encoding={:?}, {} body bytes for a {}-byte script",
        changed.status,
        changed.response("content-encoding"),
        changed.body_len,
        v2.len()
    );
    assert_eq!(
        changed.request("available-dictionary"),
        Some(format!(":{}:", sha256_b64(&in_place_script(1))).as_str()),
        "Chromium names v1's derived dictionary: {:#?}",
        changed.request
    );
    assert_eq!(changed.status, 200);
    let coding = changed.response("content-encoding").unwrap_or_default();
    assert!(
        coding == "dcz" || coding == "dcb",
        "a dictionary coding: {changed:#?}"
    );
    assert!(
        changed.body_len * 5 < v2.len(),
        "the delta pays: {} bytes for {}",
        changed.body_len,
        v2.len()
    );
    assert!(
        shown,
        "load 3 runs v2 (decoded from {coding}): tabs {tabs:?}"
    );
    let metrics = metrics_text(&proxy).await;
    assert!(
        metric(
            &metrics,
            &format!("wirefold_body_bytes_sent_total{{mechanism=\"{coding}\"")
        ) > 0.0,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_gets_a_script_changed_in_place_as_a_delta_from_a_root() {
    script_changed_in_place(Serving::Root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_gets_a_script_changed_in_place_as_a_delta_through_an_origin() {
    script_changed_in_place(Serving::Origin).await;
}

/// Loads `url` in headless Chromium at `width`×`height` and writes a PNG of it to `png`.
async fn screenshot(exe: &Path, profile: &Path, url: &str, png: &Path, size: (u32, u32)) {
    let mut cmd = chromium_command(exe, profile);
    cmd.arg(format!("--window-size={},{}", size.0, size.1))
        .arg("--hide-scrollbars")
        .arg("--virtual-time-budget=3000")
        .arg(format!("--screenshot={}", png.display()))
        .arg(url);
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{} starts: {e}", exe.display()));
    let group = child.id().expect("chromium has a pid");
    let outcome = tokio::time::timeout(RUN_LIMIT, child.wait_with_output()).await;
    signal_group(group, "KILL");
    let out = match outcome {
        Ok(out) => out.expect("chromium runs"),
        Err(_) => panic!("chromium did not take a screenshot of {url} within {RUN_LIMIT:?}"),
    };
    assert!(
        out.status.success(),
        "chromium --screenshot {url}: {}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn is_png(data: &[u8]) -> bool {
    data.starts_with(b"\x89PNG\r\n\x1a\n")
}

/// The status page on the admin listener, after traffic through most mechanisms
/// (br, gzip, zstd, dcz against a held script, a 226 vcdiff, cache hits, a 304,
/// link requests): Chromium runs its script, which draws each chart as SVG paths of
/// the minutes' savings. A screenshot is kept as docs/status-page.png; the test
/// refreshes it only when WIREFOLD_UPDATE_SCREENSHOT=1, so a run never dirties the tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_draws_the_status_pages_charts() {
    let Some(exe) = chromium() else { return };
    let _one = BROWSER.lock().await;
    let version = Arc::new(Mutex::new(1u32));
    let state = version.clone();
    let (page1, page2) = (document_page(1), document_page(2));
    let (js1, js2) = (script(1), script(2));
    let css = corpus_file("assets/google__styleguide/javaguide-css/006.css");
    let json = format!(
        "[{}]",
        (0..400)
            .map(|i| format!("{{\"id\":{i},\"name\":\"item {i}\",\"tags\":[\"a\",\"b\"]}}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let origin = origin(move |req| {
        let (content_type, cache, body) = match req.uri().path() {
            "/spec.html" => {
                let body = if *state.lock().unwrap() == 1 {
                    page1.clone()
                } else {
                    page2.clone()
                };
                ("text/html; charset=utf-8", "no-cache", body)
            }
            "/js/app.v1.js" => ("application/javascript", "max-age=3600", js1.clone()),
            "/js/app.v2.js" => ("application/javascript", "max-age=3600", js2.clone()),
            "/style.css" => ("text/css", "max-age=3600", css.clone()),
            "/data.json" => ("application/json", "no-store", json.clone().into_bytes()),
            "/logo.png" => ("image/png", "max-age=3600", vec![0x89; 20_000]),
            _ => return response(404, &[("content-type", "text/plain")], "not found"),
        };
        let etag = format!("\"{}\"", hex::encode(&sha2::Sha256::digest(&body)[..8]));
        let matches = req
            .headers()
            .get("if-none-match")
            .is_some_and(|v| v.as_bytes() == etag.as_bytes());
        let fields = [
            ("content-type", content_type),
            ("cache-control", cache),
            ("etag", etag.as_str()),
        ];
        if matches {
            return response(304, &fields[1..], "");
        }
        response(200, &fields, body)
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let mut config = test_config(data.path());
    config.origin = Some(origin.url(""));
    config.link.enabled = true;
    let proxy = Proxy {
        running: start_link_server(config).await,
        data,
    };

    let mut requests = 0;
    let mut get = async |path: &str, args: &[&str]| {
        requests += 1;
        curl(&proxy.url(path), args).await
    };
    for coding in ["br", "gzip", "zstd", "br"] {
        let ae = format!("Accept-Encoding: {coding}");
        get("/spec.html", &["-H", &ae]).await;
        get("/style.css", &["-H", &ae]).await;
        get("/data.json", &["-H", &ae]).await;
        get("/logo.png", &["-H", &ae]).await;
    }
    let first = get("/spec.html", &["-H", "A-IM: vcdiff"]).await;
    let held = first.header("etag").unwrap().to_string();
    *version.lock().unwrap() = 2;
    let delta = get(
        "/spec.html",
        &[
            "-H",
            "A-IM: vcdiff",
            "-H",
            &format!("If-None-Match: {held}"),
        ],
    )
    .await;
    assert_eq!(delta.status, 226);
    let js1 = get("/js/app.v1.js", &["-H", "Accept-Encoding: br"]).await;
    let available = format!("Available-Dictionary: :{}:", sha256_b64(&script(1)));
    let dcz = get(
        "/js/app.v2.js",
        &["-H", "Accept-Encoding: br, dcz", "-H", &available],
    )
    .await;
    assert_eq!(dcz.header("content-encoding"), Some("dcz"));
    let etag = js1.header("etag").unwrap().to_string();
    let unchanged = get(
        "/js/app.v1.js",
        &[
            "-H",
            "Accept-Encoding: br",
            "-H",
            &format!("If-None-Match: {etag}"),
        ],
    )
    .await;
    assert_eq!(unchanged.status, 304);
    for path in ["/spec.html", "/style.css"] {
        let linked = get(path, &["--http2-prior-knowledge", "-H", "wirefold-link: 1"]).await;
        assert_eq!(linked.status, 200);
    }

    // Each record is in once its response's body has ended.
    let started = std::time::Instant::now();
    loop {
        let status = curl(&proxy.admin_url("/status.json"), &[]).await;
        let status: serde_json::Value = serde_json::from_slice(&status.body).unwrap();
        if status["requests"] == requests {
            break;
        }
        assert!(
            started.elapsed() < RUN_LIMIT,
            "{requests} requests: {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let profile = tempfile::tempdir().unwrap();
    let page = proxy.admin_url("/");
    let dom = dump_dom(&exe, profile.path(), &page, 2000).await;
    let drawn = dom
        .split("data-drawn=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|n| n.parse::<usize>().ok());
    assert!(
        drawn.is_some_and(|n| n >= 2),
        "the script drew both charts: {drawn:?}\n{dom}"
    );
    for series in ["br", "gzip", "zstd", "dcz", "vcdiff", "html", "css", "json"] {
        let path = dom
            .split(&format!("data-series=\"{series}\""))
            .next()
            .and_then(|before| before.rsplit("<path").next())
            .unwrap_or_default();
        assert!(
            path.contains(" d=\"M"),
            "a path with data for {series}:\n{dom}"
        );
    }
    assert!(dom.contains("/spec.html"), "top resources are listed");
    // How each exchange ended depends on a race (the held copy's stream against the
    // origin's answer: `link-full` or `link-stale-confirmed`); the page must list
    // whatever the server counted.
    let status = curl(&proxy.admin_url("/status.json"), &[]).await;
    let status: serde_json::Value = serde_json::from_slice(&status.body).unwrap();
    let outcomes = status["link"]["outcomes"].as_array().unwrap();
    assert!(!outcomes.is_empty(), "the link exchanges were counted");
    for outcome in outcomes {
        let name = outcome["name"].as_str().unwrap();
        assert!(
            name.starts_with("link-") && dom.contains(name),
            "link outcome {name} is listed"
        );
    }

    let shots = tempfile::tempdir().unwrap();
    let shot = shots.path().join("status-page.png");
    let profile = shots.path().join("profile");
    screenshot(&exe, &profile, &page, &shot, (1280, 2000)).await;
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(is_png(&png) && png.len() > 10_000, "{} bytes", png.len());
    let kept = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/status-page.png");
    if std::env::var("WIREFOLD_UPDATE_SCREENSHOT").is_ok_and(|v| v == "1") {
        std::fs::write(&kept, &png).unwrap();
        eprintln!("refreshed {}", kept.display());
    }
    let kept = std::fs::read(&kept).expect("docs/status-page.png is kept in the repository");
    assert!(is_png(&kept));
}

// ---------------------------------------------------------------------------
// Adaptive fidelity under CDP network throttling

/// One tab driven over its DevTools WebSocket (the Chrome DevTools Protocol).
struct Devtools {
    socket: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    next_id: u64,
}

impl Devtools {
    /// Opens a blank tab in `session` and connects to it.
    async fn open(session: &Session) -> Devtools {
        let r = curl(
            &format!("http://127.0.0.1:{}/json/new?about:blank", session.port),
            &["-X", "PUT"],
        )
        .await;
        let tab: serde_json::Value = serde_json::from_slice(&r.body).expect("a tab");
        let url = tab["webSocketDebuggerUrl"]
            .as_str()
            .expect("a debugger URL");
        let (socket, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("DevTools WebSocket");
        Devtools { socket, next_id: 1 }
    }

    /// Calls `method` and returns its result; events on the way are skipped.
    async fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        use futures_util::{SinkExt, StreamExt};
        use tokio_tungstenite::tungstenite::Message;
        let id = self.next_id;
        self.next_id += 1;
        let message = serde_json::json!({"id": id, "method": method, "params": params});
        self.socket
            .send(Message::text(message.to_string()))
            .await
            .expect("CDP send");
        let answer = async {
            while let Some(frame) = self.socket.next().await {
                let Ok(Message::Text(text)) = frame else {
                    continue;
                };
                let value: serde_json::Value = serde_json::from_str(&text).expect("CDP JSON");
                if value["id"] == id {
                    return value;
                }
            }
            panic!("DevTools closed the connection during {method}");
        };
        let value = tokio::time::timeout(RUN_LIMIT, answer)
            .await
            .unwrap_or_else(|_| panic!("no answer to {method} within {RUN_LIMIT:?}"));
        assert!(value["error"].is_null(), "{method}: {}", value["error"]);
        value["result"].clone()
    }

    async fn evaluate(&mut self, expression: &str) -> serde_json::Value {
        let params = serde_json::json!({"expression": expression, "returnByValue": true});
        self.call("Runtime.evaluate", params).await["result"]["value"].clone()
    }

    /// Navigates to `url` and waits until every image of the page finished (loaded
    /// or failed); returns, per image, its `naturalWidth` and the bytes its response
    /// body had (Resource Timing's `encodedBodySize`).
    async fn load_images(&mut self, url: &str) -> Vec<(u64, u64)> {
        self.call("Page.navigate", serde_json::json!({ "url": url }))
            .await;
        let done = "document.readyState === 'complete' && location.href === '".to_string()
            + url
            + "' && [...document.images].every(i => i.complete)";
        let started = std::time::Instant::now();
        while self.evaluate(&done).await != serde_json::Value::Bool(true) {
            assert!(
                started.elapsed() < RUN_LIMIT,
                "{url} did not finish loading"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let report = "JSON.stringify([...document.images].map(i => [i.naturalWidth, \
             (performance.getEntriesByName(i.currentSrc)[0] || {}).encodedBodySize || 0]))";
        let value = self.evaluate(report).await;
        serde_json::from_str(value.as_str().expect("a JSON string")).expect("pairs")
    }
}

/// Chromium sends `ECT`, `RTT` and `Downlink` after the page's `Accept-CH`; under CDP
/// throttling (100 kbit/s, 300 ms: the page with its two ~110 KB photographs would
/// take 19 s) its image requests get smaller variants (AVIF in a build with it, else
/// WebP), which it decodes and shows; unthrottled (headless Chromium then says 1.4 Mbit/s,
/// 100 ms: the whole page in ~2.2 s, within the default 3 s target) it gets the
/// originals.
#[tokio::test]
async fn chromium_under_throttling_gets_and_shows_smaller_image_variants() {
    let Some(exe) = chromium() else { return };
    let _one = BROWSER.lock().await;
    // The estimate is for the page with both photographs (docs/fidelity.md): at 800
    // px (175 KB each) it would be ~3 s unthrottled, the target's edge.
    const WIDTH: u32 = 640;
    let root = tempfile::tempdir().unwrap();
    let mut originals = Vec::new();
    for i in 1..=2 {
        let photo =
            fidelity::image::sample_photo_jpeg(WIDTH, 480, (i * 7_919) | 1, 90).expect("a JPEG");
        std::fs::write(root.path().join(format!("photo-{i}.jpg")), &photo).unwrap();
        originals.push(photo.len() as u64);
    }
    std::fs::write(
        root.path().join("index.html"),
        "<!DOCTYPE html><title>photos</title>\
         <img src=\"/photo-1.jpg\"><img src=\"/photo-2.jpg\">",
    )
    .unwrap();
    let server = start_root(root.path(), |_| {}).await;
    // The ladders are made on first sight, in the background; in a build with AVIF,
    // its rungs come in a later pass, and Chromium (which names `image/avif`) gets them.
    let avif = cfg!(feature = "avif");
    let mut variant_types = Vec::new();
    for i in 1..=2 {
        let url = server.url(&format!("/photo-{i}.jpg"));
        let mut alternates = None;
        for _ in 0..1200 {
            alternates = curl(&url, &[])
                .await
                .header("alternates")
                .map(str::to_owned);
            if alternates
                .as_ref()
                .is_some_and(|a| !avif || a.contains("image/avif"))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let alternates = alternates.unwrap_or_else(|| panic!("no variants were made of {url}"));
        variant_types.push(alternates);
    }
    let page = format!("http://localhost:{}/", server.running.addr.port());

    let profile = tempfile::tempdir().unwrap();
    let session = Session::start(&exe, profile.path()).await;
    let mut tab = Devtools::open(&session).await;
    tab.call("Network.enable", serde_json::json!({})).await;
    tab.call(
        "Network.setCacheDisabled",
        serde_json::json!({"cacheDisabled": true}),
    )
    .await;
    // The first load brings `Accept-CH`; the second's image requests carry the hints.
    tab.load_images(&format!("{page}?warm")).await;
    let fast = tab.load_images(&format!("{page}?fast")).await;
    tab.call(
        "Network.emulateNetworkConditions",
        serde_json::json!({
            "offline": false,
            "latency": 300,
            "downloadThroughput": 12_500,
            "uploadThroughput": 12_500,
            "connectionType": "cellular2g",
        }),
    )
    .await;
    let slow = tab.load_images(&format!("{page}?slow")).await;
    session.close().await;

    eprintln!("originals {originals:?}; unthrottled {fast:?}; throttled {slow:?}");
    for (i, &(width, bytes)) in fast.iter().enumerate() {
        assert_eq!(
            width,
            u64::from(WIDTH),
            "unthrottled image {i}: the original"
        );
        assert_eq!(
            bytes, originals[i],
            "unthrottled image {i}: the original's bytes"
        );
    }
    assert_eq!(slow.len(), 2);
    let shown_type = if avif { "image/avif" } else { "image/webp" };
    for (i, &(width, bytes)) in slow.iter().enumerate() {
        // Alternates lists each variant's type and length: the bytes Chromium got
        // are those of a variant of the type it should have got.
        let entry = format!("{{type {shown_type}}} {{length {bytes}}}");
        assert!(
            variant_types[i].contains(&entry),
            "throttled image {i}: no {shown_type} variant of {bytes} bytes in {}",
            variant_types[i]
        );
        assert!(width > 0, "throttled image {i} was decoded and shown");
        // WebP's ladder reaches its lower rungs by shrinking; AVIF's smallest rungs
        // keep the full size at a quality WebP does not reach.
        assert!(
            width < u64::from(WIDTH) || (avif && width == u64::from(WIDTH)),
            "throttled image {i}: a variant, shown at {width} px"
        );
        assert!(
            bytes > 0 && bytes * 10 < originals[i] * 7,
            "throttled image {i}: {bytes} bytes"
        );
    }
    let metrics = curl(&server.admin_url("/metrics"), &[]).await;
    let metrics = String::from_utf8_lossy(&metrics.body);
    assert!(
        metrics.contains("wirefold_fidelity_decisions_total{reason=\"slow_link\"}"),
        "the choices were counted"
    );
    server.running.shutdown().await;
}

// ---------------------------------------------------------------------------
// Inline download: 103 Early Hints over HTTP/2 with TLS

/// A certificate for 127.0.0.1 and localhost written to `dir` (cert.pem, key.pem),
/// and the base64 SHA-256 of its public key: what Chromium's
/// `--ignore-certificate-errors-spki-list` trusts.
fn certificate(dir: &Path) -> (PathBuf, PathBuf, String) {
    let key = rcgen::KeyPair::generate().expect("a key");
    let params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).expect("names");
    let cert = params.self_signed(&key).expect("a certificate");
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    let spki = sha256_b64(&rcgen::PublicKeyData::subject_public_key_info(&key));
    (cert_path, key_path, spki)
}

/// What the held-page origin saw.
#[derive(Default)]
struct HeldPage {
    page_requests: std::sync::atomic::AtomicUsize,
    /// Set by the browser's request for the stylesheet (not wirefold's own reading of
    /// it after the first page: that would leave a permit which a later held page
    /// takes at once, whatever the browser does); awaited by a held page request.
    stylesheet_requested: tokio::sync::Notify,
    /// For each held page request: whether the stylesheet was requested before the
    /// page's answer left the origin.
    stylesheet_first: Mutex<Vec<bool>>,
}

const HINTED_PAGE: &str = "<!doctype html><html><head><title>hinted</title>\
<link rel=stylesheet href=/hinted.css></head><body><p id=done>rendered</p></body></html>";

/// An origin that answers the first request for `/page` at once and holds every later
/// one until `/hinted.css` is requested (at most `limit`): a browser that starts the
/// stylesheet only after the page's head arrived makes the hold run out.
async fn held_page_origin(state: Arc<HeldPage>, limit: Duration) -> SocketAddr {
    use hyper::service::service_fn;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let state = state.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let state = state.clone();
                    async move {
                        let ordinary = |content_type: &str, cache: &str, body: &'static str| {
                            hyper::Response::builder()
                                .header("content-type", content_type)
                                .header("cache-control", cache)
                                .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                        };
                        let answer = match req.uri().path() {
                            "/page" => {
                                let n = state
                                    .page_requests
                                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                if n > 0 {
                                    let notified = state.stylesheet_requested.notified();
                                    let first = tokio::time::timeout(limit, notified).await.is_ok();
                                    state.stylesheet_first.lock().unwrap().push(first);
                                }
                                ordinary("text/html", "no-cache", HINTED_PAGE)
                            }
                            "/hinted.css" => {
                                let from_browser = req
                                    .headers()
                                    .get(hyper::header::USER_AGENT)
                                    .and_then(|ua| ua.to_str().ok())
                                    .is_some_and(|ua| ua.contains("Chrome"));
                                if from_browser {
                                    state.stylesheet_requested.notify_one();
                                }
                                ordinary("text/css", "no-store", "#done { color: green }")
                            }
                            _ => ordinary("text/plain", "no-store", "not here"),
                        };
                        Ok::<_, std::convert::Infallible>(answer.unwrap())
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// Chromium over HTTP/2 with TLS acts on wirefold's 103 Early Hints: for a page
/// wirefold has seen, the stylesheet its manifest names is requested while the origin
/// still holds the page (it answers only once the stylesheet was asked for, or after
/// the hold runs out, which fails the test), and the page renders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_starts_a_hinted_stylesheet_before_the_page_arrives() {
    let Some(exe) = chromium() else { return };
    let _one = BROWSER.lock().await;
    let state = Arc::new(HeldPage::default());
    let origin = held_page_origin(state.clone(), Duration::from_secs(20)).await;
    let certs = tempfile::tempdir().unwrap();
    let (cert, key, spki) = certificate(certs.path());
    let proxy = start_proxy(&format!("http://{origin}"), |c| {
        c.tls.cert = Some(cert);
        c.tls.key = Some(key);
    })
    .await;
    let page = proxy.url("/page");
    // A first visit (any client) gives wirefold the page's manifest, made in the
    // background as the page streams: Chromium comes once it is there.
    let first = curl(&page, &["--http2", "-H", "accept: text/html"]).await;
    assert_eq!(first.status, 200);
    metric_reaches(&proxy, "wirefold_manifests_built_total", 1.0).await;

    let profile = tempfile::tempdir().unwrap();
    let trust = format!("--ignore-certificate-errors-spki-list={spki}");
    let dom = dump_dom_with(&exe, profile.path(), &page, 2000, &[trust]).await;
    assert!(dom.contains("rendered"), "the page rendered: {dom}");
    assert_eq!(
        *state.stylesheet_first.lock().unwrap(),
        [true],
        "Chromium requested the hinted stylesheet before the page's head was sent"
    );
    let metrics = metrics_text(&proxy).await;
    assert_eq!(metric(&metrics, "wirefold_early_hints_total"), 1.0);
    proxy.running.shutdown().await;
}
