//! Real Redis servers for tests and benchmarks of a fleet's shared store: one server, or
//! a Redis Cluster of masters, each on a free loopback port with its files in a
//! directory of the caller's, without persistence (a restart starts empty, as after a
//! crash of a cache). Requires `redis-server` and `redis-cli` (Debian: `redis-server`,
//! `redis-tools`; `scripts/test.sh` installs them).

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to answer `PING` after starting, or a cluster to agree
/// on its slots.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// A `redis-server` process; killed when dropped.
pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    cluster: bool,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free port, with `dir` (created) for its files.
    pub fn start(dir: &Path) -> io::Result<RedisServer> {
        RedisServer::start_node(dir, false)
    }

    fn start_node(dir: &Path, cluster: bool) -> io::Result<RedisServer> {
        std::fs::create_dir_all(dir)?;
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let mut server = RedisServer {
            port,
            dir: dir.to_owned(),
            cluster,
            child: None,
        };
        server.restart()?;
        Ok(server)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server with SIGKILL (a crash: nothing is saved) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on its port (empty: there is no persistence), waiting
    /// until it answers.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        let mut command = Command::new("redis-server");
        command
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--save", "", "--appendonly", "no"])
            // As docs/operations.md asks of a fleet's Redis.
            .args(["--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru"])
            // `DEBUG SLEEP` makes a slow server for the tests of the time budget.
            .args(["--enable-debug-command", "local"])
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.cluster {
            // A restarted node forgets the cluster: only a fresh cluster is started.
            command.args(["--cluster-enabled", "yes", "--cluster-config-file"]);
            command.arg(self.dir.join("nodes.conf"));
        }
        let child = command.spawn().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot run redis-server (Debian package redis-server): {e}"),
            )
        })?;
        self.child = Some(child);
        wait_for(|| {
            self.ask("PING")
                .is_ok_and(|reply| reply.starts_with("+PONG"))
        })
        .map_err(|()| self.failure("does not answer PING"))
    }

    /// Sends one inline command and returns the start of the reply.
    pub fn ask(&self, command: &str) -> io::Result<String> {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        stream.write_all(format!("{command}\r\n").as_bytes())?;
        let mut reply = vec![0; 4096];
        let n = stream.read(&mut reply)?;
        Ok(String::from_utf8_lossy(&reply[..n]).into_owned())
    }

    fn failure(&self, what: &str) -> io::Error {
        let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        io::Error::other(format!(
            "redis-server on port {} {what}; its log:\n{log}",
            self.port
        ))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster of masters without replicas, made by `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `masters` nodes (at least 3, Redis' minimum) under `dir` and joins them,
    /// waiting until every node reports the cluster ok.
    pub fn start(dir: &Path, masters: usize) -> io::Result<RedisCluster> {
        let nodes = (0..masters)
            .map(|n| RedisServer::start_node(&dir.join(format!("node-{n}")), true))
            .collect::<io::Result<Vec<_>>>()?;
        let addresses: Vec<String> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot run redis-cli: {e}")))?;
        if !created.status.success() {
            return Err(io::Error::other(format!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&created.stdout),
                String::from_utf8_lossy(&created.stderr)
            )));
        }
        for node in &nodes {
            wait_for(|| {
                node.ask("CLUSTER INFO")
                    .is_ok_and(|info| info.contains("cluster_state:ok"))
            })
            .map_err(|()| node.failure("never reports cluster_state:ok"))?;
        }
        Ok(RedisCluster { nodes })
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…`: every node as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }
}

/// Polls `ready` until it holds or [`READY_WITHIN`] has passed.
fn wait_for(mut ready: impl FnMut() -> bool) -> Result<(), ()> {
    let start = Instant::now();
    while start.elapsed() < READY_WITHIN {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(())
}
