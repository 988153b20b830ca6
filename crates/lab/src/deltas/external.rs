//! Peer tools (xdelta3, the zstd CLI) run as child processes, timed by the CPU time
//! the kernel charged to the child (user + system, from `wait4`).
//!
//! A child's CPU time includes its start (exec, dynamic linking, allocating its
//! buffers) and its file I/O, which an in-process codec does not pay; [`Tool::startup`]
//! measures that part on a one-byte pair so readers can judge it. Wall time is kept
//! too but not used for ratios: on a shared machine it counts other processes' turns.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A peer tool and whether it can be run.
#[derive(Clone, Debug)]
pub struct Tool {
    pub name: &'static str,
    pub program: PathBuf,
    /// The first line of its version output, when it ran.
    pub version: Option<String>,
    /// Why it cannot be used, when it cannot.
    pub missing: Option<String>,
    /// Median CPU time of the encode and decode commands on a one-byte pair.
    pub startup: Option<Startup>,
}

impl Tool {
    /// Runs `program version_arg` to see whether the tool is there.
    pub fn probe(name: &'static str, program: &Path, version_arg: &str) -> Tool {
        let mut tool = Tool {
            name,
            program: program.to_path_buf(),
            version: None,
            missing: None,
            startup: None,
        };
        match Command::new(program)
            .arg(version_arg)
            .stdin(Stdio::null())
            .output()
        {
            Ok(out) if out.status.success() => {
                let text = if out.stdout.is_empty() {
                    out.stderr
                } else {
                    out.stdout
                };
                tool.version = version_of(&String::from_utf8_lossy(&text));
            }
            Ok(out) => {
                tool.missing = Some(format!(
                    "`{} {version_arg}` exited with {}",
                    program.display(),
                    out.status
                ))
            }
            Err(e) => tool.missing = Some(format!("cannot run {}: {e}", program.display())),
        }
        tool
    }

    pub fn available(&self) -> bool {
        self.missing.is_none()
    }
}

/// The first word with a digit and a dot in a tool's version text
/// (`Xdelta version 3.0.11, Copyright …` → `3.0.11`; `… v1.5.4, by …` → `1.5.4`).
fn version_of(text: &str) -> Option<String> {
    text.split_whitespace()
        .map(|w| w.trim_matches(|c: char| c == ',' || c == 'v' || c == '*'))
        .find(|w| w.contains('.') && w.starts_with(|c: char| c.is_ascii_digit()))
        .map(str::to_string)
}

/// A tool's fixed cost per run: its commands on a one-byte pair.
#[derive(Clone, Copy, Debug, Default)]
pub struct Startup {
    pub encode: Duration,
    pub decode: Duration,
}

/// One finished child run.
#[derive(Clone, Copy, Debug)]
pub struct ChildTime {
    /// User + system CPU time of the child.
    pub cpu: Duration,
    pub user: Duration,
    pub sys: Duration,
    pub wall: Duration,
}

/// Runs `program args…` with stdin and stdout closed, waits with `wait4` and returns
/// its resource usage; an error (with its stderr) unless it exits with status 0.
#[allow(unsafe_code)] // std's `Child::wait` does not report the child's rusage (wait4)
pub fn run_timed(program: &Path, args: &[&OsStr], stderr_file: &Path) -> Result<ChildTime, String> {
    let stderr =
        File::create(stderr_file).map_err(|e| format!("{}: {e}", stderr_file.display()))?;
    let start = Instant::now();
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is our own unwaited child; status and usage are valid to write.
        let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if rc == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("waiting for {}: {err}", program.display()));
        }
    }
    let wall = start.elapsed();
    // The child is reaped: dropping the handle neither waits nor kills.
    drop(child);
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    if !ok {
        let text = std::fs::read_to_string(stderr_file).unwrap_or_default();
        let how = if libc::WIFSIGNALED(status) {
            format!("killed by signal {}", libc::WTERMSIG(status))
        } else {
            format!("exit status {}", libc::WEXITSTATUS(status))
        };
        let args: Vec<String> = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        return Err(format!(
            "`{} {}` failed ({how}): {}",
            program.display(),
            args.join(" "),
            text.trim()
        ));
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    let (user, sys) = (tv(usage.ru_utime), tv(usage.ru_stime));
    Ok(ChildTime {
        cpu: user + sys,
        user,
        sys,
        wall,
    })
}

/// Runs the same command `runs` times; the run with the median CPU time, and the
/// median wall time.
pub fn run_repeated(
    program: &Path,
    args: &[&OsStr],
    stderr_file: &Path,
    runs: u32,
) -> Result<ChildTime, String> {
    let mut times = Vec::new();
    for _ in 0..runs.max(1) {
        times.push(run_timed(program, args, stderr_file)?);
    }
    let mut wall: Vec<Duration> = times.iter().map(|t| t.wall).collect();
    wall.sort_unstable();
    times.sort_by_key(|t| t.cpu);
    Ok(ChildTime {
        wall: wall[wall.len() / 2],
        ..times[times.len() / 2]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(
            version_of("Xdelta version 3.0.11, Copyright (C) 2007").as_deref(),
            Some("3.0.11")
        );
        assert_eq!(
            version_of("*** Zstandard CLI (64-bit) v1.5.4, by Yann Collet ***").as_deref(),
            Some("1.5.4")
        );
    }

    #[test]
    fn a_missing_program_is_reported() {
        let tool = Tool::probe("xdelta3", Path::new("/nonexistent/xdelta3"), "-V");
        assert!(!tool.available());
        assert!(tool.missing.unwrap().contains("/nonexistent/xdelta3"));
    }

    #[test]
    fn child_cpu_time_counts_the_child_work() {
        let dir = tempfile::tempdir().unwrap();
        let err = dir.path().join("stderr");
        // A shell loop burns measurable CPU in the child.
        let script = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done";
        let t = run_timed(
            Path::new("sh"),
            &[OsStr::new("-c"), OsStr::new(script)],
            &err,
        )
        .unwrap();
        assert!(t.cpu > Duration::from_millis(5), "{t:?}");
        let failed = run_timed(
            Path::new("sh"),
            &[OsStr::new("-c"), OsStr::new("echo boom >&2; exit 3")],
            &err,
        )
        .unwrap_err();
        assert!(
            failed.contains("exit status 3") && failed.contains("boom"),
            "{failed}"
        );
    }
}
