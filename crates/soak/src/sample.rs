//! Resident memory and open file descriptors of the processes under test, read from
//! /proc (Linux).

use std::path::Path;

use serde::Serialize;

/// A process to watch, by the name the report gives it.
#[derive(Clone, Debug)]
pub struct Watched {
    pub name: String,
    pub pid: u32,
}

impl std::str::FromStr for Watched {
    type Err = String;

    /// `NAME=PID`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, pid) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}`: expected NAME=PID, e.g. serve=4242"))?;
        let pid = pid
            .parse()
            .map_err(|_| format!("`{s}`: the PID `{pid}` is not a number"))?;
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!("`{s}`: the name must be letters, digits, - or _"));
        }
        Ok(Watched {
            name: name.to_string(),
            pid,
        })
    }
}

/// One reading of one process.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Seconds since the run started.
    pub seconds: f64,
    pub process: String,
    pub pid: u32,
    pub rss_kb: u64,
    pub fds: u64,
}

/// Resident set size (kB) and open descriptors of `pid`; `None` when it is gone.
pub fn read(pid: u32) -> Option<(u64, u64)> {
    let proc = Path::new("/proc").join(pid.to_string());
    let status = std::fs::read_to_string(proc.join("status")).ok()?;
    // A zombie has no memory and no descriptors: it is gone.
    if status
        .lines()
        .any(|l| l.starts_with("State:") && l.contains("zombie"))
    {
        return None;
    }
    let rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())?;
    let fds = std::fs::read_dir(proc.join("fd")).ok()?.count() as u64;
    Some((rss_kb, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let (rss, fds) = read(std::process::id()).unwrap();
        assert!(rss > 0 && fds > 0);
        assert_eq!(read(u32::MAX), None, "no such process");
    }

    #[test]
    fn watched_processes_are_name_equals_pid() {
        let w: Watched = "serve=42".parse().unwrap();
        assert_eq!((w.name.as_str(), w.pid), ("serve", 42));
        for bad in ["serve", "=42", "serve=x", "a b=1"] {
            assert!(bad.parse::<Watched>().is_err(), "{bad}");
        }
    }
}
