//! `wirefold-loadgen`: open-loop load at a fixed rate, idle keep-alive connections, and
//! Surge-like on/off clients added in steps.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use loadgen::idle::{self, IdleOptions};
use loadgen::rate::{self, RateOptions};
use loadgen::schedule::Schedule;
use loadgen::surge::{self, Site, SurgeOptions};
use loadgen::target::Target;

#[derive(Parser)]
#[command(
    name = "wirefold-loadgen",
    about = "Benchmark load over HTTP/1.1 keep-alive: a fixed request rate with latency from each request's due time, or many idle connections"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Send GETs at a fixed rate (request i due at start + i/RATE, connection i mod
    /// CONNECTIONS sends it) and report latency from each request's due time:
    /// p50/p90/p99/p99.9/max as text, then one JSON line. Exits 1 if nothing was
    /// answered.
    Rate(RateArgs),
    /// Open CONNECTIONS keep-alive connections, send one GET on each and read its whole
    /// answer, print a line starting "established" once all are open, hold them idle
    /// for HOLD seconds, then report as text and one JSON line. Exits 1 unless every
    /// connection got a 2xx answer and stayed open to the end.
    Idle(IdleArgs),
    /// Surge-like clients (Zipf page popularity, each page's objects fetched after it
    /// on one keep-alive connection, Pareto idle times between pages), added in
    /// steps; reports each step's completed requests per second and errors as text,
    /// then one JSON line. Exits 1 if nothing completed.
    Surge(SurgeArgs),
}

#[derive(Args)]
struct SurgeArgs {
    /// HOST:PORT
    #[arg(long)]
    addr: String,
    /// JSON file: {"pages": [{"path": "/p1.html", "objects": ["/a.jpg", ...]}, ...]},
    /// most popular page first.
    #[arg(long)]
    site: std::path::PathBuf,
    /// Clients in each step, comma-separated and non-decreasing: 1,2,4,8,16.
    #[arg(long, value_delimiter = ',', required = true)]
    steps: Vec<usize>,
    /// Seconds each step lasts.
    #[arg(long, value_parser = seconds, default_value = "20")]
    step_seconds: Duration,
    /// Mean idle seconds of a client between pages.
    #[arg(long, value_parser = seconds, default_value = "2")]
    mean_off: Duration,
    /// Zipf exponent of page popularity.
    #[arg(long, default_value_t = 1.0)]
    zipf: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A request header, "name: value" (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

#[derive(Args)]
struct RateArgs {
    #[arg(long, help = "http://HOST[:PORT]/PATH")]
    url: String,
    /// Requests per second.
    #[arg(long)]
    rate: f64,
    /// Seconds of scheduled requests.
    #[arg(long, value_parser = seconds)]
    duration: Duration,
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// A request header, "name: value" (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Seconds to wait for outstanding answers after the schedule ends; requests not
    /// answered by then are reported unfinished.
    #[arg(long, value_parser = seconds, default_value = "5")]
    drain: Duration,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

#[derive(Args)]
struct IdleArgs {
    /// HOST:PORT
    #[arg(long)]
    addr: String,
    /// The request target of each connection's one request.
    #[arg(long, default_value = "/")]
    path: String,
    #[arg(long, default_value_t = 10_000)]
    connections: usize,
    /// A request header, "name: value" (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Seconds to hold the connections idle once all are open.
    #[arg(long, value_parser = seconds)]
    hold: Duration,
    /// Connections being opened at once.
    #[arg(long, default_value_t = 256)]
    open_at_once: usize,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

#[derive(Args)]
struct RuntimeArgs {
    /// Threads doing the loader's I/O (the dispatcher of `rate` is one more). One is
    /// cheapest per request and leaves the most CPU to the server on a small machine.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

/// A number of seconds: 3, 0.5.
fn seconds(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("expected a positive number of seconds, got {text:?}"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let threads = match &cli.command {
        Command::Rate(args) => args.runtime.threads,
        Command::Idle(args) => args.runtime.threads,
        Command::Surge(args) => args.runtime.threads,
    };
    if threads == 0 {
        eprintln!("wirefold-loadgen: --threads must be at least 1");
        return ExitCode::from(2);
    }
    // One thread runs the current-thread scheduler: no worker to unpark per request
    // (with two, futex calls were half the loader's system calls).
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(threads);
        builder
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("wirefold-loadgen: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Rate(args) => runtime.block_on(run_rate(args)),
        Command::Idle(args) => runtime.block_on(run_idle(args)),
        Command::Surge(args) => runtime.block_on(run_surge(args)),
    }
}

fn usage_error(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("wirefold-loadgen: {e}");
    ExitCode::from(2)
}

async fn run_rate(args: RateArgs) -> ExitCode {
    let target = match Target::from_url(&args.url, &args.headers) {
        Ok(target) => target,
        Err(e) => return usage_error(e),
    };
    let schedule = match Schedule::new(args.rate, args.duration, args.connections) {
        Ok(schedule) => schedule,
        Err(e) => return usage_error(e),
    };
    let report = rate::run(RateOptions {
        target,
        schedule,
        drain: args.drain,
    })
    .await;
    println!("{}", report.text(&args.url));
    println!("{}", report.json(&args.url));
    if report.answered == 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

async fn run_idle(args: IdleArgs) -> ExitCode {
    let target = match Target::from_addr(&args.addr, &args.path, &args.headers) {
        Ok(target) => target,
        Err(e) => return usage_error(e),
    };
    let options = IdleOptions {
        target,
        connections: args.connections,
        hold: args.hold,
        open_at_once: args.open_at_once,
    };
    let announce = |opened: &idle::Opened| {
        // stdout is line-buffered: a script watching for this line sees it now.
        println!("{}", opened.text(args.connections, &args.addr, args.hold));
    };
    match idle::run(options, announce).await {
        Err(e) => usage_error(e),
        Ok(report) => {
            println!("{}", report.text(&args.addr));
            println!("{}", report.json(&args.addr));
            if report.complete() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

async fn run_surge(args: SurgeArgs) -> ExitCode {
    let target = match Target::from_addr(&args.addr, "/", &args.headers) {
        Ok(target) => target,
        Err(e) => return usage_error(e),
    };
    let site: Site = match std::fs::read(&args.site)
        .map_err(|e| e.to_string())
        .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
    {
        Ok(site) => site,
        Err(e) => return usage_error(format!("site {}: {e}", args.site.display())),
    };
    if let Err(e) = site.check() {
        return usage_error(format!("site {}: {e}", args.site.display()));
    }
    if args.steps.contains(&0) || args.steps.windows(2).any(|pair| pair[1] < pair[0]) {
        return usage_error("--steps must be positive and non-decreasing");
    }
    if !(args.zipf.is_finite() && args.zipf >= 0.0) {
        return usage_error("--zipf must be a non-negative number");
    }
    let report = surge::run(SurgeOptions {
        target,
        site,
        steps: args.steps,
        step_length: args.step_seconds,
        mean_off: args.mean_off,
        zipf: args.zipf,
        seed: args.seed,
    })
    .await;
    println!("{}", report.text());
    println!("{}", report.json());
    if report.steps.iter().all(|step| step.completed == 0) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
