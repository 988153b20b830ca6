//! A fleet: two `wirefold serve` instances on one origin, sharing their store on a real
//! Redis (one server, then a Redis Cluster of three masters), behind nginx balancing
//! round robin. `wirefold get` keeps one cache, like a browser, so consecutive
//! requests land on alternate instances: a dictionary one instance announced is
//! fetched from the other, a request naming it (`Available-Dictionary`) gets `dcz`
//! from both, and a changed page comes as a delta (226 against the held instance)
//! through either; a dictionary trained on one instance, from pages both stored, is
//! linked by both. Redis killed with SIGKILL mid-run and restarted: every body stays
//! the origin's, and deltas resume. Two client proxies (`wirefold client --store`)
//! share their held instances on one Redis.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

mod servers;
mod support;

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use base64::Engine;
use codec::dictionary::{self, DictionaryCoding};
use servers::curl;
use support::{corpus_file, get, serve, Started};
use testbed::redis::{RedisCluster, RedisServer};

/// Versions of one real page, in order.
fn page_version(n: usize) -> Vec<u8> {
    corpus_file(&format!(
        "html/w3c__manifest/index-html--recent/{n:03}.html"
    ))
}

/// A port free now, from below the kernel's ephemeral range (32768 and up by
/// default): a port the kernel picked and gave back could be picked again for the
/// next `--listen 127.0.0.1:0`, and the instance or nginx meant for it would then
/// fail to bind.
fn free_port() -> u16 {
    use std::hash::{BuildHasher, RandomState};
    let random = RandomState::new();
    (0u64..)
        .map(|n| 10_000 + (random.hash_one(n) % 20_000) as u16)
        .find(|&port| TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok())
        .unwrap()
}

/// nginx in one process (no daemon, no workers: it runs as the test's user): the
/// origin, serving `root` with `Cache-Control: no-cache`, and the balancer, round
/// robin over the instances, logging which one answered each request and with
/// which coding.
struct Nginx {
    child: Child,
    dir: PathBuf,
}

impl Nginx {
    fn start(
        dir: &Path,
        root: &Path,
        origin_port: u16,
        balancer_port: u16,
        instances: &[u16],
    ) -> Nginx {
        let upstreams: String = instances
            .iter()
            .map(|port| format!("server 127.0.0.1:{port};"))
            .collect();
        let d = dir.display();
        let conf = format!(
            "daemon off; master_process off; pid {d}/nginx.pid; error_log {d}/error.log;
events {{}}
http {{
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;
  uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  log_format fleet '$upstream_addr $request_uri $upstream_http_content_encoding $status';
  server {{
    listen 127.0.0.1:{origin_port};
    root {root};
    access_log off;
    add_header Cache-Control no-cache;
    types {{ text/html html; }}
  }}
  upstream fleet {{ {upstreams} }}
  server {{
    listen 127.0.0.1:{balancer_port};
    access_log {d}/balancer.log fleet;
    location / {{ proxy_pass http://fleet; proxy_set_header Host $http_host; }}
  }}
}}
",
            root = root.display(),
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        // Killed and waited for on drop, whatever happens next.
        let nginx = Nginx {
            child: Command::new("nginx")
                .arg("-e")
                .arg(dir.join("error.log"))
                .arg("-c")
                .arg(dir.join("nginx.conf"))
                .stdin(Stdio::null())
                .spawn()
                .expect("nginx runs"),
            dir: dir.to_owned(),
        };
        // Up when both ports accept.
        for _ in 0..400 {
            let up = [origin_port, balancer_port]
                .iter()
                .all(|port| std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, *port)).is_ok());
            if up {
                return nginx;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!(
            "nginx did not start: {}",
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        );
    }

    /// The balancer's log, a line per request.
    fn answers(&self) -> Vec<Answer> {
        std::fs::read_to_string(self.dir.join("balancer.log"))
            .unwrap_or_default()
            .lines()
            .map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                Answer {
                    instance: fields[0].into(),
                    uri: fields[1].into(),
                    coding: fields[2].into(),
                    status: fields[3].into(),
                }
            })
            .collect()
    }
}

/// Which instance answered a request, and how.
#[derive(Debug)]
struct Answer {
    instance: String,
    uri: String,
    coding: String,
    status: String,
}

impl Answer {
    /// The page sent as a delta: against a dictionary, or against a held instance.
    fn is_page_delta(&self) -> bool {
        self.uri == "/spec.html" && (self.coding == "dcz" || self.status == "226")
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Two instances, the origin and the balancer, and the client's cache.
struct Fleet {
    dir: tempfile::TempDir,
    root: PathBuf,
    _instances: Vec<Started>,
    /// The instances' admin listeners.
    admins: Vec<u16>,
    nginx: Nginx,
    url: String,
    version: usize,
}

impl Fleet {
    fn start(store: &str) -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let (origin_port, balancer_port) = (free_port(), free_port());
        // A slow assumed client link makes a delta worth computing on every request. A
        // generous budget: on a loaded machine Redis may take longer than the default
        // 100 ms, and a write skipped then would make the counts below vary.
        let config = dir.path().join("wirefold.toml");
        std::fs::write(
            &config,
            "store_budget_ms = 2000\n[delta]\nassumed_bandwidth_bps = 1000000\n",
        )
        .unwrap();
        let origin = format!("http://127.0.0.1:{origin_port}");
        let admins = [free_port(), free_port()];
        let instances: Vec<(Started, String)> = ["a", "b"]
            .iter()
            .zip(admins)
            .map(|(name, admin)| {
                let data = dir.path().join(name);
                let admin = format!("127.0.0.1:{admin}");
                serve(&[
                    "--origin",
                    &origin,
                    "--store",
                    store,
                    "--listen",
                    "127.0.0.1:0",
                    "--admin",
                    &admin,
                    "--data-dir",
                    data.to_str().unwrap(),
                    "--config",
                    config.to_str().unwrap(),
                ])
            })
            .collect();
        let ports: Vec<u16> = instances
            .iter()
            .map(|(_, url)| url.rsplit(':').next().unwrap().parse().unwrap())
            .collect();
        let nginx = Nginx::start(dir.path(), &root, origin_port, balancer_port, &ports);
        let mut fleet = Fleet {
            dir,
            root,
            _instances: instances.into_iter().map(|(started, _)| started).collect(),
            admins: admins.to_vec(),
            nginx,
            url: format!("http://127.0.0.1:{balancer_port}/spec.html"),
            version: 0,
        };
        fleet.publish_next_version();
        fleet
    }

    /// Puts the next version of the page on the origin (with a later modification
    /// time, so its validators change even within one second) and returns it.
    fn publish_next_version(&mut self) -> Vec<u8> {
        self.version += 1;
        let page = page_version(self.version);
        let path = self.root.join("spec.html");
        std::fs::write(&path, &page).unwrap();
        let modified =
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + self.version as u64 * 10);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        page
    }

    /// `wirefold get` of the page through the balancer; the body must be the origin's.
    fn get_page(&self, expected: &[u8]) {
        let cache = self.dir.path().join("client-cache");
        let out = get(&[&self.url, "--cache", cache.to_str().unwrap()]);
        let report = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{report}");
        assert!(
            out.stdout == expected,
            "version {} differs from the origin's: {report}",
            self.version
        );
    }

    /// Instances that answered the page as a delta.
    fn delta_answers(&self) -> BTreeSet<String> {
        self.nginx
            .answers()
            .into_iter()
            .filter(Answer::is_page_delta)
            .map(|answer| answer.instance)
            .collect()
    }
}

/// A dictionary from one instance, `dcz` against it from both; after changes on the
/// origin, deltas through both.
async fn dictionaries_and_deltas_cross_instances(fleet: &mut Fleet) {
    let first = page_version(fleet.version);
    fleet.get_page(&first);
    let answers = fleet.nginx.answers();
    let fetched: Vec<&Answer> = answers
        .iter()
        .filter(|answer| answer.uri.starts_with("/.wirefold/dict/"))
        .collect();
    let [dictionary] = fetched[..] else {
        panic!("one dictionary fetched: {answers:?}");
    };
    assert_ne!(
        dictionary.instance, answers[0].instance,
        "the dictionary comes from the instance that did not announce it: {answers:?}"
    );
    // The page's derived dictionary is its first instance.
    let hash = dictionary.uri.rsplit('/').next().unwrap();
    assert_eq!(hash, hex::encode(dictionary::sha256(&first)));

    let page = fleet.publish_next_version();
    let available = format!(
        "Available-Dictionary: :{}:",
        base64::engine::general_purpose::STANDARD.encode(dictionary::sha256(&first))
    );
    for _ in 0..2 {
        let answer = curl(
            &fleet.url,
            &[
                "-H",
                "Accept-Encoding: dcz, br",
                "-H",
                &available,
                "-H",
                "Sec-Fetch-Dest: document",
            ],
        )
        .await;
        assert_eq!(
            answer.header("content-encoding"),
            Some("dcz"),
            "{:?}",
            answer.headers
        );
        let decoded = dictionary::decode(DictionaryCoding::Dcz, &first, &answer.body, 1 << 24)
            .expect("a dcz body against the dictionary");
        assert!(decoded == page, "dcz decodes to the origin's page");
    }
    let dcz_from: BTreeSet<String> = fleet
        .nginx
        .answers()
        .into_iter()
        .filter(|answer| answer.coding == "dcz")
        .map(|answer| answer.instance)
        .collect();
    assert_eq!(
        dcz_from.len(),
        2,
        "dcz from both instances: {:?}",
        fleet.nginx.answers()
    );

    fleet.get_page(&page);
    for _ in 0..3 {
        let page = fleet.publish_next_version();
        fleet.get_page(&page);
    }
    assert_eq!(
        fleet.delta_answers().len(),
        2,
        "deltas through either instance: {:?}",
        fleet.nginx.answers()
    );
}

/// Pages of the site both instances store (in turn), a dictionary trained from them on
/// one instance, and both linking it.
async fn a_trained_dictionary_is_linked_by_both(fleet: &mut Fleet) {
    let base = fleet.url.trim_end_matches("/spec.html").to_string();
    for n in 1..=12 {
        let other = corpus_file(&format!(
            "html/w3c__manifest/index-html--recent/{:03}.html",
            30 - n
        ));
        std::fs::write(fleet.root.join(format!("other-{n}.html")), other).unwrap();
        let answer = curl(&format!("{base}/other-{n}.html"), &[]).await;
        assert_eq!(answer.status, 200);
    }
    let admin = format!(
        "http://127.0.0.1:{}/dictionaries/train?pattern=%2F*&max_size=8192",
        fleet.admins[0]
    );
    let trained = curl(&admin, &["-X", "POST"]).await;
    let report = String::from_utf8_lossy(&trained.body).into_owned();
    assert_eq!(trained.status, 200, "{report}");
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert!(
        report["samples"].as_u64().unwrap() > 12,
        "samples stored by both instances: {report}"
    );
    let url = report["url"].as_str().unwrap().to_string();
    fleet.publish_next_version();
    // An instance reads a page's links from the store again once its memo of them
    // expires (5 s after the page's last answer): wait for the first answer linking
    // the new dictionary from each instance.
    let links_it = |headers: &[(String, String)]| {
        headers
            .iter()
            .any(|(name, value)| name.eq_ignore_ascii_case("link") && value.contains(&url))
    };
    // Two answers in a row (nginx alternates the instances) link it.
    let mut in_a_row = 0;
    for _ in 0..60 {
        let page = curl(&fleet.url, &["-H", "Accept-Encoding: br"]).await;
        in_a_row = if links_it(&page.headers) {
            in_a_row + 1
        } else {
            0
        };
        if in_a_row == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        in_a_row, 2,
        "both instances linked the trained dictionary within 15 s"
    );
    let before = fleet.nginx.answers().len();
    for _ in 0..2 {
        let page = curl(&fleet.url, &["-H", "Accept-Encoding: br"]).await;
        // Among the Link fields (preload hints are others).
        assert!(
            page.headers
                .iter()
                .any(|(name, value)| name.eq_ignore_ascii_case("link") && value.contains(&url)),
            "the trained dictionary is linked: {:?}",
            page.headers
        );
    }
    let answers = fleet.nginx.answers();
    assert_ne!(
        answers[before].instance,
        answers[before + 1].instance,
        "{answers:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_on_one_redis_shares_dictionaries_and_survives_redis_crashing() {
    let dir = tempfile::tempdir().unwrap();
    let mut redis = RedisServer::start(dir.path()).unwrap();
    let mut fleet = Fleet::start(&redis.url());
    dictionaries_and_deltas_cross_instances(&mut fleet).await;
    a_trained_dictionary_is_linked_by_both(&mut fleet).await;

    // Redis crashes mid-run: every body is still the origin's.
    redis.kill();
    for _ in 0..3 {
        let page = fleet.publish_next_version();
        fleet.get_page(&page);
    }
    // It comes back empty; the instances reconnect and deltas resume.
    redis.restart().unwrap();
    let before = fleet.nginx.answers().len();
    let mut resumed = false;
    for _ in 0..12 {
        let page = fleet.publish_next_version();
        fleet.get_page(&page);
        if fleet.nginx.answers()[before..]
            .iter()
            .any(Answer::is_page_delta)
        {
            resumed = true;
            break;
        }
        // The instances retry Redis with backoff: give them the time between requests.
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        resumed,
        "deltas resume after Redis restarts: {:?}",
        fleet.nginx.answers()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_on_a_redis_cluster_shares_dictionaries() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::start(dir.path(), 3).unwrap();
    let mut fleet = Fleet::start(&cluster.url());
    dictionaries_and_deltas_cross_instances(&mut fleet).await;
    a_trained_dictionary_is_linked_by_both(&mut fleet).await;
}

/// Client proxies sharing their held instances on one Redis (`wirefold client
/// --store`): what one kept, another offers as its base, so the server proxy confirms
/// it instead of sending the page again, and a change comes to either as a delta.
#[tokio::test(flavor = "multi_thread")]
async fn client_proxies_on_one_redis_share_held_instances() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path()).unwrap();
    let version = Arc::new(AtomicUsize::new(1));
    let current = version.clone();
    let origin = servers::origin(move |_| {
        let n = current.load(Ordering::SeqCst);
        let etag = format!("\"v{n}\"");
        let fields = [
            ("content-type", "text/html; charset=utf-8"),
            ("cache-control", "no-cache"),
            ("etag", etag.as_str()),
        ];
        servers::response(200, &fields, page_version(n))
    })
    .await;
    let url = origin.url("/spec.html");
    // Client proxy A in this process, B the binary; both on the same Redis.
    let pair = servers::start_pair(|_| {}, |client| client.store = Some(redis.url())).await;
    let server = pair.server.running.addr;
    let ca = pair.server.data.path().join("self-signed-cert.pem");
    let b_data = dir.path().join("client-b");
    let b = support::start(
        &[
            "client",
            "--upstream",
            &format!("https://localhost:{}", server.port()),
            "--upstream-connect",
            &server.to_string(),
            "--upstream-ca",
            ca.to_str().unwrap(),
            "--store",
            &redis.url(),
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--data-dir",
            b_data.to_str().unwrap(),
        ],
        "client proxy on",
    );
    let proxies = [pair.proxy(), support::url_in(&b.first_line)];
    let outcomes = || async {
        let text =
            String::from_utf8(curl(&pair.server.admin_url("/metrics"), &[]).await.body).unwrap();
        let count = |result: &str| {
            servers::metric(
                &text,
                &format!("wirefold_link_responses_total{{result=\"{result}\"}}"),
            )
        };
        (count("confirm"), count("delta"))
    };
    let get_through = |proxy: &str| {
        let proxy = proxy.to_owned();
        let url = url.clone();
        async move { curl(&url, &["-x", &proxy, "--noproxy", ""]).await }
    };

    let first = get_through(&proxies[0]).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body, page_version(1), "A: the origin's page");
    assert_eq!(outcomes().await, (0.0, 0.0), "A held nothing: sent whole");

    let second = get_through(&proxies[1]).await;
    assert_eq!(second.body, page_version(1), "B: the origin's page");
    assert_eq!(
        outcomes().await,
        (1.0, 0.0),
        "B offered the instance A kept on Redis: confirmed, not sent again"
    );

    version.store(2, Ordering::SeqCst);
    let changed = get_through(&proxies[1]).await;
    assert_eq!(changed.body, page_version(2), "B: the changed page");
    assert_eq!(outcomes().await, (1.0, 1.0), "a delta against version 1");
    let again = get_through(&proxies[0]).await;
    assert_eq!(again.body, page_version(2), "A: the changed page");
    assert_eq!(
        outcomes().await,
        (2.0, 1.0),
        "A offered the instance B kept: confirmed"
    );
}
