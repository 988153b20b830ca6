//! Printing result rows as an aligned table or as CSV (JSON goes through serde).

use std::io::{self, Write};

/// A result row with named columns.
pub trait Row {
    const COLUMNS: &'static [&'static str];
    fn values(&self) -> Vec<String>;
}

/// How rows are printed as text.
#[derive(Clone, Copy, Debug)]
pub enum TextLayout {
    Table,
    Csv,
}

/// Prints `rows` under `title` (tables only: CSV stays machine-readable).
pub fn write_rows<R: Row>(
    out: &mut dyn Write,
    layout: TextLayout,
    title: &str,
    rows: &[R],
) -> io::Result<()> {
    match layout {
        TextLayout::Table => write_table(out, title, rows),
        TextLayout::Csv => write_csv(out, rows),
    }
}

/// Prints rows whose columns are only known at run time (one `values` entry per column).
pub fn write_columns(
    out: &mut dyn Write,
    layout: TextLayout,
    title: &str,
    columns: &[&str],
    values: &[Vec<String>],
) -> io::Result<()> {
    match layout {
        TextLayout::Table => write_table_values(out, title, columns, values),
        TextLayout::Csv => {
            writeln!(out, "{}", columns.join(","))?;
            for v in values {
                writeln!(out, "{}", v.join(","))?;
            }
            Ok(())
        }
    }
}

fn write_table<R: Row>(out: &mut dyn Write, title: &str, rows: &[R]) -> io::Result<()> {
    let values: Vec<Vec<String>> = rows.iter().map(Row::values).collect();
    write_table_values(out, title, R::COLUMNS, &values)
}

/// Columns padded to their widest value; text left-aligned, numbers right-aligned.
fn write_table_values(
    out: &mut dyn Write,
    title: &str,
    columns: &[&str],
    values: &[Vec<String>],
) -> io::Result<()> {
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, name)| {
            values
                .iter()
                .map(|v| v[i].len())
                .chain([name.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let numeric: Vec<bool> = (0..columns.len())
        .map(|i| {
            values
                .iter()
                .all(|v| v[i].is_empty() || v[i].parse::<f64>().is_ok())
        })
        .collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .zip(&numeric)
            .map(|((cell, &w), &num)| {
                if num {
                    format!("{cell:>w$}")
                } else {
                    format!("{cell:<w$}")
                }
            })
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    writeln!(out, "{title}")?;
    let header: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
    writeln!(out, "{}", line(&header))?;
    for v in values {
        writeln!(out, "{}", line(v))?;
    }
    Ok(())
}

/// A header line and one line per row. Values are names and numbers: no quoting needed.
fn write_csv<R: Row>(out: &mut dyn Write, rows: &[R]) -> io::Result<()> {
    writeln!(out, "{}", R::COLUMNS.join(","))?;
    for row in rows {
        writeln!(out, "{}", row.values().join(","))?;
    }
    Ok(())
}
