//! `wirefold lab savings TRACE…`: for the status-200 responses of HAR files, WARC files
//! and version corpora, grouped by URL, how many could have been sent as a delta
//! against an earlier instance, how many were unchanged, and the bytes each method
//! (gzip, br, zstd, dcb, dcz, VCDIFF, the best per response) would have sent; per
//! content type, with query-URL clustering off and on, with bases kept per client or
//! at a shared proxy. After Mogul, Douglis, Feldmann & Krishnamurthy, "Potential
//! benefits of delta encoding and data compression for HTTP" (1997), section 5.

mod analysis;
mod method;
mod plot;
mod report;

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use crate::progress;
use crate::trace::{self, TraceLimits};
use crate::{LabError, OutputFormat};
use analysis::Analysis;
use report::{PerClientJson, SavingsReport, ScenarioJson, SkippedJson};

#[derive(Debug, clap::Args)]
pub struct SavingsArgs {
    /// HAR files, WARC files (plain or gzip per record) or version-corpus folders, read
    /// in the order given as one trace.
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    #[arg(long, value_enum, default_value_t)]
    pub format: OutputFormat,
    /// Write Figure 5-5 (savings-histogram.svg) into DIR.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Stop after reading N responses.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_responses: Option<u64>,
    /// Largest record block or body held in memory, MiB; larger ones are skipped and reported.
    #[arg(long, value_name = "MIB", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub max_body_mib: u64,
    /// Largest HAR file, MiB (a HAR is one JSON document, parsed whole).
    #[arg(long, value_name = "MIB", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_har_mib: u64,
}

const MIB: u64 = 1 << 20;

pub fn run(args: &SavingsArgs, out: &mut dyn Write) -> Result<(), LabError> {
    let started = Instant::now();
    let limits = TraceLimits {
        max_body: (args.max_body_mib * MIB) as usize,
        max_har: args.max_har_mib.saturating_mul(MIB),
    };
    let bar = progress::bar(None, progress::RESPONSES);
    let mut analysis = Analysis::new();
    let mut skipped = Vec::new();
    let mut read = 0u64;
    let mut stopped = false;
    'traces: for path in &args.traces {
        bar.set_message(path.display().to_string());
        for item in trace::open(path, limits)? {
            if args.max_responses.is_some_and(|max| read >= max) {
                stopped = true;
                break 'traces;
            }
            match item {
                Ok(exchange) => {
                    analysis.add(exchange);
                    read += 1;
                    bar.inc(1);
                }
                Err(s) => {
                    bar.suspend(|| eprintln!("warning: skipped {s}"));
                    skipped.push(SkippedJson::from(&s));
                }
            }
        }
    }
    bar.finish_and_clear();

    let scenario = |name: &str| ScenarioJson::new(analysis.scenario(name));
    let report = SavingsReport {
        traces: args
            .traces
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        proxy: scenario("proxy"),
        clustered: scenario("proxy_clustered"),
        per_client: PerClientJson {
            unclustered: scenario("per_client"),
            clustered: scenario("per_client_clustered"),
        },
        levels: report::levels(),
        max_responses: args.max_responses,
        stopped_at_max_responses: stopped,
        skipped,
        wall_s: started.elapsed().as_secs_f64(),
    };
    if let Some(dir) = &args.plot {
        let path = plot::write(dir, &analysis.scenario("proxy").total)?;
        eprintln!("wrote {}", path.display());
    }
    match args.format {
        OutputFormat::Json => {
            serde_json::to_writer_pretty(&mut *out, &report).map_err(std::io::Error::from)?;
            writeln!(out)?;
        }
        OutputFormat::Csv => report::write_csv(out, &analysis.scenarios)?,
        OutputFormat::Table => report::write_tables(out, &analysis.scenarios, &report)?,
    }
    Ok(())
}
