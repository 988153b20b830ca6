//! Progress on stderr while an analysis runs, when stderr is a terminal.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// Steps of a known total.
pub(crate) const STEPS: &str = "{elapsed_precise} [{bar:40}] {pos}/{len} {wide_msg}";
/// Version pairs of a known total.
pub(crate) const PAIRS: &str = "{elapsed_precise} [{bar:40}] {pos}/{len} pairs {wide_msg}";
/// Responses, counted as they come.
pub(crate) const RESPONSES: &str = "{elapsed_precise} {spinner} {pos} responses {wide_msg}";

/// A bar of `len` steps, or a spinner when `None`, drawn in `template` (one of the
/// templates above); hidden unless stderr is a terminal.
#[allow(
    clippy::expect_used,
    reason = "the templates are the constants above, which a test parses"
)]
pub(crate) fn bar(len: Option<u64>, template: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template(template).expect("a valid progress template");
    match len {
        Some(len) => ProgressBar::new(len),
        None => ProgressBar::new_spinner(),
    }
    .with_style(style)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_templates_parse() {
        for template in [STEPS, PAIRS, RESPONSES] {
            assert!(ProgressStyle::with_template(template).is_ok(), "{template}");
        }
    }
}
