//! `wirefold lab`: the lab's analyses (`wirefold-lab`) and, beside them, the test and
//! bench tools of `wirefold-testbed` (`lab link`, `lab series-origin`).

use clap::Subcommand;
use testbed::emulator::{self, EmulatorArgs};
use testbed::series_origin::{self, SeriesOriginArgs};

/// `wirefold lab <command>`: an analysis of `wirefold-lab` or a tool of `wirefold-testbed`.
#[derive(Subcommand)]
pub enum LabSubcommand {
    #[command(flatten)]
    Analysis(lab::LabCommand),
    // The analyses are listed first, in their own order (display orders 0 to 4: codecs,
    // deltas, aid, estimate, savings); `link` shares savings' 4 and sorts before it by
    // name, so `wirefold lab --help` lists the commands as it always has (checked below).
    /// Run a command behind an emulated link: its own network namespace, whose only
    /// route is a TUN device; each packet delayed, rate-limited and queued drop-tail in
    /// each direction (docs/link-emulator.md). Exits with the command's exit code.
    #[command(display_order = 4)]
    Link(EmulatorArgs),
    /// An origin whose pages change on every request: each GET of a series' URL returns
    /// its next version (br/gzip precompressed, optional delay), for the optimistic-delta
    /// benchmark (docs/optimistic-bench.md). Prints the URLs, then `ready`.
    SeriesOrigin(SeriesOriginArgs),
}

/// Runs a lab command, printing its report on standard output.
pub fn run(command: LabSubcommand) -> Result<(), String> {
    match command {
        LabSubcommand::Analysis(analysis) => lab::run(analysis).map_err(|e| e.to_string()),
        LabSubcommand::Link(args) => emulator::run(&args).map_err(|e| format!("lab link: {e}")),
        LabSubcommand::SeriesOrigin(args) => {
            series_origin::run(&args, &mut std::io::stdout().lock()).map_err(|e| e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[derive(clap::Parser)]
    struct Lab {
        #[command(subcommand)]
        command: super::LabSubcommand,
    }

    #[test]
    fn help_lists_the_commands_in_their_order() {
        let help = Lab::command().render_help().to_string();
        let listed: Vec<&str> = help
            .lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .map_while(|l| l.strip_prefix("  "))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(
            listed,
            [
                "codecs",
                "deltas",
                "aid",
                "estimate",
                "link",
                "savings",
                "series-origin",
                "help"
            ]
        );
    }
}
