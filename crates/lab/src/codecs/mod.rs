//! `wirefold lab codecs DIR…`: for every codec and level wirefold uses (plus lz4 and xz
//! as references) and every content type, the compression ratio, compression and
//! decompression speed, and CPU seconds per GiB saved; optionally how ratio and speed
//! change when files are cut into independent chunks, and how well short responses
//! compress (after Ebner & Schneider, extended to brotli and zstd).

mod setting;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use wirefold_corpus::ContentType;

use crate::corpus::{self, CorpusFile};
use crate::progress;
use crate::report::{self, Row, TextLayout};
use crate::timing::{median_cpu_time, Repeats};
use crate::{LabError, OutputFormat};
use setting::Setting;

#[derive(Debug, clap::Args)]
pub struct CodecsArgs {
    /// Directories (walked recursively) or files to measure.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    #[arg(long, value_enum, default_value_t)]
    pub format: OutputFormat,
    /// Also compress files cut into independent chunks of 256 B to 1 MiB (lz4, zstd 1, gzip 1).
    #[arg(long)]
    pub chunk_sweep: bool,
    /// Also compress the first 64 B to 2 KiB of each file, to see where compression stops paying.
    #[arg(long)]
    pub prefix_sweep: bool,
    /// Most timed runs per file and setting; the median run counts.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// CPU milliseconds after which a file's runs stop repeating (at least one run is made).
    #[arg(long, default_value_t = 20)]
    pub budget_ms: u64,
}

/// Chunk sizes of the sweep: 256 B to 1 MiB in steps of 4.
const CHUNK_SIZES: [usize; 7] = [
    256,
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
];
/// Response sizes of the prefix sweep, 64 B to 2 KiB in steps of about 1.5.
const PREFIX_SIZES: [usize; 11] = [64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048];

const MIB: f64 = (1u64 << 20) as f64;
const GIB: f64 = (1u64 << 30) as f64;

pub fn run(args: &CodecsArgs, out: &mut dyn Write) -> Result<(), LabError> {
    let files = corpus::list_files(&args.dirs)?;
    let report = measure(args, &files)?;
    report.write(args.format, out)?;
    Ok(())
}

/// Sums over the files of one group.
#[derive(Default)]
struct Tally {
    files: u64,
    pieces: u64,
    input_bytes: u64,
    output_bytes: u64,
    compress: Duration,
    decompress: Duration,
}

impl Tally {
    fn add(&mut self, m: &Measurement) {
        self.files += 1;
        self.pieces += m.pieces;
        self.input_bytes += m.input_bytes;
        self.output_bytes += m.output_bytes;
        self.compress += m.compress;
        self.decompress += m.decompress;
    }

    fn compress_mib_s(&self) -> f64 {
        self.input_bytes as f64 / MIB / self.compress.as_secs_f64()
    }

    fn decompress_mib_s(&self) -> f64 {
        self.input_bytes as f64 / MIB / self.decompress.as_secs_f64()
    }

    /// `None` when compression saved nothing.
    fn cpu_s_per_gib_saved(&self) -> Option<f64> {
        let saved = self
            .input_bytes
            .checked_sub(self.output_bytes)
            .filter(|&s| s > 0)?;
        Some(self.compress.as_secs_f64() / (saved as f64 / GIB))
    }
}

/// One file under one setting: sizes and median CPU times.
struct Measurement {
    pieces: u64,
    input_bytes: u64,
    output_bytes: u64,
    compress: Duration,
    decompress: Duration,
}

/// Compresses each of `pieces` independently, then decompresses and checks them.
fn measure_pieces(
    setting: Setting,
    pieces: &[&[u8]],
    repeats: Repeats,
    file: &CorpusFile,
) -> Result<Measurement, LabError> {
    let (packed, compress) = median_cpu_time(repeats, || {
        pieces
            .iter()
            .map(|p| setting.compress(p))
            .collect::<Vec<_>>()
    });
    let (restored, decompress) = median_cpu_time(repeats, || {
        packed
            .iter()
            .zip(pieces)
            .map(|(z, p)| setting.decompress(z, p.len()))
            .collect::<Vec<_>>()
    });
    if !restored
        .iter()
        .zip(pieces)
        .all(|(r, p)| r.as_deref() == Some(*p))
    {
        return Err(LabError::RoundTrip {
            setting: setting.to_string(),
            path: file.path.clone(),
        });
    }
    Ok(Measurement {
        pieces: pieces.len() as u64,
        input_bytes: pieces.iter().map(|p| p.len() as u64).sum(),
        output_bytes: packed.iter().map(|z| z.len() as u64).sum(),
        compress,
        decompress,
    })
}

fn measure(args: &CodecsArgs, files: &[CorpusFile]) -> Result<CodecsReport, LabError> {
    let repeats = Repeats {
        max_runs: args.runs,
        budget: Duration::from_millis(args.budget_ms),
    };
    let steps_per_file = setting::TABLE.len()
        + if args.chunk_sweep {
            setting::CHUNKED.len() * CHUNK_SIZES.len()
        } else {
            0
        }
        + usize::from(args.prefix_sweep);
    let bar = progress::bar(Some((files.len() * steps_per_file) as u64), progress::STEPS);

    let mut table: BTreeMap<(ContentType, usize), Tally> = BTreeMap::new();
    let mut chunked: BTreeMap<(ContentType, usize, usize), Tally> = BTreeMap::new();
    let mut prefixes: BTreeMap<(ContentType, usize, usize), Tally> = BTreeMap::new();
    for file in files {
        bar.set_message(file.path.display().to_string());
        let data = file.read()?;
        let ty = file.content_type;
        for (i, &setting) in setting::TABLE.iter().enumerate() {
            let m = measure_pieces(setting, &[&data], repeats, file)?;
            table.entry((ty, i)).or_default().add(&m);
            bar.inc(1);
        }
        if args.chunk_sweep {
            for (i, &setting) in setting::CHUNKED.iter().enumerate() {
                for (j, &size) in CHUNK_SIZES.iter().enumerate() {
                    let pieces: Vec<&[u8]> = data.chunks(size).collect();
                    let m = measure_pieces(setting, &pieces, repeats, file)?;
                    chunked.entry((ty, i, j)).or_default().add(&m);
                    bar.inc(1);
                }
            }
        }
        if args.prefix_sweep {
            for (i, &setting) in http_settings().enumerate() {
                for (j, &size) in PREFIX_SIZES
                    .iter()
                    .enumerate()
                    .filter(|(_, &s)| s <= data.len())
                {
                    let out = setting.compress(&data[..size]);
                    let tally = prefixes.entry((ty, i, j)).or_default();
                    tally.files += 1;
                    tally.input_bytes += size as u64;
                    tally.output_bytes += out.len() as u64;
                }
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();

    let rows = table
        .iter()
        .map(|(&(ty, i), t)| CodecRow::new(ty, setting::TABLE[i], t))
        .collect();
    let chunk_sweep = args.chunk_sweep.then(|| {
        chunked
            .iter()
            .map(|(&(ty, i, j), t)| ChunkRow::new(ty, setting::CHUNKED[i], CHUNK_SIZES[j], t))
            .collect()
    });
    let http: Vec<Setting> = http_settings().copied().collect();
    let prefix_sweep = args.prefix_sweep.then(|| {
        prefixes
            .iter()
            .map(|(&(ty, i, j), t)| PrefixRow::new(ty, http[i], PREFIX_SIZES[j], t))
            .collect()
    });
    Ok(CodecsReport {
        rows,
        chunk_sweep,
        prefix_sweep,
    })
}

/// The settings of the main table that the server can send.
fn http_settings() -> impl Iterator<Item = &'static Setting> {
    setting::TABLE
        .iter()
        .filter(|s| matches!(s, Setting::Http(..)))
}

/// The JSON document `--format json` prints.
#[derive(Serialize)]
struct CodecsReport {
    rows: Vec<CodecRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    chunk_sweep: Option<Vec<ChunkRow>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prefix_sweep: Option<Vec<PrefixRow>>,
}

impl CodecsReport {
    fn write(&self, format: OutputFormat, out: &mut dyn Write) -> std::io::Result<()> {
        let layout = match format {
            OutputFormat::Json => {
                serde_json::to_writer_pretty(&mut *out, self)?;
                return writeln!(out);
            }
            OutputFormat::Csv => TextLayout::Csv,
            OutputFormat::Table => TextLayout::Table,
        };
        report::write_rows(out, layout, "codecs (median CPU time per file)", &self.rows)?;
        if let Some(rows) = &self.chunk_sweep {
            writeln!(out)?;
            report::write_rows(
                out,
                layout,
                "chunk sweep (each chunk compressed alone)",
                rows,
            )?;
        }
        if let Some(rows) = &self.prefix_sweep {
            writeln!(out)?;
            report::write_rows(
                out,
                layout,
                "prefix sweep (first N bytes of each file)",
                rows,
            )?;
        }
        Ok(())
    }
}

#[derive(Serialize)]
struct CodecRow {
    content_type: &'static str,
    codec: &'static str,
    level: Option<u32>,
    files: u64,
    input_bytes: u64,
    output_bytes: u64,
    compress_mib_s: f64,
    decompress_mib_s: f64,
    cpu_s_per_gib_saved: Option<f64>,
}

impl CodecRow {
    fn new(ty: ContentType, setting: Setting, t: &Tally) -> Self {
        CodecRow {
            content_type: ty.name(),
            codec: setting.codec_name(),
            level: setting.level(),
            files: t.files,
            input_bytes: t.input_bytes,
            output_bytes: t.output_bytes,
            compress_mib_s: t.compress_mib_s(),
            decompress_mib_s: t.decompress_mib_s(),
            cpu_s_per_gib_saved: t.cpu_s_per_gib_saved(),
        }
    }
}

impl Row for CodecRow {
    const COLUMNS: &'static [&'static str] = &[
        "content_type",
        "codec",
        "level",
        "files",
        "input_bytes",
        "output_bytes",
        "ratio",
        "compress_mib_s",
        "decompress_mib_s",
        "cpu_s_per_gib_saved",
    ];

    fn values(&self) -> Vec<String> {
        vec![
            self.content_type.into(),
            self.codec.into(),
            level_text(self.level),
            self.files.to_string(),
            self.input_bytes.to_string(),
            self.output_bytes.to_string(),
            ratio_text(self.output_bytes, self.input_bytes),
            format!("{:.1}", self.compress_mib_s),
            format!("{:.1}", self.decompress_mib_s),
            self.cpu_s_per_gib_saved
                .map_or_else(String::new, |c| format!("{c:.2}")),
        ]
    }
}

#[derive(Serialize)]
struct ChunkRow {
    content_type: &'static str,
    codec: &'static str,
    level: Option<u32>,
    chunk_bytes: usize,
    chunks: u64,
    input_bytes: u64,
    output_bytes: u64,
    compress_mib_s: f64,
    decompress_mib_s: f64,
}

impl ChunkRow {
    fn new(ty: ContentType, setting: Setting, chunk_bytes: usize, t: &Tally) -> Self {
        ChunkRow {
            content_type: ty.name(),
            codec: setting.codec_name(),
            level: setting.level(),
            chunk_bytes,
            chunks: t.pieces,
            input_bytes: t.input_bytes,
            output_bytes: t.output_bytes,
            compress_mib_s: t.compress_mib_s(),
            decompress_mib_s: t.decompress_mib_s(),
        }
    }
}

impl Row for ChunkRow {
    const COLUMNS: &'static [&'static str] = &[
        "content_type",
        "codec",
        "level",
        "chunk_bytes",
        "chunks",
        "input_bytes",
        "output_bytes",
        "ratio",
        "compress_mib_s",
        "decompress_mib_s",
    ];

    fn values(&self) -> Vec<String> {
        vec![
            self.content_type.into(),
            self.codec.into(),
            level_text(self.level),
            self.chunk_bytes.to_string(),
            self.chunks.to_string(),
            self.input_bytes.to_string(),
            self.output_bytes.to_string(),
            ratio_text(self.output_bytes, self.input_bytes),
            format!("{:.1}", self.compress_mib_s),
            format!("{:.1}", self.decompress_mib_s),
        ]
    }
}

#[derive(Serialize)]
struct PrefixRow {
    content_type: &'static str,
    codec: &'static str,
    level: Option<u32>,
    prefix_bytes: usize,
    files: u64,
    input_bytes: u64,
    output_bytes: u64,
    /// Mean bytes saved per response of this size (negative: compression grew it).
    mean_saved_bytes: f64,
}

impl PrefixRow {
    fn new(ty: ContentType, setting: Setting, prefix_bytes: usize, t: &Tally) -> Self {
        PrefixRow {
            content_type: ty.name(),
            codec: setting.codec_name(),
            level: setting.level(),
            prefix_bytes,
            files: t.files,
            input_bytes: t.input_bytes,
            output_bytes: t.output_bytes,
            mean_saved_bytes: (t.input_bytes as f64 - t.output_bytes as f64) / t.files as f64,
        }
    }
}

impl Row for PrefixRow {
    const COLUMNS: &'static [&'static str] = &[
        "content_type",
        "codec",
        "level",
        "prefix_bytes",
        "files",
        "input_bytes",
        "output_bytes",
        "ratio",
        "mean_saved_bytes",
    ];

    fn values(&self) -> Vec<String> {
        vec![
            self.content_type.into(),
            self.codec.into(),
            level_text(self.level),
            self.prefix_bytes.to_string(),
            self.files.to_string(),
            self.input_bytes.to_string(),
            self.output_bytes.to_string(),
            ratio_text(self.output_bytes, self.input_bytes),
            format!("{:.1}", self.mean_saved_bytes),
        ]
    }
}

fn level_text(level: Option<u32>) -> String {
    level.map_or_else(String::new, |l| l.to_string())
}

/// Output size as a fraction of input size.
fn ratio_text(output: u64, input: u64) -> String {
    format!("{:.4}", output as f64 / input as f64)
}
