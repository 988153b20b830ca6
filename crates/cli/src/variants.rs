//! `wirefold variants build DIR`: the variants of a `--root` site made ahead of
//! requests, into the store `wirefold serve --root DIR --data-dir D` then serves
//! them from (`proxy::variants_build`).

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};
use proxy::config::Config;
use proxy::variants_build::{self, Progress};

#[derive(Subcommand)]
pub enum VariantsCommand {
    /// Make the variants (image ladders; minified HTML, CSS and JavaScript in a build
    /// with the `minify` feature) of every file under DIR, the directory `serve
    /// --root` serves, into the store of --data-dir, so the server offers them from
    /// its first request. Files whose variants are kept already are not made again.
    Build {
        /// The site's directory (what `serve --root` is given).
        dir: PathBuf,
        /// Store directory, the one `serve --data-dir` is given [default: ./wirefold-data].
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// A fleet's shared store on Redis instead of --data-dir (the forms of `serve
        /// --store`), so every instance on it serves the variants.
        #[arg(long, value_name = "URL")]
        store: Option<String>,
        /// TOML configuration file (its `[fidelity]`, `[compression]`, `[cache]` and
        /// `data_dir` apply), as `serve --config`.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

pub fn run(command: VariantsCommand) -> Result<(), String> {
    let VariantsCommand::Build {
        dir,
        data_dir,
        store,
        config,
    } = command;
    let mut config = match &config {
        Some(path) => Config::from_file(path).map_err(|e| e.to_string())?,
        None => Config::default(),
    };
    if let Some(data_dir) = data_dir {
        config.data_dir = data_dir;
    }
    if let Some(store) = store {
        config.store = Some(store);
    }
    config.root = Some(dir.clone());
    config.origin = None;
    let problems = config.problems();
    if !problems.is_empty() {
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Err(lines.join("\n"));
    }

    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(0)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} files {elapsed} {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let report = variants_build::build(&dir, &config, &mut |event| match event {
        Progress::Found(files) => bar.set_length(files as u64),
        Progress::File(path) => {
            bar.set_message(path.display().to_string());
            bar.inc(1);
        }
        Progress::Skipped(path, why) => {
            bar.suspend(|| eprintln!("wirefold: warning: {} skipped: {why}", path.display()));
        }
    })
    .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    println!(
        "variants build: {} files, {} done ({} skipped), {} variants kept, {} bytes saved (largest saving per file, before compression) in {}",
        report.files,
        report.done,
        report.skipped,
        report.variants,
        report.bytes_saved,
        config
            .store_location()
            .map_or_else(|_| config.data_dir.display().to_string(), |l| l.to_string())
    );
    if report.files > 0 && report.done == 0 {
        return Err(format!(
            "no file under {} could be read or kept",
            dir.display()
        ));
    }
    Ok(())
}
