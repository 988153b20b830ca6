//! `wirefold lab deltas DIR…`: for every consecutive version pair of every series in
//! version corpora, the bytes of sending the new version plainly, compressed (gzip 6,
//! br 11, zstd 19), as an RFC 9842 dictionary-compressed body against the old version
//! (dcb 11, dcz 19), as our VCDIFF delta, and as the peers' deltas (xdelta3, zstd
//! --patch-from); medians and totals per corpus folder and content type; how much
//! smaller dcz and dcb are than br-11 (the delta issue's targets); and our VCDIFF and
//! dcz against xdelta3 and zstd on size and speed.
//!
//! Every body is decoded back and compared with the new version before it counts.

mod external;
mod method;
mod pair;
mod summary;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use wirefold_corpus::series::{self, Series};
use wirefold_corpus::ContentType;

use crate::progress;
use crate::report::{self, TextLayout};
use crate::{LabError, OutputFormat};
use external::Tool;
use method::DeltaMethod;
use pair::{Bench, PairMeasurement};
use summary::{summarize, Startups, Summary};

#[derive(Debug, clap::Args)]
pub struct DeltasArgs {
    /// Corpus folders: every folder below holding numbered versions (`NNN.ext` or
    /// `NNN-<version>.ext`) is a series.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    #[arg(long, value_enum, default_value_t)]
    pub format: OutputFormat,
    /// Measure only the last N pairs of each series (default: all).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_pairs_per_series: Option<u64>,
    /// Timed runs per pair of the timed codecs (ours and the peers'); the median counts.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// The xdelta3 program; when it cannot run, its columns are skipped.
    #[arg(long, value_name = "PATH", default_value = "xdelta3")]
    pub xdelta3: PathBuf,
    /// The zstd program (for --patch-from); when it cannot run, its column is skipped.
    #[arg(long, value_name = "PATH", default_value = "zstd")]
    pub zstd: PathBuf,
    /// Also print the savings table per series.
    #[arg(long)]
    pub by_series: bool,
    /// Write every body measured to `DIR/<corpus>/<series>/<old>_<new>.<method>`.
    #[arg(long, value_name = "DIR")]
    pub keep_deltas: Option<PathBuf>,
}

/// How the timing columns are measured (printed with every report).
const TIMING_METHOD: &str = "ours (vcdiff, dcz): CPU time of the calling thread \
(CLOCK_THREAD_CPUTIME_ID) around the in-process encode or decode, median of --runs runs; \
peers (xdelta3 -e -9 -S none -A -n, zstd -19 --long=27 --patch-from): user+sys CPU time \
of the child process from wait4(2), median of --runs runs, which includes the tool's \
process start, buffer setup and file I/O (the tool's startup, the same commands on a \
one-byte pair, is reported; _x_net takes it off); ratio = peer CPU time / our CPU time \
per pair, median over pairs (above 1: ours is faster)";

/// One measured pair.
pub struct PairRow {
    pub corpus: String,
    pub series: String,
    pub content_type: ContentType,
    pub old: String,
    pub new: String,
    pub old_bytes: u64,
    pub new_bytes: u64,
    pub m: PairMeasurement,
}

pub fn run(args: &DeltasArgs, out: &mut dyn Write) -> Result<(), LabError> {
    let started = Instant::now();
    let mut corpora: Vec<(String, Vec<Series>)> = Vec::new();
    for dir in &args.dirs {
        corpora.push((dir.display().to_string(), series::find(dir)?));
    }
    let pair_count: usize = corpora
        .iter()
        .flat_map(|(_, s)| s)
        .map(|s| pairs_of(s, args.max_pairs_per_series).len())
        .sum();
    if pair_count == 0 {
        return Err(LabError::NoInput(args.dirs.clone()));
    }

    let work = tempfile::tempdir().map_err(LabError::Output)?;
    let mut xdelta3 = Tool::probe("xdelta3", &args.xdelta3, "-V");
    let mut zstd = Tool::probe("zstd", &args.zstd, "-V");
    if xdelta3.available() {
        xdelta3.startup =
            pair::startup_time(&xdelta3, DeltaMethod::Xdelta3, work.path(), args.runs);
    }
    if zstd.available() {
        zstd.startup = pair::startup_time(&zstd, DeltaMethod::ZstdPatch, work.path(), args.runs);
    }
    let bench = Bench {
        xdelta3: &xdelta3,
        zstd: &zstd,
        runs: args.runs,
        work: work.path(),
    };

    let bar = progress::bar(Some(pair_count as u64), progress::PAIRS);
    let mut rows = Vec::with_capacity(pair_count);
    for (corpus, all_series) in &corpora {
        for s in all_series {
            bar.set_message(format!("{corpus}/{}", s.name));
            for (old_path, new_path) in pairs_of(s, args.max_pairs_per_series) {
                let old = read(old_path)?;
                let new = read(new_path)?;
                let m =
                    bench.measure(old_path, new_path, &old, &new, args.keep_deltas.is_some())?;
                let row = PairRow {
                    corpus: corpus.clone(),
                    series: s.name.clone(),
                    content_type: s.content_type,
                    old: file_name(old_path),
                    new: file_name(new_path),
                    old_bytes: old.len() as u64,
                    new_bytes: new.len() as u64,
                    m,
                };
                if let Some(keep) = &args.keep_deltas {
                    keep_bodies(keep, &row)?;
                }
                rows.push(PairRow {
                    m: PairMeasurement {
                        bodies: Vec::new(),
                        ..row.m
                    },
                    ..row
                });
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();

    let report = DeltasReport::new(args, &corpora, &rows, &[&xdelta3, &zstd], started.elapsed());
    report.write(args, out)?;
    Ok(())
}

fn read(path: &Path) -> Result<Vec<u8>, LabError> {
    std::fs::read(path).map_err(|source| LabError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

fn file_stem(name: &str) -> &str {
    name.rsplit_once('.').map_or(name, |(stem, _)| stem)
}

/// Consecutive pairs, the last `max` of them when bounded.
fn pairs_of(series: &Series, max: Option<u64>) -> Vec<(&Path, &Path)> {
    let pairs: Vec<(&Path, &Path)> = series
        .versions
        .windows(2)
        .map(|w| (w[0].as_path(), w[1].as_path()))
        .collect();
    let keep = max.map_or(pairs.len(), |m| (m as usize).min(pairs.len()));
    pairs[pairs.len() - keep..].to_vec()
}

fn keep_bodies(keep: &Path, row: &PairRow) -> Result<(), LabError> {
    let corpus = Path::new(&row.corpus)
        .file_name()
        .map_or_else(|| "corpus".into(), |n| n.to_string_lossy().into_owned());
    let dir = keep.join(corpus).join(&row.series);
    std::fs::create_dir_all(&dir)?;
    for (method, body) in &row.m.bodies {
        let name = format!(
            "{}_{}.{}",
            file_stem(&row.old),
            file_stem(&row.new),
            method.name()
        );
        std::fs::write(dir.join(name), body)?;
    }
    Ok(())
}

/// The JSON document `--format json` prints (schema: docs/lab.md).
#[derive(Serialize)]
struct DeltasReport {
    corpora: Vec<String>,
    params: Params,
    timing_method: &'static str,
    methods: Vec<MethodInfo>,
    tools: Vec<ToolInfo>,
    pairs: Vec<PairJson>,
    groups: Vec<Summary>,
    series: Vec<Summary>,
    failures: Vec<Failure>,
    wall_s: f64,
}

#[derive(Serialize)]
struct Params {
    runs: u32,
    max_pairs_per_series: Option<u64>,
    levels: BTreeMap<&'static str, u32>,
}

#[derive(Serialize)]
struct MethodInfo {
    name: &'static str,
    description: &'static str,
    measured: bool,
}

#[derive(Serialize)]
struct ToolInfo {
    name: &'static str,
    program: String,
    available: bool,
    version: Option<String>,
    missing: Option<String>,
    /// The encode command on a one-byte pair, ms of CPU (median of --runs).
    startup_encode_cpu_ms: Option<f64>,
    /// The decode command on that pair's delta.
    startup_decode_cpu_ms: Option<f64>,
}

#[derive(Serialize)]
struct PairJson {
    corpus: String,
    series: String,
    content_type: &'static str,
    old: String,
    new: String,
    old_bytes: u64,
    new_bytes: u64,
    bytes: BTreeMap<&'static str, u64>,
    time_ms: BTreeMap<String, f64>,
}

#[derive(Serialize)]
struct Failure {
    corpus: String,
    series: String,
    old: String,
    new: String,
    method: &'static str,
    error: String,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl PairJson {
    fn new(r: &PairRow) -> Self {
        let bytes = DeltaMethod::ALL
            .iter()
            .filter_map(|&m| r.m.bytes[m.index()].map(|b| (m.name(), b)))
            .collect();
        let mut time_ms = BTreeMap::new();
        time_ms.insert("vcdiff_encode".into(), ms(r.m.vcdiff.encode));
        time_ms.insert("vcdiff_decode".into(), ms(r.m.vcdiff.decode));
        time_ms.insert("dcz_19_encode".into(), ms(r.m.dcz.encode));
        time_ms.insert("dcz_19_decode".into(), ms(r.m.dcz.decode));
        for (name, t) in [
            ("xdelta3_9", r.m.xdelta3),
            ("zstd_19_patch_from", r.m.zstd_patch),
        ] {
            if let Some(t) = t {
                time_ms.insert(format!("{name}_encode_cpu"), ms(t.encode.cpu));
                time_ms.insert(format!("{name}_decode_cpu"), ms(t.decode.cpu));
                time_ms.insert(format!("{name}_encode_wall"), ms(t.encode.wall));
                time_ms.insert(format!("{name}_decode_wall"), ms(t.decode.wall));
            }
        }
        PairJson {
            corpus: r.corpus.clone(),
            series: r.series.clone(),
            content_type: r.content_type.name(),
            old: r.old.clone(),
            new: r.new.clone(),
            old_bytes: r.old_bytes,
            new_bytes: r.new_bytes,
            bytes,
            time_ms,
        }
    }
}

const ALL: &str = "all";

impl DeltasReport {
    fn new(
        args: &DeltasArgs,
        corpora: &[(String, Vec<Series>)],
        rows: &[PairRow],
        tools: &[&Tool],
        wall: Duration,
    ) -> Self {
        let measured = |m: DeltaMethod| rows.iter().any(|r| r.m.bytes[m.index()].is_some());
        let methods = DeltaMethod::ALL
            .iter()
            .map(|&m| MethodInfo {
                name: m.name(),
                description: m.description(),
                measured: measured(m),
            })
            .collect();
        let tool_infos = tools
            .iter()
            .map(|t| ToolInfo {
                name: t.name,
                program: t.program.display().to_string(),
                available: t.available(),
                version: t.version.clone(),
                missing: t.missing.clone(),
                startup_encode_cpu_ms: t.startup.map(|s| ms(s.encode)),
                startup_decode_cpu_ms: t.startup.map(|s| ms(s.decode)),
            })
            .collect();

        let startups = Startups {
            xdelta3: tools
                .iter()
                .find(|t| t.name == "xdelta3")
                .and_then(|t| t.startup),
            zstd: tools
                .iter()
                .find(|t| t.name == "zstd")
                .and_then(|t| t.startup),
        };
        let mut groups = Vec::new();
        let group = |corpus: Option<&str>, ty: Option<ContentType>| -> Vec<&PairRow> {
            rows.iter()
                .filter(|r| corpus.is_none_or(|c| r.corpus == c))
                .filter(|r| ty.is_none_or(|t| r.content_type == t))
                .collect()
        };
        let mut corpus_names: Vec<Option<&str>> =
            corpora.iter().map(|(c, _)| Some(c.as_str())).collect();
        if corpora.len() > 1 {
            corpus_names.push(None);
        }
        for corpus in corpus_names {
            let in_corpus = group(corpus, None);
            let types: BTreeSet<ContentType> = in_corpus.iter().map(|r| r.content_type).collect();
            let label = corpus.unwrap_or(ALL);
            for &ty in &types {
                groups.push(summarize(
                    startups,
                    label,
                    None,
                    ty.name(),
                    &group(corpus, Some(ty)),
                ));
            }
            if types.len() > 1 {
                groups.push(summarize(startups, label, None, ALL, &in_corpus));
            }
        }
        let mut series = Vec::new();
        for (corpus, all_series) in corpora {
            for s in all_series {
                let in_series: Vec<&PairRow> = rows
                    .iter()
                    .filter(|r| &r.corpus == corpus && r.series == s.name)
                    .collect();
                if !in_series.is_empty() {
                    series.push(summarize(
                        startups,
                        corpus,
                        Some(&s.name),
                        s.content_type.name(),
                        &in_series,
                    ));
                }
            }
        }
        let failures = rows
            .iter()
            .flat_map(|r| {
                r.m.failures.iter().map(|(m, e)| Failure {
                    corpus: r.corpus.clone(),
                    series: r.series.clone(),
                    old: r.old.clone(),
                    new: r.new.clone(),
                    method: m.name(),
                    error: e.clone(),
                })
            })
            .collect();
        let levels = [
            ("gzip", method::GZIP_LEVEL),
            ("br", method::BR_LEVEL),
            ("zstd", method::ZSTD_LEVEL),
            ("dcb", method::DCB_LEVEL),
            ("dcz", method::DCZ_LEVEL),
        ]
        .into_iter()
        .collect();
        DeltasReport {
            corpora: corpora.iter().map(|(c, _)| c.clone()).collect(),
            params: Params {
                runs: args.runs,
                max_pairs_per_series: args.max_pairs_per_series,
                levels,
            },
            timing_method: TIMING_METHOD,
            methods,
            tools: tool_infos,
            pairs: rows.iter().map(PairJson::new).collect(),
            groups,
            series,
            failures,
            wall_s: wall.as_secs_f64(),
        }
    }

    fn write(&self, args: &DeltasArgs, out: &mut dyn Write) -> std::io::Result<()> {
        let layout = match args.format {
            OutputFormat::Json => {
                serde_json::to_writer_pretty(&mut *out, self)?;
                return writeln!(out);
            }
            OutputFormat::Csv => TextLayout::Csv,
            OutputFormat::Table => TextLayout::Table,
        };
        let table = matches!(layout, TextLayout::Table);
        // Notes: in the table; on stderr for CSV, which stays machine-readable.
        let mut notes: Vec<String> = Vec::new();
        notes.push(format!(
            "wirefold lab deltas: {} version pairs in {} ({:.1} s)",
            self.pairs.len(),
            self.corpora.join(", "),
            self.wall_s
        ));
        for t in &self.tools {
            let ms_text = |v: Option<f64>| v.map_or_else(|| "?".into(), |s| format!("{s:.2}"));
            notes.push(match &t.missing {
                Some(why) => format!("{}: NOT AVAILABLE ({why}); its columns are skipped", t.name),
                None => format!(
                    "{}: {} (version {}); startup CPU on a one-byte pair: encode {} ms, decode {} ms",
                    t.name,
                    t.program,
                    t.version.as_deref().unwrap_or("unknown"),
                    ms_text(t.startup_encode_cpu_ms),
                    ms_text(t.startup_decode_cpu_ms),
                ),
            });
        }
        notes.push(format!("timing: {TIMING_METHOD}"));
        notes.push(
            "savings: % smaller than br_11; median_pair = median over pairs of the per-pair \
             saving, total = saving on the summed bytes. Targets: dcz and dcb >= 95% at the \
             median pair and >= 90% in total."
                .into(),
        );
        for f in &self.failures {
            notes.push(format!(
                "failed: {} {} {} -> {}: {}",
                f.method, f.series, f.old, f.new, f.error
            ));
        }
        if table {
            for n in &notes {
                writeln!(out, "{n}")?;
            }
            writeln!(out)?;
        } else {
            for n in &notes {
                eprintln!("{n}");
            }
        }

        let methods: Vec<DeltaMethod> = DeltaMethod::ALL
            .into_iter()
            .filter(|m| self.methods[m.index()].measured)
            .collect();
        let mut byte_columns = vec!["corpus", "type", "pairs"];
        byte_columns.extend(methods.iter().map(|m| m.name()));
        let byte_rows = |median: bool| -> Vec<Vec<String>> {
            self.groups
                .iter()
                .map(|g| {
                    let mut v = vec![
                        g.corpus.clone(),
                        g.content_type.clone(),
                        g.pairs.to_string(),
                    ];
                    v.extend(methods.iter().map(|m| {
                        if median {
                            g.median_bytes
                                .get(m.name())
                                .map_or_else(String::new, |b| format!("{b:.0}"))
                        } else {
                            g.total_bytes
                                .get(m.name())
                                .map_or_else(String::new, u64::to_string)
                        }
                    }));
                    v
                })
                .collect()
        };
        report::write_columns(
            out,
            layout,
            "bytes, total over the pairs",
            &byte_columns,
            &byte_rows(false),
        )?;
        writeln!(out)?;
        report::write_columns(
            out,
            layout,
            "bytes, median pair",
            &byte_columns,
            &byte_rows(true),
        )?;
        writeln!(out)?;

        let saving_methods: Vec<DeltaMethod> = [
            DeltaMethod::Dcz,
            DeltaMethod::Dcb,
            DeltaMethod::ZstdPatch,
            DeltaMethod::Vcdiff,
            DeltaMethod::Xdelta3,
            DeltaMethod::Zstd,
        ]
        .into_iter()
        .filter(|&m| self.methods[m.index()].measured)
        .collect();
        let saving_names: Vec<String> = saving_methods
            .iter()
            .flat_map(|m| {
                [
                    format!("{}_median", m.name()),
                    format!("{}_total", m.name()),
                ]
            })
            .collect();
        let mut saving_columns: Vec<&str> = vec!["corpus", "type", "pairs"];
        let with_series = |cols: &mut Vec<&str>| cols.insert(1, "series");
        saving_columns.extend(saving_names.iter().map(String::as_str));
        saving_columns.push("targets");
        let saving_row = |g: &Summary| -> Vec<String> {
            let mut v = vec![g.corpus.clone()];
            if let Some(s) = &g.series {
                v.push(s.clone());
            }
            v.push(g.content_type.clone());
            v.push(g.pairs.to_string());
            for m in &saving_methods {
                match g.smaller_than_br_11_pct.get(m.name()) {
                    Some(s) => {
                        v.push(format!("{:.1}", s.median_pair));
                        v.push(format!("{:.1}", s.total));
                    }
                    None => v.extend([String::new(), String::new()]),
                }
            }
            let misses = g.misses();
            v.push(if misses.is_empty() {
                "met".into()
            } else {
                format!("miss: {}", misses.join("; "))
            });
            if !table {
                // CSV: no separators inside a value.
                let last = v.last_mut().unwrap();
                *last = last.replace([',', ';'], " ");
            }
            v
        };
        let rows: Vec<Vec<String>> = self.groups.iter().map(saving_row).collect();
        report::write_columns(
            out,
            layout,
            "% smaller than br_11 (median pair, total)",
            &saving_columns,
            &rows,
        )?;
        writeln!(out)?;
        if args.by_series {
            let mut cols = saving_columns.clone();
            with_series(&mut cols);
            let rows: Vec<Vec<String>> = self.series.iter().map(saving_row).collect();
            report::write_columns(out, layout, "% smaller than br_11 per series", &cols, &rows)?;
            writeln!(out)?;
        }

        let speed_keys = [
            ("vcdiff_vs_xdelta3_encode", "vcdiff_enc", "xd3_enc"),
            ("vcdiff_vs_xdelta3_decode", "vcdiff_dec", "xd3_dec"),
            ("dcz_vs_zstd_patch_encode", "dcz_enc", "zpatch_enc"),
            ("dcz_vs_zstd_patch_decode", "dcz_dec", "zpatch_dec"),
        ];
        let present: Vec<(&str, &str, &str)> = speed_keys
            .into_iter()
            .filter(|(k, _, _)| self.groups.iter().any(|g| g.speed.contains_key(k)))
            .collect();
        let mut speed_names: Vec<String> = Vec::new();
        let size_present = self
            .groups
            .iter()
            .any(|g| g.vcdiff_vs_xdelta3_size.is_some());
        if size_present {
            speed_names.push("vcdiff/xdelta3_bytes".into());
        }
        for (_, short, peer) in &present {
            speed_names.push(format!("{short}_ms"));
            speed_names.push(format!("{peer}_cpu_ms"));
            speed_names.push(format!("{peer}_sys_ms"));
            speed_names.push(format!("{short}_x"));
            speed_names.push(format!("{short}_x_net"));
        }
        if !speed_names.is_empty() {
            let mut cols: Vec<&str> = vec!["corpus", "type", "pairs"];
            cols.extend(speed_names.iter().map(String::as_str));
            let rows: Vec<Vec<String>> = self
                .groups
                .iter()
                .map(|g| {
                    let mut v = vec![
                        g.corpus.clone(),
                        g.content_type.clone(),
                        g.pairs.to_string(),
                    ];
                    if size_present {
                        v.push(
                            g.vcdiff_vs_xdelta3_size
                                .map_or_else(String::new, |r| format!("{:.3}", r.total)),
                        );
                    }
                    for (key, _, _) in &present {
                        match g.speed.get(key) {
                            Some(s) => v.extend([
                                format!("{:.3}", s.ours_median_ms),
                                format!("{:.3}", s.peer_cpu_median_ms),
                                format!("{:.3}", s.peer_sys_median_ms),
                                format!("{:.2}", s.median_ratio),
                                s.median_ratio_excluding_startup
                                    .map_or_else(String::new, |r| format!("{r:.2}")),
                            ]),
                            None => v.extend(std::iter::repeat_n(String::new(), 5)),
                        }
                    }
                    v
                })
                .collect();
            report::write_columns(
                out,
                layout,
                "speed: vcdiff vs xdelta3 -9 -S none -A -n, dcz 19 vs zstd -19 --long=27 --patch-from \
                 (medians over pairs; _x = peer CPU / our CPU, above 1: ours faster; \
                 _x_net = the same with the peer's startup CPU taken off; \
                 _sys_ms = the kernel part of the peer's CPU time)",
                &cols,
                &rows,
            )?;
        }
        Ok(())
    }
}
