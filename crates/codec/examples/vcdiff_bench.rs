//! Times the VCDIFF encoder and decoder on file pairs:
//! `cargo run --release --example vcdiff_bench -- [--effort N] [--runs N] [--out DIR] OLD NEW [OLD NEW ...]`
//! prints one line per pair: delta bytes, median encode and decode milliseconds. With `--out`,
//! each delta is written to DIR/<index>.vcdiff (for decoding with xdelta3).
#![allow(
    clippy::expect_used,
    reason = "a benchmark run by hand: a failure ends it with its message"
)]

use std::time::Instant;

use wirefold_codec::vcdiff::{self, EncodeOptions};

fn median_ms(runs: usize, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut options = EncodeOptions::default();
    let mut runs = 9;
    let mut out_dir = None;
    while args.first().is_some_and(|a| a.starts_with("--")) {
        let flag = args.remove(0);
        let value = args.remove(0);
        match flag.as_str() {
            "--effort" => options.effort = value.parse().expect("effort"),
            "--runs" => runs = value.parse().expect("runs"),
            "--window" => options.window_size = value.parse().expect("window bytes"),
            "--no-target-copies" => options.target_copies = value != "1",
            "--out" => out_dir = Some(value),
            other => panic!("unknown flag {other}"),
        }
    }
    println!("pair\told_bytes\tnew_bytes\tdelta_bytes\tencode_ms\tdecode_ms");
    for (index, pair) in args.chunks(2).enumerate() {
        let old = std::fs::read(&pair[0]).expect("read old");
        let new = std::fs::read(&pair[1]).expect("read new");
        let delta = vcdiff::encode_with(&old, &new, &options);
        assert_eq!(
            vcdiff::decode(&old, &delta, new.len()).expect("decode"),
            new,
            "round trip"
        );
        let encode_ms = median_ms(runs, || {
            drop(std::hint::black_box(vcdiff::encode_with(
                &old, &new, &options,
            )))
        });
        let decode_ms = median_ms(runs, || {
            drop(std::hint::black_box(vcdiff::decode(
                &old,
                &delta,
                new.len(),
            )))
        });
        if let Some(dir) = &out_dir {
            std::fs::write(format!("{dir}/{index}.vcdiff"), &delta).expect("write delta");
        }
        println!(
            "{}\t{}\t{}\t{}\t{encode_ms:.2}\t{decode_ms:.2}",
            pair[1],
            old.len(),
            new.len(),
            delta.len()
        );
    }
}
