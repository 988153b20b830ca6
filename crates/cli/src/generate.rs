//! `wirefold generate`: man pages and shell completions made from the command line's
//! own definition, so they cannot drift from it. Packaging runs it
//! (`scripts/package.sh`); it is attached to the parser at run time, hidden, so the
//! pages and completions it generates do not list it.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{ArgMatches, Command, CommandFactory, FromArgMatches, Parser, Subcommand};
use clap_complete::Shell;

/// The subcommand's name, as matched in `run`.
const NAME: &str = "generate";

#[derive(Parser)]
#[command(name = NAME, hide = true)]
struct Generate {
    #[command(subcommand)]
    artifact: Artifact,
}

#[derive(Subcommand)]
enum Artifact {
    /// Man pages, one per command (`wirefold.1`, `wirefold-serve.1`,
    /// `wirefold-lab-codecs.1`, …), written uncompressed into DIR (created if missing).
    Man { dir: PathBuf },
    /// The completion script for SHELL, on stdout.
    Completions { shell: Shell },
}

/// `cli` with the hidden `generate` subcommand added: what `main` parses with.
pub fn attach(cli: Command) -> Command {
    cli.subcommand(Generate::command())
}

/// Runs `generate` when `matches` (parsed by `attach(cli)`) asked for it, with the
/// pages and completions made from `cli` alone; `None` when another command was asked.
pub fn run(matches: &ArgMatches, cli: Command) -> Option<Result<(), String>> {
    let Some((NAME, matches)) = matches.subcommand() else {
        return None;
    };
    let generate = match Generate::from_arg_matches(matches) {
        Ok(generate) => generate,
        Err(e) => return Some(Err(e.to_string())),
    };
    Some(match generate.artifact {
        Artifact::Man { dir } => write_man_pages(cli, &dir),
        Artifact::Completions { shell } => {
            let mut script = Vec::new();
            let mut cli = cli;
            clap_complete::generate(shell, &mut cli, "wirefold", &mut script);
            std::io::stdout()
                .write_all(&script)
                .map_err(|e| format!("stdout: {e}"))
        }
    })
}

/// Writes one page for `cli` and for each of its visible subcommands, recursively,
/// each titled with its full name (`wirefold-dict-train`) and the program's version.
fn write_man_pages(cli: Command, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // `help` is a page of its own in clap's tree, but says nothing `--help` does not.
    let mut cli = cli.disable_help_subcommand(true);
    // Building names the subcommands (`wirefold-serve`) and gives them their usage.
    cli.build();
    let source = format!("wirefold {}", cli.get_version().unwrap_or_default());
    write_pages(&cli, dir, &source)
}

fn write_pages(command: &Command, dir: &Path, source: &str) -> Result<(), String> {
    let page = clap_mangen::Man::new(command.clone()).source(source);
    let path = dir.join(page.get_filename());
    let mut roff = Vec::new();
    page.render(&mut roff)
        .and_then(|()| std::fs::write(&path, roff))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    for subcommand in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(subcommand, dir, source)?;
    }
    Ok(())
}
