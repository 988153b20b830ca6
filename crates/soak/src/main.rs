//! `wirefold-soak`: the soak benchmark's origin and driver (`bench/soak.sh`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use soak::drive::{DriveOptions, PairTarget};
use soak::origin::OriginOptions;
use soak::sample::Watched;

#[derive(Parser)]
#[command(
    name = "wirefold-soak",
    about = "The soak benchmark: an origin whose every body is known, and a driver that verifies every answer"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the soak catalogue: every body a pure function of its URL and the
    /// version its ETag names. Prints its URL, then `ready`; serves until killed.
    Origin {
        #[arg(long, value_name = "ADDR")]
        listen: SocketAddr,
        /// Corrupt one body in N (the driver's self-test: it must find them).
        #[arg(long, value_name = "N")]
        corrupt_one_in: Option<u64>,
    },
    /// Load wirefold with every coding, delta and hostile request, verifying every
    /// answer. Progress on stderr; the last line of stdout is the JSON summary.
    /// Exits 1 when a body was wrong or a watched process went away.
    Drive(DriveArgs),
}

#[derive(clap::Args)]
struct DriveArgs {
    /// `wirefold serve --origin <the soak origin>`: its listener.
    #[arg(long, value_name = "ADDR")]
    direct: Option<SocketAddr>,
    /// `wirefold client`'s listener (the proxy pair's forward proxy).
    #[arg(long, value_name = "ADDR", requires = "pair_origin")]
    pair_proxy: Option<SocketAddr>,
    /// The soak origin, as requests through the pair name it.
    #[arg(long, value_name = "ADDR", requires = "pair_proxy")]
    pair_origin: Option<SocketAddr>,
    /// How long to run: 90s, 30m, 1h.
    #[arg(long, value_parser = parse_duration, default_value = "30m")]
    duration: Duration,
    /// Workers, each with one keep-alive connection.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Share of the workers on the pair when both targets are given.
    #[arg(long, default_value_t = 0.375)]
    pair_share: f64,
    /// Share of hostile requests.
    #[arg(long, default_value_t = 0.05)]
    hostile_share: f64,
    /// A process to sample (RSS, open descriptors): NAME=PID, repeatable.
    #[arg(long, value_name = "NAME=PID")]
    watch: Vec<Watched>,
    /// How often to sample the watched processes.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    sample_every: Duration,
    /// Where to write summary.json, samples.csv, minutes.csv and soak.svg.
    #[arg(long, value_name = "DIR")]
    results: Option<PathBuf>,
    /// Seed of the workers' choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// `500ms`, `90s`, `30m`, `1h`, or seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}`: expected a number and a unit (500ms, 90s, 30m, 1h)"))?;
    let duration = match unit {
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return Err(format!("`{text}`: the unit must be ms, s, m or h")),
    };
    if duration.is_zero() {
        return Err(format!("`{text}`: must be more than zero"));
    }
    Ok(duration)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("wirefold-soak: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Origin {
            listen,
            corrupt_one_in,
        } => runtime.block_on(origin(listen, OriginOptions { corrupt_one_in })),
        Command::Drive(args) => runtime.block_on(drive(args)),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("wirefold-soak: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn origin(listen: SocketAddr, options: OriginOptions) -> Result<ExitCode, String> {
    let origin = soak::origin::start(listen, options)
        .await
        .map_err(|e| format!("listening on {listen}: {e}"))?;
    println!("http://{}", origin.addr);
    println!("ready");
    std::future::pending::<()>().await;
    Ok(ExitCode::SUCCESS)
}

async fn drive(args: DriveArgs) -> Result<ExitCode, String> {
    let options = DriveOptions {
        direct: args.direct,
        pair: args
            .pair_proxy
            .zip(args.pair_origin)
            .map(|(proxy, origin)| PairTarget { proxy, origin }),
        duration: args.duration,
        connections: args.connections,
        pair_share: args.pair_share,
        hostile_share: args.hostile_share,
        watch: args.watch,
        sample_every: args.sample_every,
        seed: args.seed,
        ..DriveOptions::default()
    };
    let report = soak::drive::run(options).await.map_err(|e| e.to_string())?;
    if let Some(dir) = &args.results {
        report.write(dir)?;
        eprintln!("wirefold-soak: results in {}", dir.display());
    }
    for (kind, outcomes) in &report.kinds {
        eprintln!(
            "wirefold-soak: {kind:<28} {:>9} requests {:>9} correct {:>7} refused {:>5} wrong {:>6} failed",
            outcomes.requests, outcomes.correct, outcomes.refused, outcomes.wrong, outcomes.failed
        );
    }
    eprintln!("wirefold-soak: statuses {:?}", report.statuses);
    eprintln!("wirefold-soak: codings {:?}", report.codings);
    println!("{}", report.json_line());
    let failed = report.wrong_bodies > 0 || report.errors.contains_key("process_exited");
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("15"), Ok(Duration::from_secs(15)));
        for bad in ["", "m", "0s", "5d", "-1s", "1.5m"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
