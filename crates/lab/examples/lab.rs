//! Runs a lab command until the `wirefold` binary wires `wirefold lab` to the crate:
//! `cargo run --release -p wirefold-lab --example lab -- codecs DIR…`.

use clap::Parser;

#[derive(Parser)]
struct Lab {
    #[command(subcommand)]
    command: wirefold_lab::LabCommand,
}

fn main() -> std::process::ExitCode {
    match wirefold_lab::run(Lab::parse().command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
