//! SIGKILL under load (issue 16): `wirefold serve --origin` caching many distinct
//! pages for concurrent clients is killed mid-load, several times over one data
//! directory. Each restart must start cleanly, serve every page it had answered
//! whole before the kill from its store (a response is sent only after its entry is
//! committed), and serve every page byte-identical to the origin's; at the end every
//! blob in the store matches its hash.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

mod servers;
mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use servers::response;
use store::Hash;
use support::{start, url_in, Started};

/// Distinct pages the origin serves.
const PAGES: usize = 32;
/// Clients fetching at once.
const CLIENTS: usize = 4;
/// Completed fetches per run before the server is killed.
const KILL_AFTER: usize = 10;
/// Server runs killed in turn.
const KILLS: usize = 3;

/// Page `n`: HTML (compressible, a text version) for even `n`, bytes that do not
/// compress for odd; 1 KB to 17 KB.
fn page(n: usize) -> (&'static str, Vec<u8>) {
    let len = 1000 + (n * 7919) % 16_000;
    if n.is_multiple_of(2) {
        let mut html = format!("<!doctype html><title>page {n}</title>\n").into_bytes();
        let mut line = 0;
        while html.len() < len {
            html.extend(format!("<p>page {n}, line {line}: text that repeats</p>\n").bytes());
            line += 1;
        }
        ("text/html", html)
    } else {
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ n as u64;
        let bytes = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        ("application/octet-stream", bytes)
    }
}

/// The origin: `/page/N` is page `N`, fresh for an hour; counts requests per page.
async fn origin() -> (servers::TestOrigin, Arc<Vec<AtomicUsize>>) {
    let hits: Arc<Vec<AtomicUsize>> = Arc::new((0..PAGES).map(|_| AtomicUsize::new(0)).collect());
    let counted = hits.clone();
    let origin = servers::origin(move |req| {
        let n: usize = req
            .uri()
            .path()
            .strip_prefix("/page/")
            .and_then(|n| n.parse().ok())
            .filter(|n| *n < PAGES)
            .expect("a page the test asks for");
        counted[n].fetch_add(1, Ordering::SeqCst);
        let (content_type, body) = page(n);
        response(
            200,
            &[
                ("content-type", content_type),
                ("cache-control", "max-age=3600"),
            ],
            body,
        )
    })
    .await;
    (origin, hits)
}

/// `wirefold serve` in front of `origin` on `data`; panics unless it starts.
async fn serve(origin: &str, data: &Path) -> (Started, String) {
    let args = [
        "serve".to_string(),
        "--origin".into(),
        origin.into(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--admin".into(),
        "127.0.0.1:0".into(),
        "--data-dir".into(),
        data.display().to_string(),
    ];
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let started = start(&args, "listening on");
        let base = url_in(&started.first_line);
        (started, base)
    })
    .await
    .unwrap()
}

/// Fetches page `n` (asking for compression when `compressed`; curl decodes); the
/// status and body when the transfer completed, `None` when it failed.
async fn fetch(base: &str, n: usize, compressed: bool) -> Option<(u16, Vec<u8>)> {
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body");
    let mut curl = tokio::process::Command::new("curl");
    curl.args(["-s", "--max-time", "20", "-w", "%{http_code}", "-o"])
        .arg(&body);
    if compressed {
        curl.arg("--compressed");
    }
    let out = curl.arg(format!("{base}/page/{n}")).output().await.unwrap();
    if !out.status.success() {
        return None;
    }
    let status = String::from_utf8_lossy(&out.stdout).parse().ok()?;
    Some((status, std::fs::read(&body).unwrap_or_default()))
}

/// Asserts that a completed fetch is page `n`, whole and exact.
fn assert_exact(n: usize, fetched: &(u16, Vec<u8>), when: &str) {
    let (status, body) = fetched;
    assert_eq!(*status, 200, "{when}: page {n}");
    let expected = page(n).1;
    assert_eq!(
        Hash::of(body),
        Hash::of(&expected),
        "{when}: page {n} differs from the origin's ({} of {} bytes)",
        body.len(),
        expected.len()
    );
}

/// Fetches `pages` from `CLIENTS` clients at once (alternately asking for
/// compression) and asserts each complete and exact.
async fn fetch_exact(base: &str, pages: &BTreeSet<usize>, when: &str) {
    let pages: Vec<usize> = pages.iter().copied().collect();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let share: Vec<usize> = pages
                .iter()
                .copied()
                .skip(client)
                .step_by(CLIENTS)
                .collect();
            let (base, when) = (base.to_string(), when.to_string());
            tokio::spawn(async move {
                for n in share {
                    let fetched = fetch(&base, n, (n + client) % 2 == 1)
                        .await
                        .unwrap_or_else(|| panic!("{when}: page {n} failed"));
                    assert_exact(n, &fetched, &when);
                }
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }
}

/// Fetches pages from `CLIENTS` clients at once, each page checked as it completes,
/// until `KILL_AFTER` have completed; then kills the server with SIGKILL while the
/// others are in flight. Returns the pages that completed.
async fn load_until_killed(mut server: Started, base: &str, run: usize) -> BTreeSet<usize> {
    let completed = Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let killed = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (base, completed, count, killed) = (
                base.to_string(),
                completed.clone(),
                count.clone(),
                killed.clone(),
            );
            tokio::spawn(async move {
                // Each client walks the pages from its own starting point and stride,
                // and each run from another, so every run caches pages it has not seen.
                let stride = [7, 11, 13, 17][client];
                let mut n = (client * 15 + run * 23) % PAGES;
                while !killed.load(Ordering::SeqCst) {
                    let Some(fetched) = fetch(&base, n, (n + client).is_multiple_of(2)).await
                    else {
                        break; // the kill broke this transfer off, or refused it
                    };
                    // Even while the server is being killed, what completes is exact;
                    // and it was committed before it was sent, kill or not.
                    assert_exact(n, &fetched, &format!("run {run}, under load"));
                    completed.lock().unwrap().insert(n);
                    count.fetch_add(1, Ordering::SeqCst);
                    n = (n + stride) % PAGES;
                }
            })
        })
        .collect();
    while count.load(Ordering::SeqCst) < KILL_AFTER {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // SIGKILL (std's `kill` on Unix): no shutdown, no drain, no flush.
    server.child.kill().unwrap();
    killed.store(true, Ordering::SeqCst);
    server.child.wait().unwrap();
    for client in clients {
        client.await.unwrap();
    }
    let completed = completed.lock().unwrap().clone();
    completed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_no_committed_page_and_serves_none_corrupt() {
    let (origin, hits) = origin().await;
    let data = tempfile::tempdir().unwrap();
    let mut committed: BTreeSet<usize> = BTreeSet::new();
    for run in 0..=KILLS {
        let (server, base) = serve(&origin.url(""), data.path()).await;
        // Every page answered whole before an earlier kill comes from the store.
        let before: Vec<usize> = hits.iter().map(|h| h.load(Ordering::SeqCst)).collect();
        fetch_exact(&base, &committed, &format!("run {run}, after a restart")).await;
        for &n in &committed {
            assert_eq!(
                hits[n].load(Ordering::SeqCst),
                before[n],
                "run {run}: page {n} was committed before a kill, yet the origin was asked again"
            );
        }
        if run == KILLS {
            // The last run: every page, stored or not, is the origin's.
            fetch_exact(&base, &(0..PAGES).collect(), "after the last restart").await;
            drop(server);
            break;
        }
        committed.extend(load_until_killed(server, &base, run).await);
    }
    // The server is gone: its store opens, and every blob in it is whole.
    let store_dir = data.path().join("store");
    let store = store::Store::open(&store_dir, store::StoreConfig::default())
        .expect("the store opens after the kills");
    assert!(store.stats().blobs >= committed.len() as u64);
    drop(store);
    for path in files_under(&store_dir.join("blobs")) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            Hash::of(&bytes).to_hex(),
            name,
            "{} fails its hash",
            path.display()
        );
    }
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}
