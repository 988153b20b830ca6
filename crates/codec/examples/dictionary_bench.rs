//! Measures dictionary compression on the shared corpus (release build):
//!
//! `cargo run --release --example dictionary_bench -- pairs SERIES_DIR...`
//!   every consecutive version pair of each series (NNN.ext files; the previous
//!   version is the dictionary): bytes and encode time of `brotli -q 11` without a
//!   dictionary, dcb with the C encoder wirefold uses and with the pure-Rust
//!   `brotli` port at q5/9/11, dcz at 3/9/19. Every body is decoded back; the
//!   ones that fail are counted.
//! `cargo run --release --example dictionary_bench -- first SERIES_DIR...`
//!   the first request after a change: every consecutive version pair, dcz and dcb
//!   at the level the server answers with while the kept level is made
//!   (`NetworkPath::dictionary_level_now` at the default 10 Mbit/s, the plain body
//!   being br-11), at the old quick level, and at the kept level: size against br-11
//!   and encode CPU time.
//! `cargo run --release --example dictionary_bench -- train SIBLINGS_DIR...`
//!   first-visit savings of a trained dictionary: trained on the even-numbered
//!   pages of a directory, measured on the odd-numbered ones.
#![allow(
    clippy::expect_used,
    reason = "a benchmark run by hand: a failure ends it with its message"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use wirefold_codec::dictionary::{self, DictionaryCoding};

#[derive(Clone, Copy)]
enum DcbEncoder {
    /// The pure-Rust port, its custom dictionary pre-filling the ring buffer.
    Rust,
    /// Google's C brotli: what `dictionary::encode` uses.
    C,
}

#[derive(Clone, Copy)]
enum Method {
    Br11,
    Dcb(DcbEncoder, u32),
    Dcz(u32),
}

impl Method {
    fn name(self) -> String {
        match self {
            Method::Br11 => "brotli -q 11 (no dictionary)".into(),
            Method::Dcb(DcbEncoder::Rust, q) => format!("dcb Rust q{q}"),
            Method::Dcb(DcbEncoder::C, q) => format!("dcb C q{q}"),
            Method::Dcz(l) => format!("dcz {l}"),
        }
    }

    /// The encoded body and the seconds spent encoding it.
    fn encode(self, dictionary: &[u8], data: &[u8]) -> (Vec<u8>, f64) {
        let start = Instant::now();
        let body = match self {
            Method::Br11 => brotli_cli(&["-q", "11", "-c"], data),
            Method::Dcb(DcbEncoder::C, q) => {
                dictionary::encode(DictionaryCoding::Dcb, q, dictionary, data)
            }
            Method::Dcb(DcbEncoder::Rust, q) => rust_dcb(q, dictionary, data),
            Method::Dcz(l) => dictionary::encode(DictionaryCoding::Dcz, l, dictionary, data),
        };
        (body, start.elapsed().as_secs_f64())
    }

    /// Whether `body` decodes back to `data`.
    fn check(self, dictionary: &[u8], data: &[u8], body: &[u8]) -> bool {
        let coding = match self {
            Method::Br11 => return true,
            Method::Dcb(..) => DictionaryCoding::Dcb,
            Method::Dcz(_) => DictionaryCoding::Dcz,
        };
        dictionary::decode(coding, dictionary, body, data.len()).is_ok_and(|d| d == data)
    }
}

/// A dcb body from the pure-Rust encoder, its window spanning dictionary + data
/// (the dictionary pre-fills the ring buffer; only what the window holds is in reach).
fn rust_dcb(quality: u32, dictionary: &[u8], data: &[u8]) -> Vec<u8> {
    use brotli::enc::encode::{
        BrotliEncoderOperation, BrotliEncoderParameter, BrotliEncoderStateStruct,
    };
    let mut state = BrotliEncoderStateStruct::new(brotli::enc::StandardAlloc::default());
    let span = dictionary.len() + data.len() + 16;
    let lgwin = (17..24).find(|&w| 1usize << w >= span).unwrap_or(24);
    for (parameter, value) in [
        (BrotliEncoderParameter::BROTLI_PARAM_QUALITY, quality),
        (BrotliEncoderParameter::BROTLI_PARAM_LGWIN, lgwin),
        (
            BrotliEncoderParameter::BROTLI_PARAM_SIZE_HINT,
            data.len() as u32,
        ),
    ] {
        assert!(state.set_parameter(parameter, value));
    }
    if !dictionary.is_empty() {
        state.set_custom_dictionary(dictionary.len(), dictionary);
    }
    let mut body = dictionary::header(DictionaryCoding::Dcb, dictionary);
    let mut chunk = vec![0u8; 64 * 1024];
    let (mut available_in, mut in_offset) = (data.len(), 0);
    while !state.is_finished() {
        let (mut available_out, mut out_offset) = (chunk.len(), 0);
        assert!(state.compress_stream(
            BrotliEncoderOperation::BROTLI_OPERATION_FINISH,
            &mut available_in,
            data,
            &mut in_offset,
            &mut available_out,
            &mut chunk,
            &mut out_offset,
            &mut None,
            &mut |_, _, _, _| (),
        ));
        body.extend_from_slice(&chunk[..out_offset]);
    }
    body
}

fn brotli_cli(args: &[&str], data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("brotli")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting brotli");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("brotli");
    writer.join().expect("writer").expect("brotli stdin");
    assert!(out.status.success());
    out.stdout
}

fn sorted_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x != "tsv"))
        .collect();
    files.sort();
    files
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn pairs(series: &[String]) {
    let methods: Vec<Method> = std::iter::once(Method::Br11)
        .chain([5, 9, 11].into_iter().flat_map(|q| {
            [
                Method::Dcb(DcbEncoder::Rust, q),
                Method::Dcb(DcbEncoder::C, q),
            ]
        }))
        .chain([3, 9, 19].map(Method::Dcz))
        .collect();
    // Per method: bytes and seconds of every pair.
    let mut bytes: Vec<Vec<f64>> = vec![Vec::new(); methods.len()];
    let mut seconds: Vec<f64> = vec![0.0; methods.len()];
    let mut invalid: Vec<usize> = vec![0; methods.len()];
    let mut identity = Vec::new();
    for dir in series {
        let files = sorted_files(Path::new(dir));
        for pair in files.windows(2) {
            let dictionary = std::fs::read(&pair[0]).expect("read");
            let data = std::fs::read(&pair[1]).expect("read");
            identity.push(data.len() as f64);
            let mut line = format!(
                "{}\t{}\t{}",
                pair[1].display(),
                dictionary.len(),
                data.len()
            );
            for (i, method) in methods.iter().enumerate() {
                let (body, secs) = method.encode(&dictionary, &data);
                if !method.check(&dictionary, &data, &body) {
                    invalid[i] += 1;
                    line += "\tINVALID";
                }
                bytes[i].push(body.len() as f64);
                seconds[i] += secs;
                line += &format!("\t{}", body.len());
            }
            eprintln!("{line}");
        }
    }
    let br11 = &bytes[0];
    println!(
        "{} pairs, {} identity bytes in total, median {}\n",
        identity.len(),
        identity.iter().sum::<f64>(),
        median(identity.clone())
    );
    println!("| method | total bytes | median bytes | smaller than br-11: total | at the median pair | encode s (total) | invalid streams |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (i, method) in methods.iter().enumerate() {
        let total: f64 = bytes[i].iter().sum();
        let saving_total = 100.0 * (1.0 - total / br11.iter().sum::<f64>());
        let per_pair: Vec<f64> = bytes[i]
            .iter()
            .zip(br11)
            .map(|(b, r)| 1.0 - b / r)
            .collect();
        println!(
            "| {} | {total} | {} | {saving_total:.1}% | {:.1}% | {:.2} | {} |",
            method.name(),
            median(bytes[i].clone()),
            100.0 * median(per_pair),
            seconds[i],
            invalid[i]
        );
    }
}

/// CPU seconds of the calling thread.
#[allow(unsafe_code)] // clock_gettime through the C library std already links
fn thread_cpu_seconds() -> f64 {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn first(series: &[String]) {
    use wirefold_codec::cost::NetworkPath;
    let path = NetworkPath::from_bits_per_second(10_000_000);
    // (coding, quick level before, kept level)
    let codings = [
        (DictionaryCoding::Dcz, 3u32, 19u32),
        (DictionaryCoding::Dcb, 5, 11),
    ];
    // Per coding and column (quick, now, kept): % smaller than br-11 and CPU ms, per pair.
    let mut smaller = vec![[Vec::new(), Vec::new(), Vec::new()]; codings.len()];
    let mut cpu_ms = vec![[Vec::new(), Vec::new(), Vec::new()]; codings.len()];
    let mut totals = vec![[0.0f64; 3]; codings.len()];
    let mut levels_now = vec![std::collections::BTreeMap::<u32, usize>::new(); codings.len()];
    let mut br_total = 0.0;
    let mut pairs = 0;
    for dir in series {
        for pair in sorted_files(Path::new(dir)).windows(2) {
            let dictionary = std::fs::read(&pair[0]).expect("read");
            let data = std::fs::read(&pair[1]).expect("read");
            let br11 = wirefold_codec::compress(wirefold_http::ContentCoding::Br, 11, &data).len();
            br_total += br11 as f64;
            pairs += 1;
            let input = (dictionary.len() + data.len()) as u64;
            for (c, &(coding, quick, kept)) in codings.iter().enumerate() {
                let now = path.dictionary_level_now(coding, quick, kept, input, br11 as u64);
                *levels_now[c].entry(now).or_default() += 1;
                for (column, level) in [quick, now, kept].into_iter().enumerate() {
                    let started = thread_cpu_seconds();
                    let body = dictionary::encode(coding, level, &dictionary, &data);
                    let spent = thread_cpu_seconds() - started;
                    assert_eq!(
                        dictionary::decode(coding, &dictionary, &body, data.len()).as_deref(),
                        Ok(&data[..]),
                        "{} {} {level}",
                        pair[1].display(),
                        coding.token()
                    );
                    smaller[c][column].push(100.0 * (1.0 - body.len() as f64 / br11 as f64));
                    cpu_ms[c][column].push(spent * 1000.0);
                    totals[c][column] += body.len() as f64;
                }
            }
        }
    }
    println!("{pairs} pairs; the level answered now at 10 Mbit/s, plain body br-11\n");
    println!("| coding | answer | level (pairs) | smaller than br-11: median pair | total | encode CPU ms: median | p90 | total |");
    println!("|---|---|---|---:|---:|---:|---:|---:|");
    for (c, &(coding, quick, kept)) in codings.iter().enumerate() {
        for (column, name) in ["quick level (before)", "first request (now)", "kept level"]
            .into_iter()
            .enumerate()
        {
            let level = match column {
                0 => quick.to_string(),
                1 => levels_now[c]
                    .iter()
                    .map(|(l, n)| format!("{l} ({n})"))
                    .collect::<Vec<_>>()
                    .join(", "),
                _ => kept.to_string(),
            };
            let mut ms = cpu_ms[c][column].clone();
            ms.sort_by(f64::total_cmp);
            let p90 = ms.get(ms.len() * 9 / 10).copied().unwrap_or(f64::NAN);
            println!(
                "| {} | {name} | {level} | {:.1}% | {:.1}% | {:.2} | {:.2} | {:.0} |",
                coding.token(),
                median(smaller[c][column].clone()),
                100.0 * (1.0 - totals[c][column] / br_total),
                median(ms.clone()),
                p90,
                ms.iter().sum::<f64>()
            );
        }
    }
}

/// Half of `dictionary::train`: whole samples, newest last, cut to the last
/// `max_size` bytes (the newest content is nearest the data).
fn concatenated(samples: &[&[u8]], max_size: usize) -> Vec<u8> {
    let all = samples.concat();
    all[all.len().saturating_sub(max_size)..].to_vec()
}

/// The other half: the content part of a zstd-trained dictionary, whatever its size.
#[allow(unsafe_code)] // zstd-sys exposes the header parser only as C
fn trainer_content(samples: &[&[u8]], max_size: usize) -> Vec<u8> {
    let trained = zstd::dict::from_samples(samples, max_size).expect("zstd trainer");
    // SAFETY: pointer and length describe `trained`.
    let header =
        unsafe { zstd_sys::ZDICT_getDictHeaderSize(trained.as_ptr().cast(), trained.len()) };
    assert!(header <= trained.len(), "zstd dictionary header");
    trained[header..].to_vec()
}

fn train(dirs: &[String]) {
    println!("| siblings | dictionary | size | dcb C q11 total | dcz 19 total | br-11 total | dcb: smaller than br-11 total / median page | dcz: total / median |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for dir in dirs {
        let files = sorted_files(Path::new(dir));
        let pages: Vec<Vec<u8>> = files
            .iter()
            .map(|f| std::fs::read(f).expect("read"))
            .collect();
        let training: Vec<&[u8]> = pages.iter().step_by(2).map(Vec::as_slice).collect();
        let tests: Vec<&[u8]> = pages.iter().skip(1).step_by(2).map(Vec::as_slice).collect();
        let br11: Vec<f64> = tests
            .iter()
            .map(|t| brotli_cli(&["-q", "11", "-c"], t).len() as f64)
            .collect();
        for max_size in [32 * 1024, 128 * 1024] {
            let candidates = [
                (
                    "dictionary::train",
                    dictionary::train(&training, max_size).expect("train"),
                ),
                (
                    "zstd trainer content alone",
                    trainer_content(&training, max_size),
                ),
                (
                    "concatenated samples alone",
                    concatenated(&training, max_size),
                ),
            ];
            for (name, dict) in candidates {
                let sizes = |coding, level| -> Vec<f64> {
                    tests
                        .iter()
                        .map(|t| {
                            let body = dictionary::encode(coding, level, &dict, t);
                            assert_eq!(
                                dictionary::decode(coding, &dict, &body, t.len()).as_deref(),
                                Ok(*t)
                            );
                            body.len() as f64
                        })
                        .collect()
                };
                let (dcb, dcz) = (
                    sizes(DictionaryCoding::Dcb, 11),
                    sizes(DictionaryCoding::Dcz, 19),
                );
                let saving = |v: &[f64]| {
                    let total = 100.0 * (1.0 - v.iter().sum::<f64>() / br11.iter().sum::<f64>());
                    let per: Vec<f64> = v.iter().zip(&br11).map(|(b, r)| 1.0 - b / r).collect();
                    format!("{total:.1}% / {:.1}%", 100.0 * median(per))
                };
                println!(
                    "| {} ({} pages tested) | {name} | {} | {} | {} | {} | {} | {} |",
                    Path::new(dir).file_name().unwrap().to_string_lossy(),
                    tests.len(),
                    dict.len(),
                    dcb.iter().sum::<f64>(),
                    dcz.iter().sum::<f64>(),
                    br11.iter().sum::<f64>(),
                    saving(&dcb),
                    saving(&dcz)
                );
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("pairs") => pairs(&args[1..]),
        Some("train") => train(&args[1..]),
        Some("first") => first(&args[1..]),
        _ => panic!(
            "usage: dictionary_bench pairs SERIES_DIR... | first SERIES_DIR... | train SIBLINGS_DIR..."
        ),
    }
}
