//! The report: the last line of JSON, and the files of the results folder
//! (`summary.json`, `samples.csv`, `minutes.csv`, `soak.svg`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;
use serde::Serialize;

use crate::options::DriveOptions;
use crate::sample::Sample;
use crate::stats::{Outcomes, Tally};

/// One minute of the run.
#[derive(Clone, Debug, Serialize)]
pub struct MinuteRow {
    pub minute: usize,
    pub requests: u64,
    pub errors: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// First, largest and last reading.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Span<T> {
    pub first: T,
    pub max: T,
    pub last: T,
}

impl<T: Copy + PartialOrd> Span<T> {
    fn of(values: impl IntoIterator<Item = T>) -> Option<Self> {
        let mut values = values.into_iter();
        let first = values.next()?;
        let (max, last) = values.fold((first, first), |(max, _), v| {
            (if v > max { v } else { max }, v)
        });
        Some(Span { first, max, last })
    }
}

/// One watched process over the run.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessRow {
    pub pid: u32,
    pub rss_mb: Span<f64>,
    pub fds: Span<u64>,
    /// This process's share of `Report::rss_growth_mb_per_minute_second_half`.
    pub rss_growth_mb_per_minute_second_half: f64,
}

/// Everything a run found.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub seconds: f64,
    pub connections: usize,
    pub requests: u64,
    pub wrong_bodies: u64,
    pub errors: BTreeMap<String, u64>,
    /// Totals over the watched processes, per sample.
    pub rss_mb: Span<f64>,
    pub fds: Span<u64>,
    /// How fast the total RSS grew over the second half of the run (least
    /// squares), MB per minute: near zero when memory is flat after warm-up.
    pub rss_growth_mb_per_minute_second_half: f64,
    pub minutes: Vec<MinuteRow>,
    /// Outcomes by `route.plan`.
    pub kinds: BTreeMap<String, Outcomes>,
    pub statuses: BTreeMap<u16, u64>,
    pub codings: BTreeMap<String, u64>,
    pub processes: BTreeMap<String, ProcessRow>,
    /// The first few details of each error kind.
    pub examples: BTreeMap<String, Vec<String>>,
    #[serde(skip)]
    pub samples: Vec<Sample>,
}

fn mb(kb: u64) -> f64 {
    (kb as f64 / 1024.0 * 10.0).round() / 10.0
}

fn two_places(ms: f64) -> f64 {
    (ms * 100.0).round() / 100.0
}

impl Report {
    pub fn new(
        options: &DriveOptions,
        elapsed: Duration,
        tally: Tally,
        samples: Vec<Sample>,
    ) -> Report {
        let minutes: Vec<MinuteRow> = tally
            .minutes
            .iter()
            .enumerate()
            .map(|(minute, m)| MinuteRow {
                minute,
                requests: m.requests,
                errors: m.errors,
                p50_ms: two_places(m.latency.quantile_ms(0.5)),
                p99_ms: two_places(m.latency.quantile_ms(0.99)),
            })
            .collect();
        let totals = totals(&samples);
        let mut processes = BTreeMap::new();
        for sample in &samples {
            processes
                .entry(sample.process.clone())
                .or_insert_with(Vec::new)
                .push(sample);
        }
        let half = elapsed.as_secs_f64() / 2.0;
        let growth_in_second_half = |points: &mut dyn Iterator<Item = (f64, u64)>| {
            let second_half: Vec<(f64, f64)> = points
                .filter(|(t, _)| *t >= half)
                .map(|(t, rss_kb)| (t / 60.0, mb(rss_kb)))
                .collect();
            two_places(slope(&second_half))
        };
        let processes = processes
            .into_iter()
            .map(|(name, samples)| {
                let row = ProcessRow {
                    pid: samples[0].pid,
                    rss_mb: Span::of(samples.iter().map(|s| mb(s.rss_kb))).unwrap_or_default(),
                    fds: Span::of(samples.iter().map(|s| s.fds)).unwrap_or_default(),
                    rss_growth_mb_per_minute_second_half: growth_in_second_half(
                        &mut samples.iter().map(|s| (s.seconds, s.rss_kb)),
                    ),
                };
                (name, row)
            })
            .collect();
        Report {
            seconds: (elapsed.as_secs_f64() * 10.0).round() / 10.0,
            connections: options.connections,
            requests: tally.requests,
            wrong_bodies: tally.wrong_bodies,
            errors: tally
                .errors
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            rss_mb: Span::of(totals.iter().map(|(_, rss, _)| mb(*rss))).unwrap_or_default(),
            fds: Span::of(totals.iter().map(|(_, _, fds)| *fds)).unwrap_or_default(),
            rss_growth_mb_per_minute_second_half: growth_in_second_half(
                &mut totals.iter().map(|(t, rss_kb, _)| (*t, *rss_kb)),
            ),
            minutes,
            kinds: tally.kinds,
            statuses: tally.statuses,
            codings: tally.codings,
            processes,
            examples: tally
                .examples
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            samples,
        }
    }

    /// The p99 of the first and of the last minute with requests.
    pub fn p99_first_last(&self) -> [f64; 2] {
        let mut with = self.minutes.iter().filter(|m| m.requests > 0);
        let first = with.next().map_or(0.0, |m| m.p99_ms);
        let last = with.next_back().map_or(first, |m| m.p99_ms);
        [first, last]
    }

    /// `{"requests": N, "wrong_bodies": N, "errors": {KIND: N}, "rss_mb": [FIRST, MAX,
    /// LAST], "fds": [FIRST, MAX, LAST], "p99_ms": [FIRST_MINUTE, LAST_MINUTE]}`.
    pub fn json_line(&self) -> String {
        let errors: Vec<String> = self
            .errors
            .iter()
            .map(|(k, v)| format!("{}: {v}", serde_json::Value::from(k.as_str())))
            .collect();
        let [p99_first, p99_last] = self.p99_first_last();
        format!(
            "{{\"requests\": {}, \"wrong_bodies\": {}, \"errors\": {{{}}}, \"rss_mb\": [{}, {}, {}], \"fds\": [{}, {}, {}], \"p99_ms\": [{}, {}]}}",
            self.requests,
            self.wrong_bodies,
            errors.join(", "),
            number(self.rss_mb.first),
            number(self.rss_mb.max),
            number(self.rss_mb.last),
            self.fds.first,
            self.fds.max,
            self.fds.last,
            number(p99_first),
            number(p99_last),
        )
    }

    /// Writes `summary.json`, `samples.csv`, `minutes.csv` and `soak.svg` into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), String> {
        let write = |name: &str, text: String| {
            std::fs::write(dir.join(name), text)
                .map_err(|e| format!("{}: {e}", dir.join(name).display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let summary = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        write("summary.json", summary + "\n")?;
        let mut samples = String::from("seconds,process,pid,rss_mb,fds\n");
        for s in &self.samples {
            let _ = writeln!(
                samples,
                "{:.1},{},{},{},{}",
                s.seconds,
                s.process,
                s.pid,
                mb(s.rss_kb),
                s.fds
            );
        }
        write("samples.csv", samples)?;
        let mut minutes = String::from("minute,requests,errors,p50_ms,p99_ms\n");
        for m in &self.minutes {
            let _ = writeln!(
                minutes,
                "{},{},{},{},{}",
                m.minute, m.requests, m.errors, m.p50_ms, m.p99_ms
            );
        }
        write("minutes.csv", minutes)?;
        self.plot(&dir.join("soak.svg"))
            .map_err(|e| format!("{}: {e}", dir.join("soak.svg").display()))
    }

    /// RSS and open descriptors of each watched process over time, and latency per
    /// minute, one panel each.
    fn plot(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (900, 1000)).into_drawing_area();
        root.fill(&WHITE)?;
        let panels = root.split_evenly((3, 1));
        let end = (self.seconds / 60.0).max(0.1);
        let names: Vec<&String> = self.processes.keys().collect();
        let series = |value: fn(&Sample) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
            names
                .iter()
                .map(|name| {
                    let points = self
                        .samples
                        .iter()
                        .filter(|s| &&s.process == name)
                        .map(|s| (s.seconds / 60.0, value(s)))
                        .collect();
                    (name.to_string(), points)
                })
                .collect()
        };
        line_panel(
            &panels[0],
            "resident memory (MB)",
            end,
            series(|s| s.rss_kb as f64 / 1024.0),
        )?;
        line_panel(
            &panels[1],
            "open file descriptors",
            end,
            series(|s| s.fds as f64),
        )?;
        let latency = |pick: fn(&MinuteRow) -> f64| -> Vec<(f64, f64)> {
            self.minutes
                .iter()
                .filter(|m| m.requests > 0)
                .map(|m| (m.minute as f64 + 0.5, pick(m)))
                .collect()
        };
        line_panel(
            &panels[2],
            "latency per minute (ms)",
            end,
            vec![
                ("p50".to_string(), latency(|m| m.p50_ms)),
                ("p99".to_string(), latency(|m| m.p99_ms)),
            ],
        )?;
        root.present()?;
        Ok(())
    }
}

/// A JSON number: integral values without a fraction.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Total RSS (kB) and descriptors of the watched processes per sampling time.
fn totals(samples: &[Sample]) -> Vec<(f64, u64, u64)> {
    let mut by_time: BTreeMap<u64, (f64, u64, u64)> = BTreeMap::new();
    for s in samples {
        let entry = by_time
            .entry((s.seconds * 1000.0) as u64)
            .or_insert((s.seconds, 0, 0));
        entry.1 += s.rss_kb;
        entry.2 += s.fds;
    }
    by_time.into_values().collect()
}

/// The least-squares slope of `points`; 0 with fewer than two.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let covariance: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let variance: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if variance == 0.0 {
        0.0
    } else {
        covariance / variance
    }
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
];

fn line_panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    end_minutes: f64,
    series: Vec<(String, Vec<(f64, f64)>)>,
) -> Result<(), Box<dyn std::error::Error>> {
    let top = series
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..end_minutes, 0.0..(top * 1.15).max(1.0))?;
    chart
        .configure_mesh()
        .x_desc("minutes")
        .light_line_style(WHITE)
        .draw()?;
    for (i, (name, points)) in series.into_iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Minute, Tally};

    fn sample(seconds: f64, process: &str, rss_kb: u64, fds: u64) -> Sample {
        Sample {
            seconds,
            process: process.into(),
            pid: 1,
            rss_kb,
            fds,
        }
    }

    #[test]
    fn the_json_line_has_the_issues_shape() {
        let mut minute = Minute {
            requests: 10,
            ..Minute::default()
        };
        minute.latency.record(Duration::from_millis(3));
        let mut tally = Tally {
            requests: 10,
            minutes: vec![minute.clone(), Minute::default(), minute],
            ..Tally::default()
        };
        tally.errors.insert("timeout", 2);
        let samples = vec![
            sample(0.0, "a", 10240, 10),
            sample(0.0, "b", 10240, 5),
            sample(10.0, "a", 20480, 12),
            sample(10.0, "b", 10240, 5),
            sample(20.0, "a", 15360, 11),
        ];
        let report = Report::new(
            &DriveOptions::default(),
            Duration::from_secs(20),
            tally,
            samples,
        );
        // 3 ms lands in the bucket whose middle is 2.976 ms (1/32 precision).
        let line = report.json_line();
        assert_eq!(
            line,
            "{\"requests\": 10, \"wrong_bodies\": 0, \"errors\": {\"timeout\": 2}, \
             \"rss_mb\": [20, 30, 15], \"fds\": [15, 17, 11], \"p99_ms\": [2.98, 2.98]}"
        );
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(parsed["errors"]["timeout"], 2);
        let dir = tempfile::tempdir().unwrap();
        report.write(dir.path()).unwrap();
        for file in ["summary.json", "samples.csv", "minutes.csv", "soak.svg"] {
            assert!(
                dir.path().join(file).metadata().unwrap().len() > 0,
                "{file}"
            );
        }
    }

    #[test]
    fn slopes_find_growth() {
        assert_eq!(slope(&[(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]), 2.0);
        assert_eq!(slope(&[(0.0, 1.0)]), 0.0);
    }
}
