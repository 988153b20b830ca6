//! `wirefold lab estimate`: the transfer-time estimate used to choose variants,
//!
//! T = (3/2 + log2(⌈size/mss⌉ + 1))·rtt + size/bw
//!
//! (Chandranmenon & Varghese's equation 1: a handshake and the request's half trip, the
//! slow-start rounds of an initial window of one segment, and the serialization time),
//! as a calculator for one size or over a folder's pages with their inline resources.

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;

use crate::aid::pages::{self, SiteArgs};
use crate::report::{self, Row, TextLayout};
use crate::{LabError, OutputFormat};

#[derive(Debug, clap::Args)]
pub struct EstimateArgs {
    /// Bytes to transfer (the calculator).
    #[arg(
        long,
        value_name = "BYTES",
        required_unless_present = "dir",
        conflicts_with = "dir"
    )]
    pub size: Option<u64>,
    /// Estimate every HTML page under DIR, with its inline resources, instead.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Round-trip time, milliseconds.
    #[arg(long, value_parser = positive)]
    pub rtt_ms: f64,
    /// Bottleneck bandwidth, megabits (10^6 bits) per second.
    #[arg(long, value_parser = positive)]
    pub bandwidth_mbps: f64,
    /// TCP segment payload, bytes.
    #[arg(long, default_value_t = 1460, value_parser = clap::value_parser!(u64).range(1..))]
    pub mss: u64,
    #[command(flatten)]
    pub site: SiteArgs,
    #[arg(long, value_enum, default_value_t)]
    pub format: OutputFormat,
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s}: expected a number above 0")),
    }
}

/// The estimate and its three parts, in milliseconds.
#[derive(Debug, Serialize, PartialEq)]
pub struct Estimate {
    /// The page URL (`null` for the calculator).
    pub url: Option<String>,
    pub bytes: u64,
    pub segments: u64,
    /// 3/2 · rtt: the handshake and the request's way to the server.
    pub setup_ms: f64,
    /// log2(segments + 1) · rtt: slow-start rounds from a window of one segment.
    pub slow_start_ms: f64,
    /// size / bw.
    pub transmission_ms: f64,
    pub total_ms: f64,
}

impl Estimate {
    pub fn new(
        url: Option<String>,
        bytes: u64,
        rtt_ms: f64,
        bandwidth_mbps: f64,
        mss: u64,
    ) -> Self {
        let segments = bytes.div_ceil(mss);
        let setup_ms = 1.5 * rtt_ms;
        let slow_start_ms = (segments as f64 + 1.0).log2() * rtt_ms;
        // bits / (Mbit/s) = microseconds.
        let transmission_ms = bytes as f64 * 8.0 / bandwidth_mbps / 1000.0;
        Self {
            url,
            bytes,
            segments,
            setup_ms,
            slow_start_ms,
            transmission_ms,
            total_ms: setup_ms + slow_start_ms + transmission_ms,
        }
    }
}

impl Row for Estimate {
    const COLUMNS: &'static [&'static str] = &[
        "url",
        "bytes",
        "segments",
        "setup_ms",
        "slow_start_ms",
        "transmission_ms",
        "total_ms",
    ];

    fn values(&self) -> Vec<String> {
        vec![
            self.url.clone().unwrap_or_default(),
            self.bytes.to_string(),
            self.segments.to_string(),
            format!("{:.1}", self.setup_ms),
            format!("{:.1}", self.slow_start_ms),
            format!("{:.1}", self.transmission_ms),
            format!("{:.1}", self.total_ms),
        ]
    }
}

#[derive(Debug, Serialize)]
struct Params {
    rtt_ms: f64,
    bandwidth_mbps: f64,
    mss: u64,
    /// Set for `--dir`: what a resource not on disk counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    default_resource_bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
struct Report {
    estimates: Vec<Estimate>,
    params: Params,
}

pub fn run(args: &EstimateArgs, out: &mut dyn Write) -> Result<(), LabError> {
    let estimate =
        |url, bytes| Estimate::new(url, bytes, args.rtt_ms, args.bandwidth_mbps, args.mss);
    let (estimates, assumed) = match (&args.dir, args.size) {
        (Some(dir), _) => {
            let documents = pages::load(std::slice::from_ref(dir), &args.site)?;
            let assumed: usize = documents.iter().map(|d| d.resources_assumed()).sum();
            let rows = documents
                .iter()
                .map(|d| estimate(Some(d.url.clone()), d.bytes_total()))
                .collect();
            (rows, Some(assumed))
        }
        (None, Some(size)) => (vec![estimate(None, size)], None),
        (None, None) => unreachable!("clap requires --size or --dir"),
    };
    let report = Report {
        estimates,
        params: Params {
            rtt_ms: args.rtt_ms,
            bandwidth_mbps: args.bandwidth_mbps,
            mss: args.mss,
            default_resource_bytes: assumed.map(|_| args.site.default_resource_bytes),
        },
    };
    match args.format {
        OutputFormat::Json => {
            serde_json::to_writer_pretty(&mut *out, &report).map_err(std::io::Error::from)?;
            writeln!(out)?;
        }
        OutputFormat::Csv => report::write_rows(out, TextLayout::Csv, "", &report.estimates)?,
        OutputFormat::Table => {
            let title = format!(
                "T = (3/2 + log2(ceil(size/mss) + 1))·rtt + size/bw  (rtt {} ms, bw {} Mbit/s, \
                 MSS {} B)",
                args.rtt_ms, args.bandwidth_mbps, args.mss
            );
            report::write_rows(out, TextLayout::Table, &title, &report.estimates)?;
            if let Some(assumed) = assumed {
                writeln!(
                    out,
                    "\nbytes = page + inline resources; {assumed} resources were not found on \
                     disk and count {} bytes each (--default-resource-bytes).",
                    args.site.default_resource_bytes
                )?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Estimate;

    #[test]
    fn parts_of_the_estimate() {
        // 14 600 bytes = 10 segments of 1460; rtt 100 ms; 8 Mbit/s moves 1000 bytes/ms.
        let e = Estimate::new(None, 14_600, 100.0, 8.0, 1460);
        assert_eq!(e.segments, 10);
        assert_eq!(e.setup_ms, 150.0);
        assert!((e.slow_start_ms - 100.0 * 11f64.log2()).abs() < 1e-9);
        assert!((e.transmission_ms - 14.6).abs() < 1e-9);
        assert!((e.total_ms - (150.0 + 345.943_161_8 + 14.6)).abs() < 1e-6);
        // 1 segment: log2(2) = 1 round.
        assert_eq!(Estimate::new(None, 1, 10.0, 1.0, 1460).slow_start_ms, 10.0);
    }
}
