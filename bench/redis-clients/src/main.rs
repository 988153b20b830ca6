//! One cell of bench/redis-clients.sh: one Redis client, one calling mode, one
//! concurrency, against one server or one cluster, for a bounded time; prints one JSON
//! line. `--setup` writes the data every cell reads.
//!
//! A simulated request is what the shared store tier (crates/store/src/shared.rs) sends
//! for one revalidated response, as three store calls, each one hop to the blocking
//! pool in wirefold:
//!   1. get_record:  GET wf:r:{<record>}                          (~2 KB value)
//!   2. put_record:  SET wf:r:{<record>} (~2 KB), then ZADD and ZREMRANGEBYRANK on
//!                   wf:i:{<group>} (two checkouts of a pooled connection, as shared.rs)
//!   3. get_blob:    MGET of the blob's head and chunks (512 KiB chunks, one hash tag)
//! Five commands, five round trips, the same sequence for every client.
//!
//! Clients and modes:
//!   redis-blocking / pool      redis-rs blocking Connection or ClusterConnection, from a
//!                              pool of up to 16 idle ones exactly as shared.rs keeps it
//!                              (pop or connect, push back if fewer than 16 idle); each
//!                              store call runs in spawn_blocking.
//!   redis-blocking / pool64    the same with up to 64 idle connections kept.
//!   redis-async / block_on     redis-rs MultiplexedConnection or cluster_async
//!                              ClusterConnection, each store call in spawn_blocking
//!                              driving the future with Handle::block_on.
//!   redis-async / async        the same connection, store calls awaited in the task.
//!   fred / block_on, fred / async   fred's Pool (round robin over N multiplexed
//!                              clients; clustered when the target is a cluster).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use redis::{Cmd, ConnectionLike, FromRedisValue, RedisResult};

const CHUNK_BYTES: usize = 512 * 1024;
const RECORD_BYTES: usize = 2048;
const RECORDS: usize = 512;
const GROUPS: usize = 16;
const BLOBS: usize = 16;
/// shared.rs: idle connections kept for reuse (mode `pool`; mode `pool64` keeps 64, to
/// tell the pool's cap from the client).
const IDLE_CONNECTIONS: usize = 16;
const MAX_GROUP_KEYS: i64 = 10_000;
/// Connection and response timeout. wirefold's budget is 100 ms; the benchmark uses 1 s
/// so that a slow answer shows in p99 instead of as an error (errors are counted).
const BUDGET: Duration = Duration::from_secs(1);

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers)
        .enable_all()
        .build()
        .expect("runtime");
    if args.setup {
        setup(&args);
        return;
    }
    runtime.block_on(run(args));
}

struct Args {
    setup: bool,
    cluster: bool,
    nodes: Vec<(String, u16)>,
    client: String,
    mode: String,
    concurrency: usize,
    seconds: f64,
    warmup: f64,
    blob_bytes: usize,
    fred_pool: usize,
    workers: usize,
    server_pids: Vec<u32>,
}

impl Args {
    fn parse() -> Args {
        let mut map = HashMap::new();
        let mut setup = false;
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            if flag == "--setup" {
                setup = true;
                continue;
            }
            let name = flag
                .strip_prefix("--")
                .unwrap_or_else(|| panic!("bad argument {flag}"));
            let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
            map.insert(name.to_owned(), value);
        }
        let get = |name: &str, default: &str| {
            map.get(name).cloned().unwrap_or_else(|| default.to_owned())
        };
        let nodes = get("nodes", "127.0.0.1:6379")
            .split(',')
            .map(|node| {
                let (host, port) = node.rsplit_once(':').expect("HOST:PORT");
                (host.to_owned(), port.parse().expect("port"))
            })
            .collect();
        Args {
            setup,
            cluster: get("topology", "server") == "cluster",
            nodes,
            client: get("client", "redis-blocking"),
            mode: get("mode", "pool"),
            concurrency: get("concurrency", "1").parse().expect("concurrency"),
            seconds: get("seconds", "5").parse().expect("seconds"),
            warmup: get("warmup", "0.5").parse().expect("warmup"),
            blob_bytes: get("blob-bytes", "150000").parse().expect("blob-bytes"),
            fred_pool: get("fred-pool", "4").parse().expect("fred-pool"),
            workers: get("workers", "2").parse().expect("workers"),
            server_pids: get("server-pids", "")
                .split(',')
                .filter(|p| !p.is_empty())
                .map(|p| p.parse().expect("pid"))
                .collect(),
        }
    }

    /// A cluster client with shared.rs's settings (one redirect followed, the budget
    /// on connecting and answers).
    fn cluster_client(&self) -> redis::cluster::ClusterClient {
        redis::cluster::ClusterClient::builder(self.urls())
            .connection_timeout(BUDGET)
            .response_timeout(BUDGET)
            .retries(1)
            .min_retry_wait(1)
            .max_retry_wait(BUDGET.as_millis() as u64)
            .build()
            .expect("cluster client")
    }

    fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|(h, p)| format!("redis://{h}:{p}"))
            .collect()
    }
}

/// The keys of the data set, named as shared.rs names them.
struct Workload {
    /// (record key, group member, group key)
    records: Vec<(String, String, String)>,
    value: Bytes,
    /// Each blob's keys: head first, then its chunks (one hash tag).
    blobs: Vec<Vec<String>>,
    /// Bytes an MGET of one blob returns: the 8-byte length prefix and the data.
    blob_reply_bytes: usize,
}

fn chunk_count(len: usize) -> usize {
    len.div_ceil(CHUNK_BYTES).max(1)
}

impl Workload {
    fn new(blob_bytes: usize) -> Workload {
        let records = (0..RECORDS)
            .map(|i| {
                let group = format!("http:site{}.example/", i % GROUPS);
                let member = format!("{group}page/{i}");
                (
                    format!("wf:r:{{{member}}}"),
                    member,
                    format!("wf:i:{{{group}}}"),
                )
            })
            .collect();
        let blobs = (0..BLOBS)
            .map(|i| {
                let hex = format!("{:016x}{:048x}", blob_bytes, i);
                let mut keys = vec![format!("wf:b:{{{hex}}}")];
                for n in 1..chunk_count(blob_bytes) {
                    keys.push(format!("wf:b:{{{hex}}}:{n}"));
                }
                keys
            })
            .collect();
        Workload {
            records,
            value: Bytes::from(vec![b'r'; RECORD_BYTES]),
            blobs,
            blob_reply_bytes: 8 + blob_bytes,
        }
    }
}

// ---------------------------------------------------------------- redis-rs, blocking

enum BlockingClient {
    Server(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

enum BlockingConnection {
    Server(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl BlockingConnection {
    fn like(&mut self) -> &mut dyn ConnectionLike {
        match self {
            BlockingConnection::Server(con) => con,
            BlockingConnection::Cluster(con) => con.as_mut(),
        }
    }
}

/// shared.rs's pool and call path, less the breaker's state changes (a mutex taken on
/// each call, as there).
struct BlockingPool {
    client: BlockingClient,
    idle: Mutex<Vec<BlockingConnection>>,
    health: Mutex<Instant>,
    connects: AtomicU64,
    max_idle: usize,
}

impl BlockingPool {
    fn open(args: &Args, max_idle: usize) -> BlockingPool {
        let client = if args.cluster {
            BlockingClient::Cluster(args.cluster_client())
        } else {
            BlockingClient::Server(redis::Client::open(args.urls()[0].as_str()).expect("client"))
        };
        BlockingPool {
            client,
            idle: Mutex::new(Vec::new()),
            health: Mutex::new(Instant::now()),
            connects: AtomicU64::new(0),
            max_idle,
        }
    }

    fn connect(&self) -> RedisResult<BlockingConnection> {
        self.connects.fetch_add(1, Ordering::Relaxed);
        match &self.client {
            BlockingClient::Server(client) => {
                let con = client.get_connection_with_timeout(BUDGET)?;
                con.set_read_timeout(Some(BUDGET))?;
                con.set_write_timeout(Some(BUDGET))?;
                Ok(BlockingConnection::Server(con))
            }
            BlockingClient::Cluster(client) => {
                let con = client.get_connection()?;
                con.set_read_timeout(Some(BUDGET))?;
                con.set_write_timeout(Some(BUDGET))?;
                Ok(BlockingConnection::Cluster(Box::new(con)))
            }
        }
    }

    fn call<T>(
        &self,
        op: impl FnOnce(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> RedisResult<T> {
        drop(self.health.lock().unwrap());
        let pooled = self.idle.lock().unwrap().pop();
        let mut con = match pooled {
            Some(con) => con,
            None => self.connect()?,
        };
        let result = op(con.like());
        if result.is_ok() {
            drop(self.health.lock().unwrap());
            let mut idle = self.idle.lock().unwrap();
            if idle.len() < self.max_idle {
                idle.push(con);
            }
        }
        result
    }

    fn get_record(&self, key: &str) -> Result<usize, String> {
        let value: Option<Vec<u8>> = self
            .call(|con| redis::cmd("GET").arg(key).query(con))
            .map_err(|e| e.to_string())?;
        Ok(value.map_or(0, |v| v.len()))
    }

    fn put_record(
        &self,
        key: &str,
        member: &str,
        group: &str,
        value: &[u8],
        score: u64,
    ) -> Result<(), String> {
        self.call(|con| redis::cmd("SET").arg(key).arg(value).query::<()>(con))
            .map_err(|e| e.to_string())?;
        self.call(|con| {
            redis::cmd("ZADD")
                .arg(group)
                .arg(score)
                .arg(member)
                .query::<()>(con)?;
            redis::cmd("ZREMRANGEBYRANK")
                .arg(group)
                .arg(0)
                .arg(-(MAX_GROUP_KEYS + 1))
                .query::<()>(con)
        })
        .map_err(|e| e.to_string())
    }

    fn get_blob(&self, keys: &[String]) -> Result<usize, String> {
        let mut mget = redis::cmd("MGET");
        for key in keys {
            mget.arg(key);
        }
        let parts: Vec<Option<Vec<u8>>> = self
            .call(|con| mget.query(con))
            .map_err(|e| e.to_string())?;
        Ok(parts
            .iter()
            .map(|p| p.as_ref().map_or(0, |v| v.len()))
            .sum())
    }
}

// ---------------------------------------------------------------- redis-rs, async

#[derive(Clone)]
enum RedisAsync {
    Server(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl RedisAsync {
    async fn open(args: &Args) -> RedisAsync {
        if args.cluster {
            let client = args.cluster_client();
            RedisAsync::Cluster(
                client
                    .get_async_connection()
                    .await
                    .expect("cluster connection"),
            )
        } else {
            let client = redis::Client::open(args.urls()[0].as_str()).expect("client");
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(BUDGET))
                .set_response_timeout(Some(BUDGET));
            RedisAsync::Server(
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .expect("multiplexed connection"),
            )
        }
    }

    async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, String> {
        let result = match self {
            RedisAsync::Server(con) => cmd.query_async(&mut con.clone()).await,
            RedisAsync::Cluster(con) => cmd.query_async(&mut con.clone()).await,
        };
        result.map_err(|e| e.to_string())
    }

    async fn get_record(&self, key: &str) -> Result<usize, String> {
        let value: Option<Vec<u8>> = self.query(redis::cmd("GET").arg(key)).await?;
        Ok(value.map_or(0, |v| v.len()))
    }

    async fn put_record(
        &self,
        key: &str,
        member: &str,
        group: &str,
        value: &[u8],
        score: u64,
    ) -> Result<(), String> {
        self.query::<()>(redis::cmd("SET").arg(key).arg(value))
            .await?;
        self.query::<()>(redis::cmd("ZADD").arg(group).arg(score).arg(member))
            .await?;
        self.query::<()>(
            redis::cmd("ZREMRANGEBYRANK")
                .arg(group)
                .arg(0)
                .arg(-(MAX_GROUP_KEYS + 1)),
        )
        .await
    }

    async fn get_blob(&self, keys: &[String]) -> Result<usize, String> {
        let mut mget = redis::cmd("MGET");
        for key in keys {
            mget.arg(key);
        }
        let parts: Vec<Option<Vec<u8>>> = self.query(&mget).await?;
        Ok(parts
            .iter()
            .map(|p| p.as_ref().map_or(0, |v| v.len()))
            .sum())
    }
}

// ---------------------------------------------------------------- fred

mod fred_client {
    use super::*;
    use fred::prelude::*;

    pub async fn open(args: &Args) -> Pool {
        let mut config = Config::default();
        config.server = if args.cluster {
            ServerConfig::new_clustered(args.nodes.clone())
        } else {
            ServerConfig::new_centralized(args.nodes[0].0.clone(), args.nodes[0].1)
        };
        let pool = Builder::from_config(config)
            .with_performance_config(|perf| perf.default_command_timeout = BUDGET)
            .with_connection_config(|con| con.connection_timeout = BUDGET)
            .build_pool(args.fred_pool)
            .expect("fred pool");
        pool.init().await.expect("fred init");
        pool
    }

    pub async fn get_record(pool: &Pool, key: &str) -> Result<usize, String> {
        let value: Option<Bytes> = pool.get(key).await.map_err(|e| e.to_string())?;
        Ok(value.map_or(0, |v| v.len()))
    }

    pub async fn put_record(
        pool: &Pool,
        key: &str,
        member: &str,
        group: &str,
        value: &Bytes,
        score: u64,
    ) -> Result<(), String> {
        let err = |e: Error| e.to_string();
        pool.set::<(), _, _>(key, value.clone(), None, None, false)
            .await
            .map_err(err)?;
        pool.zadd::<(), _, _>(group, None, None, false, false, (score as f64, member))
            .await
            .map_err(err)?;
        pool.zremrangebyrank::<(), _>(group, 0, -(MAX_GROUP_KEYS + 1))
            .await
            .map_err(err)
    }

    pub async fn get_blob(pool: &Pool, keys: &[String]) -> Result<usize, String> {
        let parts: Vec<Option<Bytes>> =
            pool.mget(keys.to_vec()).await.map_err(|e| e.to_string())?;
        Ok(parts
            .iter()
            .map(|p| p.as_ref().map_or(0, |v| v.len()))
            .sum())
    }
}

// ---------------------------------------------------------------- the store seen by a task

#[derive(Clone)]
enum Store {
    Blocking(Arc<BlockingPool>),
    RedisAsync(RedisAsync),
    Fred(fred::prelude::Pool),
}

impl Store {
    async fn get_record(&self, key: &str) -> Result<usize, String> {
        match self {
            Store::Blocking(pool) => pool.get_record(key),
            Store::RedisAsync(con) => con.get_record(key).await,
            Store::Fred(pool) => fred_client::get_record(pool, key).await,
        }
    }

    async fn put_record(
        &self,
        key: &str,
        member: &str,
        group: &str,
        value: &Bytes,
        score: u64,
    ) -> Result<(), String> {
        match self {
            Store::Blocking(pool) => pool.put_record(key, member, group, value, score),
            Store::RedisAsync(con) => con.put_record(key, member, group, value, score).await,
            Store::Fred(pool) => {
                fred_client::put_record(pool, key, member, group, value, score).await
            }
        }
    }

    async fn get_blob(&self, keys: &[String]) -> Result<usize, String> {
        match self {
            Store::Blocking(pool) => pool.get_blob(keys),
            Store::RedisAsync(con) => con.get_blob(keys).await,
            Store::Fred(pool) => fred_client::get_blob(pool, keys).await,
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Each store call in spawn_blocking; a blocking client calls directly, an async one
    /// through Handle::block_on.
    Blocking,
    /// Store calls awaited in the task.
    Async,
}

/// Runs one store call the way `mode` says.
async fn hop<T, F>(mode: Mode, handle: &tokio::runtime::Handle, make: F) -> Result<T, String>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T, String>> + Send + 'static,
{
    match mode {
        Mode::Async => make.await,
        Mode::Blocking => {
            let handle = handle.clone();
            tokio::task::spawn_blocking(move || handle.block_on(make))
                .await
                .map_err(|e| e.to_string())?
        }
    }
}

/// The blocking client's request: each store call a plain function call on a blocking
/// pool thread, as wirefold makes it.
async fn request_pool(
    pool: &Arc<BlockingPool>,
    work: &Arc<Workload>,
    n: usize,
) -> Result<(), String> {
    let record = n % RECORDS;
    let blob = n % BLOBS;
    let join = |e: tokio::task::JoinError| e.to_string();
    let (p, w) = (pool.clone(), work.clone());
    let got = tokio::task::spawn_blocking(move || p.get_record(&w.records[record].0))
        .await
        .map_err(join)??;
    if got != RECORD_BYTES {
        return Err(format!("record of {got} bytes"));
    }
    let (p, w) = (pool.clone(), work.clone());
    let score = n as u64;
    tokio::task::spawn_blocking(move || {
        let (key, member, group) = &w.records[record];
        p.put_record(key, member, group, &w.value, score)
    })
    .await
    .map_err(join)??;
    let (p, w) = (pool.clone(), work.clone());
    let got = tokio::task::spawn_blocking(move || p.get_blob(&w.blobs[blob]))
        .await
        .map_err(join)??;
    if got != work.blob_reply_bytes {
        return Err(format!(
            "blob of {got} bytes, expected {}",
            work.blob_reply_bytes
        ));
    }
    Ok(())
}

async fn request(
    store: &Store,
    work: &Arc<Workload>,
    mode: Mode,
    handle: &tokio::runtime::Handle,
    n: usize,
) -> Result<(), String> {
    if let Store::Blocking(pool) = store {
        return request_pool(pool, work, n).await;
    }
    let record = n % RECORDS;
    let blob = n % BLOBS;
    let (s, w) = (store.clone(), work.clone());
    let got = hop(mode, handle, async move {
        s.get_record(&w.records[record].0).await
    })
    .await?;
    if got != RECORD_BYTES {
        return Err(format!("record of {got} bytes"));
    }
    let (s, w) = (store.clone(), work.clone());
    let score = n as u64;
    hop(mode, handle, async move {
        let (key, member, group) = &w.records[record];
        s.put_record(key, member, group, &w.value, score).await
    })
    .await?;
    let (s, w) = (store.clone(), work.clone());
    let got = hop(
        mode,
        handle,
        async move { s.get_blob(&w.blobs[blob]).await },
    )
    .await?;
    if got != work.blob_reply_bytes {
        return Err(format!(
            "blob of {got} bytes, expected {}",
            work.blob_reply_bytes
        ));
    }
    Ok(())
}

fn process_cpu_us() -> u64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(usage.ru_utime) + us(usage.ru_stime)
}

/// CPU time of other processes (the Redis servers), from /proc/PID/stat.
fn servers_cpu_us(pids: &[u32]) -> u64 {
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .map(|stat| {
            let after = &stat[stat.rfind(')').unwrap_or(0) + 2..];
            let fields: Vec<&str> = after.split(' ').collect();
            // utime and stime are fields 14 and 15 of the whole line, 12 and 13 here.
            let ticks: u64 =
                fields[11].parse::<u64>().unwrap_or(0) + fields[12].parse::<u64>().unwrap_or(0);
            ticks * 1_000_000 / tick
        })
        .sum()
}

#[derive(Default)]
struct TaskResult {
    latencies_us: Vec<u32>,
    errors: u64,
    first_error: Option<String>,
}

async fn run(args: Args) {
    let handle = tokio::runtime::Handle::current();
    let mode = match args.mode.as_str() {
        "pool" | "pool64" | "block_on" => Mode::Blocking,
        "async" => Mode::Async,
        other => panic!("unknown mode {other}"),
    };
    let store = match args.client.as_str() {
        "redis-blocking" => {
            assert!(
                mode == Mode::Blocking,
                "the blocking client has only the pool mode"
            );
            let max_idle = if args.mode == "pool64" {
                64
            } else {
                IDLE_CONNECTIONS
            };
            Store::Blocking(Arc::new(BlockingPool::open(&args, max_idle)))
        }
        "redis-async" => Store::RedisAsync(RedisAsync::open(&args).await),
        "fred" => Store::Fred(fred_client::open(&args).await),
        other => panic!("unknown client {other}"),
    };
    let work = Arc::new(Workload::new(args.blob_bytes));
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let measure_to = measure_from + Duration::from_secs_f64(args.seconds);
    let mut tasks = Vec::new();
    for t in 0..args.concurrency {
        let (store, work, handle) = (store.clone(), work.clone(), handle.clone());
        tasks.push(tokio::spawn(async move {
            let mut result = TaskResult::default();
            let mut n = t * 7919;
            loop {
                let began = Instant::now();
                if began >= measure_to {
                    break;
                }
                let outcome = request(&store, &work, mode, &handle, n).await;
                n += 1;
                let ended = Instant::now();
                if ended < measure_from || ended > measure_to {
                    continue;
                }
                match outcome {
                    Ok(()) => result
                        .latencies_us
                        .push((ended - began).as_micros().min(u32::MAX as u128) as u32),
                    Err(e) => {
                        result.errors += 1;
                        result.first_error.get_or_insert(e);
                    }
                }
            }
            result
        }));
    }
    tokio::time::sleep_until(measure_from.into()).await;
    let (cpu0, server0, t0) = (
        process_cpu_us(),
        servers_cpu_us(&args.server_pids),
        Instant::now(),
    );
    tokio::time::sleep_until(measure_to.into()).await;
    let (cpu1, server1, t1) = (
        process_cpu_us(),
        servers_cpu_us(&args.server_pids),
        Instant::now(),
    );
    let mut latencies = Vec::new();
    let mut errors = 0;
    for task in tasks {
        match tokio::time::timeout(Duration::from_secs(10), task).await {
            Ok(Ok(result)) => {
                latencies.extend(result.latencies_us);
                errors += result.errors;
                if let Some(e) = result.first_error {
                    eprintln!("error: {e}");
                }
            }
            _ => errors += 1,
        }
    }
    latencies.sort_unstable();
    let requests = latencies.len() as u64;
    let pct = |p: f64| -> u32 {
        if latencies.is_empty() {
            return 0;
        }
        latencies[((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1]
    };
    let span = (t1 - t0).as_secs_f64();
    let per = |us: u64| {
        if requests == 0 {
            0.0
        } else {
            us as f64 / requests as f64
        }
    };
    let connects = match &store {
        Store::Blocking(pool) => pool.connects.load(Ordering::Relaxed),
        Store::RedisAsync(_) => 1,
        Store::Fred(_) => args.fred_pool as u64,
    };
    println!(
        "{{\"topology\":\"{}\",\"client\":\"{}\",\"mode\":\"{}\",\"concurrency\":{},\"blob_bytes\":{},\"seconds\":{:.3},\"requests\":{},\"errors\":{},\"ops_per_s\":{:.1},\"p50_us\":{},\"p99_us\":{},\"cpu_us_per_req\":{:.1},\"server_cpu_us_per_req\":{:.1},\"connects\":{}}}",
        if args.cluster { "cluster" } else { "server" },
        args.client,
        args.mode,
        args.concurrency,
        args.blob_bytes,
        span,
        requests,
        errors,
        requests as f64 / span,
        pct(0.50),
        pct(0.99),
        per(cpu1 - cpu0),
        per(server1.saturating_sub(server0)),
        connects,
    );
    // fred's and redis-rs's background tasks end with the runtime.
    std::process::exit(0);
}

/// Writes the records (their group index too) and the blobs of both sizes.
fn setup(args: &Args) {
    let pool = BlockingPool::open(args, IDLE_CONNECTIONS);
    for blob_bytes in [150_000usize, 1_200_000] {
        let work = Workload::new(blob_bytes);
        for keys in &work.blobs {
            let data = vec![b'b'; blob_bytes];
            let mut chunks = data.chunks(CHUNK_BYTES);
            let first = chunks.next().unwrap_or_default();
            let mut head = (blob_bytes as u64).to_be_bytes().to_vec();
            head.extend_from_slice(first);
            let mut mset = redis::cmd("MSET");
            mset.arg(&keys[0]).arg(head);
            for (n, chunk) in chunks.enumerate() {
                mset.arg(&keys[n + 1]).arg(chunk);
            }
            pool.call(|con| mset.query::<()>(con)).expect("MSET");
        }
        if blob_bytes == 150_000 {
            for (n, (key, member, group)) in work.records.iter().enumerate() {
                pool.put_record(key, member, group, &work.value, n as u64)
                    .expect("record");
            }
        }
    }
    eprintln!("setup done: {RECORDS} records, {BLOBS} blobs each of 150000 and 1200000 bytes");
}
