//! `wirefold lab aid DIR…`: for each HTML document, where its last inline reference sits,
//! its bytes with its inline resources, and the round trips a client needs to hold it
//! all without and with automatic inline download — the server sending the inline
//! resources unasked right after the page (Chandranmenon & Varghese 2001, equation 1
//! and Figure 5). The model is in [`model`] and docs/lab.md.

mod model;
pub mod pages;
mod plot;

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;

use crate::report::{self, Row, TextLayout};
use crate::{LabError, OutputFormat};
pub use model::{Fetch, Tcp};
use pages::{Document, SiteArgs};

#[derive(Debug, clap::Args)]
pub struct AidArgs {
    /// Folders of HTML pages (walked recursively), HTML files, or HAR / WARC traces.
    #[arg(required = true, value_name = "DIR")]
    pub inputs: Vec<PathBuf>,
    /// Congestion window of a new TCP connection, in segments (1 as in 2001, 10 today).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub initial_window: u64,
    /// TCP segment payload, bytes.
    #[arg(long, default_value_t = 1460, value_parser = clap::value_parser!(u64).range(1..))]
    pub mss: u64,
    /// Most connections a client opens to the server (browsers: 6 per host).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..))]
    pub connections: u64,
    #[command(flatten)]
    pub site: SiteArgs,
    #[arg(long, value_enum, default_value_t)]
    pub format: OutputFormat,
    /// Write an SVG figure of the round trips per document to DIR.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

/// One document's result (the `documents` entries of the JSON report).
#[derive(Debug, Serialize)]
struct DocumentRow {
    url: String,
    page_bytes: u64,
    /// Distinct inline resources.
    resources: usize,
    /// Of those, how many were neither on disk nor in the trace and count
    /// `default_resource_bytes`.
    resources_assumed: usize,
    bytes_total: u64,
    /// `null` when the page references nothing.
    last_ref_offset: Option<u64>,
    rtts_without: u64,
    rtts_with: u64,
}

impl Row for DocumentRow {
    const COLUMNS: &'static [&'static str] = &[
        "url",
        "page_bytes",
        "resources",
        "assumed",
        "bytes_total",
        "last_ref_offset",
        "rtts_without",
        "rtts_with",
        "saved",
    ];

    fn values(&self) -> Vec<String> {
        vec![
            self.url.clone(),
            self.page_bytes.to_string(),
            self.resources.to_string(),
            self.resources_assumed.to_string(),
            self.bytes_total.to_string(),
            self.last_ref_offset
                .map_or(String::new(), |o| o.to_string()),
            self.rtts_without.to_string(),
            self.rtts_with.to_string(),
            (self.rtts_without as i64 - self.rtts_with as i64).to_string(),
        ]
    }
}

#[derive(Debug, Serialize)]
struct Params {
    #[serde(flatten)]
    tcp: Tcp,
    base_url: String,
    default_resource_bytes: u64,
}

#[derive(Debug, Serialize)]
struct Summary {
    documents: usize,
    /// Documents whose round trips AID lowers, and those it raises.
    documents_faster: usize,
    documents_slower: usize,
    mean_rtts_without: f64,
    mean_rtts_with: f64,
    resources: usize,
    resources_assumed: usize,
}

#[derive(Debug, Serialize)]
struct Report {
    documents: Vec<DocumentRow>,
    params: Params,
    summary: Summary,
}

pub fn run(args: &AidArgs, out: &mut dyn Write) -> Result<(), LabError> {
    let documents = pages::load(&args.inputs, &args.site)?;
    let tcp = Tcp {
        initial_window: args.initial_window,
        mss: args.mss,
        connections: usize::try_from(args.connections).unwrap_or(usize::MAX),
    };
    let rows: Vec<DocumentRow> = documents.iter().map(|d| measure(&tcp, d)).collect();
    if let Some(dir) = &args.plot {
        let figure = plot::write(dir, &tcp, &rows)?;
        eprintln!("wrote {}", figure.display());
    }
    let report = Report {
        summary: summarize(&rows),
        params: Params {
            tcp,
            base_url: args.site.base_url.to_string(),
            default_resource_bytes: args.site.default_resource_bytes,
        },
        documents: rows,
    };
    match args.format {
        OutputFormat::Json => {
            serde_json::to_writer_pretty(&mut *out, &report).map_err(std::io::Error::from)?;
            writeln!(out)?;
        }
        OutputFormat::Csv => report::write_rows(out, TextLayout::Csv, "", &report.documents)?,
        OutputFormat::Table => write_table(out, &report)?,
    }
    Ok(())
}

fn measure(tcp: &Tcp, document: &Document) -> DocumentRow {
    let fetches: Vec<Fetch> = document
        .resources
        .iter()
        .map(|r| Fetch {
            known_at_byte: r.tag_end,
            bytes: r.bytes,
        })
        .collect();
    DocumentRow {
        url: document.url.clone(),
        page_bytes: document.page_bytes,
        resources: document.resources.len(),
        resources_assumed: document.resources_assumed(),
        bytes_total: document.bytes_total(),
        last_ref_offset: document.last_ref_offset(),
        rtts_without: tcp.rtts_without(document.page_bytes, &fetches),
        rtts_with: tcp.rtts_with(document.page_bytes, &fetches),
    }
}

fn summarize(rows: &[DocumentRow]) -> Summary {
    let mean = |f: fn(&DocumentRow) -> u64| {
        rows.iter().map(|r| f(r) as f64).sum::<f64>() / rows.len() as f64
    };
    Summary {
        documents: rows.len(),
        documents_faster: rows.iter().filter(|r| r.rtts_with < r.rtts_without).count(),
        documents_slower: rows.iter().filter(|r| r.rtts_with > r.rtts_without).count(),
        mean_rtts_without: mean(|r| r.rtts_without),
        mean_rtts_with: mean(|r| r.rtts_with),
        resources: rows.iter().map(|r| r.resources).sum(),
        resources_assumed: rows.iter().map(|r| r.resources_assumed).sum(),
    }
}

fn write_table(out: &mut dyn Write, report: &Report) -> std::io::Result<()> {
    let p = &report.params;
    let title = format!(
        "Round trips to a page and its inline resources, without and with inline download \
         (IW {} segments, MSS {} B, {} connections, base URL {})",
        p.tcp.initial_window, p.tcp.mss, p.tcp.connections, p.base_url
    );
    report::write_rows(out, TextLayout::Table, &title, &report.documents)?;
    let s = &report.summary;
    writeln!(
        out,
        "\n{} documents: mean {:.2} round trips without, {:.2} with; AID faster on {}, \
         slower on {}.",
        s.documents, s.mean_rtts_without, s.mean_rtts_with, s.documents_faster, s.documents_slower
    )?;
    writeln!(
        out,
        "{} of {} inline resources were not found on disk or in the trace and count {} bytes each \
         (--default-resource-bytes).",
        s.resources_assumed, s.resources, p.default_resource_bytes
    )
}
