//! The command-line contract: exit codes, error messages naming the bad input,
//! start-up, graceful stop on SIGTERM, and the demo.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use support::{start, url_in, wirefold, Started};

fn curl(url: &str, extra: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-s", "-S", "--max-time", "20"])
        .args(extra)
        .arg(url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "curl {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn terminate(started: &mut Started) -> std::process::ExitStatus {
    let pid = started.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    for _ in 0..200 {
        if let Some(status) = started.child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("wirefold did not stop on SIGTERM");
}

#[test]
fn check_config_names_the_offending_key() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "origin = \"http://127.0.0.1:1\"\n[compression]\nmin_size = 10\n[[compression.profile]]\ntypes = [\"text/html\"]\ncached = \"br:12\"\non_the_fly = \"gzip:6\"\n").unwrap();
    let out = wirefold(&["serve", "--config", bad.to_str().unwrap(), "--check-config"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml") && err.contains("cached") && err.contains("br level 12"),
        "{err}"
    );

    std::fs::write(
        &bad,
        "origin = \"http://127.0.0.1:1\"\n[limits]\nheader_timeout = 3\n",
    )
    .unwrap();
    let err = String::from_utf8_lossy(
        &wirefold(&["serve", "--config", bad.to_str().unwrap(), "--check-config"]).stderr,
    )
    .into_owned();
    assert!(err.contains("header_timeout"), "{err}");

    let out = wirefold(&["serve", "--origin", "ftp://example", "--check-config"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("`origin`"));

    let out = wirefold(&["serve", "--check-config"]);
    assert!(!out.status.success());

    let good = dir.path().join("good.toml");
    std::fs::write(&good, "root = \"/\"\nlisten = \"127.0.0.1:0\"\n").unwrap();
    let out = wirefold(&[
        "serve",
        "--config",
        good.to_str().unwrap(),
        "--check-config",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn serve_link_on_the_network_without_tls_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let link_without_tls = [
        "serve",
        "--link",
        "--link-token",
        "s3cret",
        "--listen",
        "0.0.0.0:0",
        "--admin",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--check-config",
    ];
    let out = wirefold(&link_without_tls);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("0.0.0.0:0") && err.contains("--tls-self-signed") && err.contains("clear"),
        "{err}"
    );

    let mut with_tls = link_without_tls.to_vec();
    with_tls.push("--tls-self-signed");
    let out = wirefold(&with_tls);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn dict_train_sends_the_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    let mut started = start(
        &[
            "serve",
            "--root",
            dir.path().to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--admin-token",
            "s3cret",
            "--data-dir",
            dir.path().join("data").to_str().unwrap(),
        ],
        "listening on",
    );
    let admin = started
        .first_line
        .rsplit("admin http://")
        .next()
        .unwrap()
        .trim_end_matches([')', '\n'])
        .to_string();
    let train = |extra: &[&str]| {
        let mut args = vec![
            "dict",
            "train",
            "--pattern",
            "/nothing/*",
            "--admin",
            &admin,
        ];
        args.extend(extra);
        let out = wirefold(&args);
        assert!(!out.status.success(), "nothing stored: training fails");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = train(&[]);
    assert!(err.contains("admin token"), "{err}");
    let err = train(&["--admin-token", "s3cret"]);
    assert!(err.contains("no stored pages"), "{err}");
    terminate(&mut started);
}

/// The threads of process `pid` whose name starts with `prefix`, with the CPU each
/// has spent (clock ticks, user and system).
fn threads_named(pid: u32, prefix: &str) -> Vec<(String, u64)> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let (Ok(name), Ok(stat)) = (
            std::fs::read_to_string(task.join("comm")),
            std::fs::read_to_string(task.join("stat")),
        ) else {
            continue; // a thread that just ended
        };
        let name = name.trim().to_string();
        if !name.starts_with(prefix) {
            continue;
        }
        // After the name in parentheses: state, ppid, … utime (12th), stime (13th).
        let fields: Vec<&str> = stat[stat.rfind(") ").unwrap() + 2..]
            .split_whitespace()
            .collect();
        let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        threads.push((name, ticks));
    }
    threads.sort();
    threads
}

#[test]
fn connections_are_served_on_threads_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wirefold.toml");
    std::fs::write(&config, "connection_threads = 3\n").unwrap();
    let args = serve_args(dir.path(), &["--config", config.to_str().unwrap()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = start(&args, "listening on");
    let base = url_in(&started.first_line);
    let pid = started.child.id();
    // A thread names itself once it runs: give the three a moment.
    let mut before = threads_named(pid, "wirefold-conn");
    for _ in 0..100 {
        if before.len() == 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        before = threads_named(pid, "wirefold-conn");
    }
    let names: Vec<&str> = before.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        ["wirefold-conn-0", "wirefold-conn-1", "wirefold-conn-2"]
    );
    // Three connections of 400 requests each: one per thread, in turn.
    let url = format!("{base}/");
    let urls: Vec<&str> = std::iter::repeat_n(url.as_str(), 400).collect();
    for _ in 0..3 {
        let mut args = vec!["-o", "/dev/null", "-H", "Accept-Encoding: br"];
        args.extend_from_slice(&urls[..urls.len() - 1]);
        curl(urls[0], &args);
    }
    let after = threads_named(pid, "wirefold-conn");
    for ((name, was), (_, is)) in before.iter().zip(&after) {
        assert!(is > was, "{name} served nothing: {was} -> {is} ticks");
    }
}

#[test]
fn serve_answers_and_stops_gracefully_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("index.html"), "<h1>hello</h1>".repeat(100)).unwrap();
    let data = dir.path().join("data");
    let mut started = start(
        &[
            "serve",
            "--root",
            root.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--data-dir",
            data.to_str().unwrap(),
        ],
        "listening on",
    );
    let base = url_in(&started.first_line);
    assert_eq!(
        curl(&format!("{base}/"), &["--compressed"]),
        "<h1>hello</h1>".repeat(100)
    );
    let status = terminate(&mut started);
    assert!(status.success(), "clean exit after SIGTERM: {status:?}");
}

#[test]
fn a_corrupt_store_refuses_to_start_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    let index = store.join("index.redb");
    std::fs::write(&index, b"this is not a database, but it is somebody's data").unwrap();
    let out = wirefold(&[
        "serve",
        "--root",
        dir.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(index.to_str().unwrap()), "{err}");
    assert_eq!(
        std::fs::read(&index).unwrap(),
        b"this is not a database, but it is somebody's data"
    );
}

#[test]
fn demo_serves_its_sample_site_compressed_and_prints_its_status_page() {
    let mut started = start(&["demo", "--listen", "127.0.0.1:0"], "status");
    let open = started.earlier.iter().find(|l| l.contains("open")).unwrap();
    let base = url_in(open);
    let page = curl(
        &format!("{base}/"),
        &["--compressed", "-H", "Accept-Encoding: br"],
    );
    assert!(page.contains("The sample site"), "{page}");
    let headers = curl(
        &format!("{base}/"),
        &[
            "-s",
            "-o",
            "/dev/null",
            "-D",
            "-",
            "-H",
            "Accept-Encoding: br",
        ],
    );
    assert!(
        headers
            .to_ascii_lowercase()
            .contains("content-encoding: br"),
        "{headers}"
    );
    let status_page = curl(&format!("{}/", url_in(&started.first_line)), &[]);
    assert!(
        status_page.contains("<title>wirefold status</title>"),
        "{status_page}"
    );
    let status = terminate(&mut started);
    assert!(status.success());
}

/// The complete lines of a file (none while it does not exist).
fn lines_of(path: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .map(|l| l.trim_end().to_string())
        .collect()
}

/// Waits (at most 20 s, not a measurement) until `done` holds.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    for _ in 0..400 {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("gave up waiting for {what}");
}

fn signal(started: &Started, name: &str) {
    let pid = started.child.id().to_string();
    let sent = Command::new("kill").args([name, &pid]).status().unwrap();
    assert!(sent.success(), "kill {name} {pid}");
}

/// A served directory and the arguments that serve it on free ports with `extra`.
fn serve_args(dir: &std::path::Path, extra: &[&str]) -> Vec<String> {
    let root = dir.join("site");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "<h1>hello</h1>".repeat(100)).unwrap();
    let mut args: Vec<String> = ["serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"]
        .map(String::from)
        .to_vec();
    for (flag, value) in [("--root", root), ("--data-dir", dir.join("data"))] {
        args.push(flag.into());
        args.push(value.to_str().unwrap().into());
    }
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

#[test]
fn sigusr1_reopens_the_access_log_after_logrotate_moved_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let args = serve_args(dir.path(), &["--access-log", log.to_str().unwrap()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut started = start(&args, "listening on");
    let base = url_in(&started.first_line);
    curl(&format!("{base}/?before"), &[]);
    wait_for("the first line", || lines_of(&log).len() == 1);

    let rotated = dir.path().join("access.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    signal(&started, "-USR1");
    // The reopen creates the file anew before any line goes to it.
    wait_for("the log to be reopened", || log.exists());
    curl(&format!("{base}/?after"), &[]);
    wait_for("a line in the new file", || lines_of(&log).len() == 1);

    let old = lines_of(&rotated);
    assert_eq!(old.len(), 1, "{old:?}");
    assert!(old[0].contains("GET /?before HTTP/1.1\" 200"), "{old:?}");
    let new = lines_of(&log);
    assert!(new[0].contains("GET /?after HTTP/1.1\" 200"), "{new:?}");
    assert!(terminate(&mut started).success());
}

#[test]
fn a_reopen_that_fails_is_warned_about_once_and_the_log_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    let log = logs.join("access.log");
    let args = serve_args(dir.path(), &["--access-log", log.to_str().unwrap()]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_wirefold"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let collected = stderr.clone();
    let errors = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in errors.lines().map_while(Result::ok) {
            collected.lock().unwrap().push(line);
        }
    });
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let first_line = stdout.next().unwrap().unwrap();
    let mut started = Started {
        child,
        first_line,
        earlier: Vec::new(),
    };
    let base = url_in(&started.first_line);
    let admin = started
        .first_line
        .rsplit("admin http://")
        .next()
        .unwrap()
        .trim_end_matches(')')
        .to_string();
    let failures = || {
        let metrics = curl(&format!("http://{admin}/metrics"), &[]);
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("wirefold_access_log_reopen_failures_total "))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap()
    };

    // The log's directory goes away: reopening by name cannot work.
    let moved = dir.path().join("moved");
    std::fs::rename(&logs, &moved).unwrap();
    for attempt in 1..=2 {
        signal(&started, "-USR1");
        wait_for("the reopen to fail", || failures() == attempt);
    }
    curl(&format!("{base}/?after"), &[]);
    let kept = moved.join("access.log");
    wait_for("the line in the file open before", || {
        lines_of(&kept).iter().any(|l| l.contains("GET /?after"))
    });
    let warnings = stderr
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("cannot reopen the access log"))
        .count();
    assert_eq!(warnings, 1, "{:?}", stderr.lock().unwrap());
    assert!(terminate(&mut started).success());
}

#[test]
fn an_access_log_that_cannot_be_opened_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("no-such-dir/access.log");
    let args = serve_args(dir.path(), &["--access-log", log.to_str().unwrap()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = wirefold(&args);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`log.access`: cannot open") && err.contains(log.to_str().unwrap()),
        "{err}"
    );
}

#[test]
fn json_logs_are_one_json_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_wirefold"))
        .args([
            "serve",
            "--root",
            dir.path().to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
        ])
        .args([
            "--data-dir",
            dir.path().join("data").to_str().unwrap(),
            "--log-format",
            "json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(stdout.next().unwrap().unwrap().contains("listening on"));
    let pid = child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let out = child.wait_with_output().unwrap();
    let logs = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = logs.lines().collect();
    assert!(lines.len() >= 2, "start and shutdown are logged: {logs}");
    for line in lines {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            value.get("level").is_some() && value.get("fields").is_some(),
            "{line}"
        );
    }
}

#[test]
fn client_checks_its_configuration_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("client.toml");
    std::fs::write(
        &bad,
        "upstream = \"https://proxy.test:8443\"\nkeep_instance = 3\n",
    )
    .unwrap();
    let out = wirefold(&[
        "client",
        "--config",
        bad.to_str().unwrap(),
        "--check-config",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("client.toml") && err.contains("keep_instance"),
        "{err}"
    );

    let out = wirefold(&["client", "--check-config"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("`upstream`"));
    let out = wirefold(&[
        "client",
        "--upstream",
        "http://plain.test",
        "--check-config",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("https://"));
    let out = wirefold(&[
        "client",
        "--upstream",
        "https://proxy.test:8443",
        "--check-config",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Nothing listens upstream: the client proxy still starts, answers 502 naming the
    // link, and stops cleanly.
    let data = dir.path().join("data");
    let mut started = start(
        &[
            "client",
            "--upstream",
            "https://proxy.test:1",
            "--upstream-connect",
            "127.0.0.1:1",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--data-dir",
            data.to_str().unwrap(),
        ],
        "client proxy on",
    );
    let proxy = url_in(&started.first_line);
    let out = Command::new("curl")
        .args(["-s", "--max-time", "20", "-x", &proxy, "-w", "%{http_code}"])
        .arg("http://site.test/")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("cannot reach the server proxy") && text.ends_with("502"),
        "{text}"
    );
    assert!(terminate(&mut started).success());
}

/// One request on an open HTTP/1.1 connection; returns the response head and body.
fn exchange(connection: &mut std::net::TcpStream, path: &str) -> (String, Vec<u8>) {
    use std::io::{Read, Write};
    write!(
        connection,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept-Encoding: identity\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        connection.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let length: usize = header_in(&head, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no content-length in {head}"));
    let mut body = vec![0; length];
    connection.read_exact(&mut body).unwrap();
    (head, body)
}

fn header_in<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[test]
fn reload_applies_to_new_requests_keeps_connections_and_refuses_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("index.html"), "<h1>hello</h1>".repeat(100)).unwrap();
    let config = dir.path().join("wirefold.toml");
    let settings = |extra: &str| {
        format!(
            "root = {root:?}\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\ndata_dir = {data:?}\n{extra}",
            root = root.to_str().unwrap(),
            data = dir.path().join("data").to_str().unwrap(),
        )
    };
    std::fs::write(
        &config,
        settings("[files]\ncache_control = \"max-age=60\"\n"),
    )
    .unwrap();
    let log_path = dir.path().join("log");
    let log = std::fs::File::create(&log_path).unwrap();
    let started = support::start_logging_to(
        &["serve", "--config", config.to_str().unwrap()],
        "listening on",
        log,
    );
    let line = started.first_line.clone();
    let mut urls = line
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter(|w| w.starts_with("http://"));
    let base = urls.next().unwrap().to_string();
    let admin = urls
        .next()
        .unwrap()
        .trim_start_matches("http://")
        .to_string();
    let mut kept = std::net::TcpStream::connect(base.trim_start_matches("http://")).unwrap();
    let (head, body) = exchange(&mut kept, "/");
    assert_eq!(header_in(&head, "cache-control"), Some("max-age=60"));
    assert_eq!(body, "<h1>hello</h1>".repeat(100).as_bytes());

    // SIGHUP: the new value serves new requests, on the connection opened before too;
    // a key that needs a restart is named and keeps its running value.
    std::fs::write(
        &config,
        settings("[files]\ncache_control = \"max-age=5\"\n")
            .replace("listen = \"127.0.0.1:0\"", "listen = \"127.0.0.1:1\""),
    )
    .unwrap();
    let pid = started.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    let mut reloaded = false;
    for _ in 0..100 {
        let (head, _) = exchange(&mut kept, "/");
        if header_in(&head, "cache-control") == Some("max-age=5") {
            reloaded = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        reloaded,
        "the reloaded cache_control serves the open connection's next request"
    );
    let logged = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        logged.contains("needs a restart") && logged.contains("listen"),
        "{logged}"
    );

    // `wirefold reload` reports what it applied.
    std::fs::write(
        &config,
        settings("[files]\ncache_control = \"max-age=7\"\n"),
    )
    .unwrap();
    let out = wirefold(&["reload", "--admin", &admin]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["applied"],
        serde_json::json!(["files.cache_control"])
    );
    assert_eq!(
        report["needs_restart"],
        serde_json::json!([]),
        "listen is back to its running value"
    );

    // Bad files change nothing; each error names its key and, from the file, its line.
    let bad_files = [
        (
            settings("[files]\ncache_control = \"max-age=1\"\n[limits]\nheader_timeout_ms = 0\n[delta]\nhistory = 0\n"),
            vec!["line 8: `limits.header_timeout_ms`", "line 10: `delta.history`"],
        ),
        (settings("[files]\ncache_control = \"max-age=1\"\nno_such_key = 1\n"), vec!["no_such_key", "line 7"]),
        (settings("[files\ncache_control = \"max-age=1\"\n"), vec!["line 5"]),
    ];
    for (text, expected) in bad_files {
        std::fs::write(&config, &text).unwrap();
        let out = wirefold(&["reload", "--admin", &admin]);
        assert!(!out.status.success(), "{text}");
        let err = String::from_utf8_lossy(&out.stderr);
        for part in expected {
            assert!(err.contains(part), "{part:?} in {err}");
        }
        let (head, _) = exchange(&mut kept, "/");
        assert_eq!(
            header_in(&head, "cache-control"),
            Some("max-age=7"),
            "{text}"
        );
    }
    std::fs::remove_file(&config).unwrap();
    let out = wirefold(&["reload", "--admin", &admin]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("cannot read config file"),
        "{err}"
    );
    let (head, _) = exchange(&mut kept, "/");
    assert_eq!(header_in(&head, "cache-control"), Some("max-age=7"));
    let logged = std::fs::read_to_string(&log_path).unwrap();
    assert!(logged.contains("configuration reload refused"), "{logged}");
}
