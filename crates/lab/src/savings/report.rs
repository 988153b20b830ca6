//! The savings report: one JSON document (schema in docs/lab.md), the tables of Mogul
//! et al. 1997 for people, or one flat CSV table for scripts.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use super::analysis::{bin_label, MethodTally, Scenario, Tally, BINS};
use super::method::SavingsMethod;
use crate::report::{self, TextLayout};
use crate::trace::{Location, Skipped};

#[derive(Serialize)]
pub struct SavingsReport {
    pub traces: Vec<String>,
    /// Bases at a shared proxy, no clustering: the top-level numbers.
    #[serde(flatten)]
    pub proxy: ScenarioJson,
    /// Bases at a shared proxy, URLs with the same path one resource.
    pub clustered: ScenarioJson,
    pub per_client: PerClientJson,
    pub levels: BTreeMap<&'static str, u32>,
    pub max_responses: Option<u64>,
    pub stopped_at_max_responses: bool,
    pub skipped: Vec<SkippedJson>,
    pub wall_s: f64,
}

#[derive(Serialize)]
pub struct PerClientJson {
    #[serde(flatten)]
    pub unclustered: ScenarioJson,
    pub clustered: ScenarioJson,
}

#[derive(Serialize)]
pub struct ScenarioJson {
    #[serde(flatten)]
    counts: CountsJson,
    by_content_type: BTreeMap<String, CountsJson>,
    histogram: HistogramJson,
}

#[derive(Serialize)]
struct CountsJson {
    responses: u64,
    status_200: u64,
    analysed: u64,
    delta_eligible: u64,
    unchanged: u64,
    /// Over delta-eligible responses.
    methods: BTreeMap<&'static str, MethodJson>,
    /// Over all analysed status-200 responses.
    methods_all_responses: BTreeMap<&'static str, MethodJson>,
}

#[derive(Serialize)]
struct MethodJson {
    responses_improved: u64,
    bytes_before: u64,
    bytes_after: u64,
}

/// Figure 5-5: delta-eligible responses per bin of the fraction of bytes saved.
#[derive(Serialize)]
struct HistogramJson {
    bins: Vec<String>,
    counts: BTreeMap<&'static str, Vec<u64>>,
}

#[derive(Serialize)]
pub struct SkippedJson {
    file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    byte_offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    entry: Option<usize>,
    reason: String,
}

impl From<&Skipped> for SkippedJson {
    fn from(s: &Skipped) -> Self {
        let (byte_offset, entry) = match s.at {
            Location::Byte(b) => (Some(b), None),
            Location::Entry(e) => (None, Some(e)),
            Location::File => (None, None),
        };
        SkippedJson {
            file: s.file.display().to_string(),
            byte_offset,
            entry,
            reason: s.reason.clone(),
        }
    }
}

fn methods(tallies: &[MethodTally; 7]) -> BTreeMap<&'static str, MethodJson> {
    SavingsMethod::ALL
        .iter()
        .map(|&m| {
            let t = tallies[m.index()];
            let json = MethodJson {
                responses_improved: t.responses_improved,
                bytes_before: t.bytes_before,
                bytes_after: t.bytes_after,
            };
            (m.name(), json)
        })
        .collect()
}

impl CountsJson {
    fn new(t: &Tally) -> Self {
        CountsJson {
            responses: t.responses,
            status_200: t.status_200,
            analysed: t.analysed,
            delta_eligible: t.delta_eligible,
            unchanged: t.unchanged,
            methods: methods(&t.eligible),
            methods_all_responses: methods(&t.all),
        }
    }
}

impl ScenarioJson {
    pub fn new(s: &Scenario) -> Self {
        ScenarioJson {
            counts: CountsJson::new(&s.total),
            by_content_type: s
                .by_type
                .iter()
                .map(|(ty, t)| (ty.clone(), CountsJson::new(t)))
                .collect(),
            histogram: HistogramJson {
                bins: (0..BINS).map(bin_label).collect(),
                counts: SavingsMethod::ALL
                    .iter()
                    .map(|&m| (m.name(), s.total.histogram[m.index()].to_vec()))
                    .collect(),
            },
        }
    }
}

pub fn levels() -> BTreeMap<&'static str, u32> {
    SavingsMethod::ALL
        .iter()
        .filter_map(|&m| m.level().map(|l| (m.name(), l)))
        .collect()
}

/// `100 × (1 − after / before)`, one decimal.
fn saved_pct(t: &MethodTally) -> String {
    if t.bytes_before == 0 {
        return String::new();
    }
    format!(
        "{:.1}",
        100.0 * (1.0 - t.bytes_after as f64 / t.bytes_before as f64)
    )
}

const METHOD_COLUMNS: [&str; 8] = [
    "eligible_improved",
    "eligible_bytes",
    "eligible_after",
    "eligible_saved_%",
    "all_improved",
    "all_bytes",
    "all_after",
    "all_saved_%",
];

fn method_cells(t: &Tally, m: SavingsMethod) -> Vec<String> {
    let e = &t.eligible[m.index()];
    let a = &t.all[m.index()];
    vec![
        e.responses_improved.to_string(),
        e.bytes_before.to_string(),
        e.bytes_after.to_string(),
        saved_pct(e),
        a.responses_improved.to_string(),
        a.bytes_before.to_string(),
        a.bytes_after.to_string(),
        saved_pct(a),
    ]
}

/// A table of every method for each labelled tally.
fn write_methods(
    out: &mut dyn Write,
    title: &str,
    label: &str,
    rows: &[(String, &Tally)],
) -> io::Result<()> {
    let mut columns = vec![label, "method"];
    columns.extend(METHOD_COLUMNS);
    let values: Vec<Vec<String>> = rows
        .iter()
        .flat_map(|(name, t)| {
            SavingsMethod::ALL.iter().map(move |&m| {
                let mut row = vec![name.clone(), m.name().to_string()];
                row.extend(method_cells(t, m));
                row
            })
        })
        .collect();
    report::write_columns(out, TextLayout::Table, title, &columns, &values)
}

/// The human tables, named after Mogul et al. 1997 (section 5).
pub fn write_tables(
    out: &mut dyn Write,
    scenarios: &[Scenario],
    report: &SavingsReport,
) -> io::Result<()> {
    writeln!(out, "traces: {}", report.traces.join(", "))?;
    #[allow(
        clippy::expect_used,
        reason = "`Analysis::new` measures a scenario for every `Keeping`, named below"
    )]
    let by_name = |name: &str| {
        scenarios
            .iter()
            .find(|s| s.keeping.name() == name)
            .expect("every scenario is measured")
    };
    let counts: Vec<Vec<String>> = scenarios
        .iter()
        .map(|s| {
            let t = &s.total;
            vec![
                s.keeping.name().to_string(),
                t.responses.to_string(),
                t.status_200.to_string(),
                t.analysed.to_string(),
                t.delta_eligible.to_string(),
                t.unchanged.to_string(),
                (t.analysed - t.delta_eligible - t.unchanged).to_string(),
            ]
        })
        .collect();
    writeln!(out)?;
    report::write_columns(
        out,
        TextLayout::Table,
        "Table 5-1: responses (analysed = status 200, GET, body known; first = no earlier instance held)",
        &["bases", "responses", "status_200", "analysed", "delta_eligible", "unchanged", "first"],
        &counts,
    )?;
    let note = "eligible_*: over delta-eligible responses; all_*: over all analysed responses \
(a delta method without a base sends the body as is)";
    for (title, name) in [
        (
            "Table 5-3: bytes per method, bases kept per client",
            "per_client",
        ),
        (
            "Table 5-5: bytes per method, bases at a shared proxy",
            "proxy",
        ),
    ] {
        writeln!(out)?;
        write_methods(
            out,
            &format!("{title}\n{note}"),
            "bases",
            &[(name.to_string(), &by_name(name).total)],
        )?;
    }
    writeln!(out)?;
    let proxy = by_name("proxy");
    let types: Vec<(String, &Tally)> = proxy
        .by_type
        .iter()
        .map(|(ty, t)| (ty.clone(), t))
        .collect();
    write_methods(
        out,
        "Table 5-6: bytes per method and content type, bases at a shared proxy",
        "content_type",
        &types,
    )?;
    writeln!(out)?;
    let clustered: Vec<(String, &Tally)> = ["proxy_clustered", "per_client_clustered"]
        .iter()
        .map(|&n| (n.to_string(), &by_name(n).total))
        .collect();
    write_methods(
        out,
        "Tables 5-7/5-8: bytes per method with query-URL clustering (same path, any query, is one resource)",
        "bases",
        &clustered,
    )?;
    writeln!(out)?;
    let mut columns = vec!["saved"];
    columns.extend(SavingsMethod::ALL.iter().map(|m| m.name()));
    let bins: Vec<Vec<String>> = (0..BINS)
        .map(|b| {
            let mut row = vec![bin_label(b)];
            row.extend(
                SavingsMethod::ALL
                    .iter()
                    .map(|m| proxy.total.histogram[m.index()][b].to_string()),
            );
            row
        })
        .collect();
    report::write_columns(
        out,
        TextLayout::Table,
        "Figure 5-5: delta-eligible responses by fraction of bytes saved, bases at a shared proxy",
        &columns,
        &bins,
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "levels: gzip 6, br 11, zstd 19, dcb 11, dcz 19 (previous instance as dictionary), vcdiff (codec::vcdiff::encode)"
    )?;
    if report.stopped_at_max_responses {
        writeln!(
            out,
            "stopped after --max-responses {}",
            report.max_responses.unwrap_or(0)
        )?;
    }
    if !report.skipped.is_empty() {
        writeln!(
            out,
            "skipped records: {} (each reported on stderr)",
            report.skipped.len()
        )?;
    }
    writeln!(out, "wall time: {:.1} s", report.wall_s)
}

/// One flat table: a row per scenario, content type ("all" for the total), population
/// and method.
pub fn write_csv(out: &mut dyn Write, scenarios: &[Scenario]) -> io::Result<()> {
    let mut values = Vec::new();
    for s in scenarios {
        let groups = std::iter::once(("all", &s.total))
            .chain(s.by_type.iter().map(|(ty, t)| (ty.as_str(), t)));
        for (ty, t) in groups {
            for (population, responses, tallies) in [
                ("delta_eligible", t.delta_eligible, &t.eligible),
                ("all", t.analysed, &t.all),
            ] {
                for m in SavingsMethod::ALL {
                    let mt = tallies[m.index()];
                    values.push(vec![
                        s.keeping.name().to_string(),
                        ty.to_string(),
                        population.to_string(),
                        m.name().to_string(),
                        responses.to_string(),
                        mt.responses_improved.to_string(),
                        mt.bytes_before.to_string(),
                        mt.bytes_after.to_string(),
                    ]);
                }
            }
        }
    }
    report::write_columns(
        out,
        TextLayout::Csv,
        "",
        &[
            "bases",
            "content_type",
            "population",
            "method",
            "responses",
            "responses_improved",
            "bytes_before",
            "bytes_after",
        ],
        &values,
    )
}
