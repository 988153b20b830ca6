//! The access log (`[log] access`): one line per request, in the combined format or
//! as JSON, written by a thread of its own that owns the file.
//!
//! A request hands its record to a bounded queue and never waits: when the writer
//! falls behind (a slow disk, a stalled pipe), records that find the queue full are
//! dropped and counted (`wirefold_access_log_dropped_total`). Lines are formatted by
//! the writer, not by the request. `SIGUSR1` reopens the file, after logrotate moved
//! it away; a reopen that fails keeps writing where the log was (warned once).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prometheus_client::metrics::counter::Counter;
use serde::Serialize;

use crate::config::{AccessFormat, LogConfig};
use crate::metrics::AccessLogCounters;
use crate::record::RequestRecord;

/// Why the access log could not be opened at start.
#[derive(Debug, thiserror::Error)]
#[error("`log.access`: cannot open {} for appending: {source}", path.display())]
pub struct AccessLogError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// The request side of the access log: a bounded queue to the writer thread.
#[derive(Clone)]
pub struct AccessLog {
    queue: SyncSender<Entry>,
    /// Set by [`AccessLog::reopen`], seen by the writer before its next line.
    reopen: Arc<AtomicBool>,
    dropped: Counter,
}

enum Entry {
    Line(Box<RequestRecord>),
    /// Wakes the writer to see the reopen flag.
    Reopen,
    /// Writes out what is buffered, then answers.
    Flush(tokio::sync::oneshot::Sender<()>),
}

impl AccessLog {
    /// Opens the configured access log and starts its writer; `None` when none is
    /// configured.
    ///
    /// # Errors
    /// A file that cannot be opened for appending, named with its key.
    pub fn start(
        config: &LogConfig,
        counters: AccessLogCounters,
    ) -> Result<Option<AccessLog>, AccessLogError> {
        let Some(path) = &config.access else {
            return Ok(None);
        };
        let target = if is_stderr(path) {
            Target::Stderr(BufWriter::new(std::io::stderr()))
        } else {
            let file = open_append(path).map_err(|source| AccessLogError {
                path: path.clone(),
                source,
            })?;
            Target::File {
                path: path.clone(),
                out: BufWriter::new(file),
            }
        };
        let (queue, entries) = mpsc::sync_channel(config.access_buffer);
        let reopen = Arc::new(AtomicBool::new(false));
        let writer = Writer {
            target,
            format: config.access_format,
            reopen: reopen.clone(),
            write_errors: counters.write_errors,
            reopen_failures: counters.reopen_failures,
            reopen_failing: false,
            write_failing: false,
            line: Vec::with_capacity(512),
        };
        std::thread::Builder::new()
            .name("wirefold-access-log".into())
            .spawn(move || writer.run(entries))
            .map_err(|source| AccessLogError {
                path: path.clone(),
                source,
            })?;
        Ok(Some(AccessLog {
            queue,
            reopen,
            dropped: counters.dropped,
        }))
    }

    /// Queues a record's line without waiting; a full queue drops it, counted.
    pub fn write(&self, record: RequestRecord) {
        // Disconnected only if the writer ended (it panicked): the line is lost too.
        if self.queue.try_send(Entry::Line(Box::new(record))).is_err() {
            self.dropped.inc();
        }
    }

    /// Has the writer reopen the file by its name before its next line (stderr stays).
    pub fn reopen(&self) {
        self.reopen.store(true, Ordering::Release);
        // A full queue means the writer is busy: it sees the flag before its next line.
        let _ = self.queue.try_send(Entry::Reopen);
    }

    /// Waits, at most `limit`, until every line queued so far is written out: at
    /// shutdown, before the process exits. False if the writer did not make it.
    pub async fn flush(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        let (ack, done) = tokio::sync::oneshot::channel();
        let mut entry = Entry::Flush(ack);
        loop {
            match self.queue.try_send(entry) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) if tokio::time::Instant::now() < deadline => {
                    entry = back;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(_) => return false,
            }
        }
        matches!(tokio::time::timeout_at(deadline, done).await, Ok(Ok(())))
    }
}

/// Reopens `log` on every `SIGUSR1` until `stop` changes (logrotate's convention:
/// move the file away, then signal). The signal is handled from the moment this
/// returns, for a log on stderr too: its default action would end the process.
/// `None` if it cannot be handled.
pub fn reopen_on_signal(
    log: AccessLog,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut signals = match signal(SignalKind::user_defined1()) {
        Ok(signals) => signals,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGUSR1: the access log will not be reopened");
            return None;
        }
    };
    Some(tokio::spawn(async move {
        loop {
            tokio::select! {
                received = signals.recv() => match received {
                    Some(()) => log.reopen(),
                    None => return,
                },
                _ = stop.changed() => return,
            }
        }
    }))
}

fn is_stderr(path: &Path) -> bool {
    path.as_os_str() == "-" || path.as_os_str() == "stderr"
}

fn open_append(path: &Path) -> std::io::Result<File> {
    File::options().create(true).append(true).open(path)
}

enum Target {
    File { path: PathBuf, out: BufWriter<File> },
    Stderr(BufWriter<std::io::Stderr>),
}

impl Target {
    fn out(&mut self) -> &mut dyn Write {
        match self {
            Target::File { out, .. } => out,
            Target::Stderr(out) => out,
        }
    }
}

/// How long the writer sleeps between batches of lines.
const BATCH_INTERVAL: Duration = Duration::from_millis(50);

/// The writer thread's state: it owns the file.
struct Writer {
    target: Target,
    format: AccessFormat,
    reopen: Arc<AtomicBool>,
    write_errors: Counter,
    reopen_failures: Counter,
    /// A reopen failed and was warned about; cleared by one that works.
    reopen_failing: bool,
    /// A write failed and was warned about; cleared by one that works.
    write_failing: bool,
    /// The line being formatted, reused.
    line: Vec<u8>,
}

impl Writer {
    /// Writes lines until every [`AccessLog`] is gone, in batches: it sleeps
    /// [`BATCH_INTERVAL`] between them instead of waiting on the queue, so a request's
    /// `try_send` never has a sleeping writer to wake (a wake-up per line cost more CPU
    /// than the line: 17 µs per request on the static br path, measured), and each batch
    /// reaches the file in one write when it ends. A line is in the file at most one
    /// interval after its response ended.
    fn run(mut self, entries: Receiver<Entry>) {
        loop {
            if self.reopen.swap(false, Ordering::AcqRel) {
                self.reopen_file();
            }
            let mut wrote = false;
            loop {
                let entry = match entries.try_recv() {
                    Ok(entry) => entry,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        self.flush();
                        return;
                    }
                };
                match entry {
                    Entry::Line(record) => {
                        self.write(&record);
                        wrote = true;
                    }
                    Entry::Reopen => {
                        if self.reopen.swap(false, Ordering::AcqRel) {
                            self.reopen_file();
                        }
                    }
                    Entry::Flush(ack) => {
                        self.flush();
                        let _ = ack.send(());
                    }
                }
            }
            if wrote {
                self.flush();
            }
            std::thread::sleep(BATCH_INTERVAL);
        }
    }

    fn write(&mut self, record: &RequestRecord) {
        self.line.clear();
        match self.format {
            AccessFormat::Combined => combined_line(record, &mut self.line),
            AccessFormat::Json => json_line(record, &mut self.line),
        }
        self.line.push(b'\n');
        let written = self.target.out().write_all(&self.line);
        self.outcome(written, "cannot write the access log; lines are being lost");
    }

    fn flush(&mut self) {
        let flushed = self.target.out().flush();
        self.outcome(flushed, "cannot write the access log; lines are being lost");
    }

    /// Counts a failed write and warns once until writes work again.
    fn outcome(&mut self, result: std::io::Result<()>, warning: &str) {
        match result {
            Ok(()) => self.write_failing = false,
            Err(e) => {
                self.write_errors.inc();
                if !self.write_failing {
                    self.write_failing = true;
                    tracing::warn!(error = %e, "{warning}");
                }
            }
        }
    }

    /// Opens the file by its name again, after writing out what is buffered for the
    /// old one; on failure keeps writing to the old one.
    fn reopen_file(&mut self) {
        let Target::File { path, out } = &mut self.target else {
            return;
        };
        let flushed = out.flush();
        let reopened = open_append(path);
        let path = path.clone();
        self.outcome(flushed, "cannot write the access log; lines are being lost");
        match reopened {
            Ok(file) => {
                self.target = Target::File {
                    path: path.clone(),
                    out: BufWriter::new(file),
                };
                self.reopen_failing = false;
                tracing::info!(path = %path.display(), "access log reopened");
            }
            Err(e) => {
                self.reopen_failures.inc();
                if !self.reopen_failing {
                    self.reopen_failing = true;
                    tracing::warn!(path = %path.display(), error = %e, "`log.access`: cannot reopen the access log; still writing to the file opened before");
                }
            }
        }
    }
}

/// The combined log format, then wirefold's fields:
///
/// ```text
/// 127.0.0.1 - - [19/May/2025:10:00:00 +0000] "GET /a.css HTTP/1.1" 200 912 "-" "curl/8.5.0" original=4133 mechanism=br cache=hit origin_time=- total_time=0.000412
/// ```
///
/// Quoted values escape `"`, `\`, control and non-ASCII bytes as `\xHH`, as nginx
/// does, so a hostile field cannot forge a line or a field.
pub fn combined_line(record: &RequestRecord, out: &mut Vec<u8>) {
    // Writing to a Vec cannot fail.
    let _ = write!(
        out,
        "{} - - [{}] \"",
        record.client.ip(),
        CombinedTime(record.received)
    );
    quoted(record.method.as_str().as_bytes(), out);
    out.push(b' ');
    quoted(record.target.to_string().as_bytes(), out);
    let _ = write!(
        out,
        " {:?}\" {} {} \"",
        record.protocol,
        record.status.as_u16(),
        record.bytes_sent
    );
    quoted(field_or_dash(&record.referer), out);
    out.extend_from_slice(b"\" \"");
    quoted(field_or_dash(&record.user_agent), out);
    let _ = write!(
        out,
        "\" original={} mechanism={} cache={} origin_time={} total_time={}",
        record.original_bytes,
        record.mechanism.as_deref().unwrap_or("-"),
        record.cache.map_or("-", |c| c.label()),
        Seconds(record.origin_wait),
        Seconds(Some(record.total)),
    );
}

fn field_or_dash(value: &Option<http::HeaderValue>) -> &[u8] {
    value.as_ref().map_or(b"-", |v| v.as_bytes())
}

fn quoted(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in bytes {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            let _ = write!(out, "\\x{b:02X}");
        } else {
            out.push(b);
        }
    }
}

/// One JSON object: the same fields by name, times in seconds, absent ones `null`.
pub fn json_line(record: &RequestRecord, out: &mut Vec<u8>) {
    let text = |value: &Option<http::HeaderValue>| {
        value
            .as_ref()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    let line = JsonLine {
        time: Rfc3339(record.received).to_string(),
        client: record.client.ip().to_string(),
        client_port: record.client.port(),
        method: record.method.as_str(),
        target: record.target.to_string(),
        protocol: format!("{:?}", record.protocol),
        status: record.status.as_u16(),
        bytes_sent: record.bytes_sent,
        original_bytes: record.original_bytes,
        mechanism: record.mechanism.as_deref(),
        cache: record.cache.map(|c| c.label()),
        origin_seconds: record.origin_wait.map(|d| d.as_secs_f64()),
        total_seconds: record.total.as_secs_f64(),
        content_type: text(&record.content_type),
        referer: text(&record.referer),
        user_agent: text(&record.user_agent),
        dictionary: record.dictionary_used.map(|h| h.to_hex()),
    };
    // Serializing plain fields into a Vec cannot fail.
    let _ = serde_json::to_writer(out, &line);
}

#[derive(Serialize)]
struct JsonLine<'a> {
    time: String,
    client: String,
    client_port: u16,
    method: &'a str,
    target: String,
    protocol: String,
    status: u16,
    bytes_sent: u64,
    original_bytes: u64,
    mechanism: Option<&'a str>,
    cache: Option<&'static str>,
    origin_seconds: Option<f64>,
    total_seconds: f64,
    content_type: Option<String>,
    referer: Option<String>,
    user_agent: Option<String>,
    /// The SHA-256 (hex) of the dictionary a dcb/dcz body was compressed against.
    dictionary: Option<String>,
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// `19/May/2025:10:00:00 +0000` (UTC).
struct CombinedTime(SystemTime);

impl std::fmt::Display for CombinedTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = time::OffsetDateTime::from(self.0);
        write!(
            f,
            "{:02}/{}/{}:{:02}:{:02}:{:02} +0000",
            t.day(),
            MONTHS[usize::from(u8::from(t.month())) - 1],
            t.year(),
            t.hour(),
            t.minute(),
            t.second()
        )
    }
}

/// `2025-05-19T10:00:00.123Z`.
struct Rfc3339(SystemTime);

impl std::fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = time::OffsetDateTime::from(self.0);
        write!(
            f,
            "{}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.millisecond()
        )
    }
}

/// Seconds with microseconds (`0.000412`), or `-`.
struct Seconds(Option<Duration>);

impl std::fmt::Display for Seconds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(d) => write!(f, "{}.{:06}", d.as_secs(), d.subsec_micros()),
            None => f.write_str("-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Provenance;
    use http::{HeaderValue, Method, StatusCode, Uri, Version};

    fn record() -> RequestRecord {
        RequestRecord {
            // 2025-05-19T10:00:00.123Z
            received: SystemTime::UNIX_EPOCH + Duration::from_millis(1_747_648_800_123),
            client: "192.0.2.7:51000".parse().unwrap(),
            method: Method::GET,
            target: Uri::from_static("/a.css?v=1"),
            protocol: Version::HTTP_11,
            referer: None,
            user_agent: Some(HeaderValue::from_static("curl/8.5.0")),
            status: StatusCode::OK,
            bytes_sent: 912,
            original_bytes: 4133,
            mechanism: Some("br".into()),
            cache: Some(Provenance::Hit {
                age: Duration::from_secs(3),
            }),
            origin_wait: None,
            total: Duration::from_micros(412),
            content_type: Some(HeaderValue::from_static("text/css")),
            resource: Some("example.org/a.css?v=1".into()),
            dictionary_announced: false,
            dictionary_used: None,
            link: None,
        }
    }

    #[test]
    fn a_combined_line_has_the_combined_fields_then_wirefolds() {
        let mut line = Vec::new();
        combined_line(&record(), &mut line);
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "192.0.2.7 - - [19/May/2025:10:00:00 +0000] \"GET /a.css?v=1 HTTP/1.1\" 200 912 \"-\" \"curl/8.5.0\" original=4133 mechanism=br cache=hit origin_time=- total_time=0.000412"
        );
    }

    #[test]
    fn hostile_fields_cannot_forge_fields_or_lines() {
        let mut r = record();
        r.user_agent = Some(HeaderValue::from_bytes(b"a\" b\\ \xff\tz").unwrap());
        let mut line = Vec::new();
        combined_line(&r, &mut line);
        let line = String::from_utf8(line).unwrap();
        assert!(line.contains("\"a\\x22 b\\x5C \\xFF\\x09z\""), "{line}");
        let mut json = Vec::new();
        json_line(&r, &mut json);
        let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(value["user_agent"], "a\" b\\ \u{fffd}\tz");
        assert!(!json.contains(&b'\n'));
    }

    #[test]
    fn a_json_line_names_every_field() {
        let mut r = record();
        r.origin_wait = Some(Duration::from_millis(25));
        r.protocol = Version::HTTP_2;
        let mut json = Vec::new();
        json_line(&r, &mut json);
        let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "time": "2025-05-19T10:00:00.123Z",
                "client": "192.0.2.7",
                "client_port": 51000,
                "method": "GET",
                "target": "/a.css?v=1",
                "protocol": "HTTP/2.0",
                "status": 200,
                "bytes_sent": 912,
                "original_bytes": 4133,
                "mechanism": "br",
                "cache": "hit",
                "origin_seconds": 0.025,
                "total_seconds": 0.000412,
                "content_type": "text/css",
                "referer": null,
                "user_agent": "curl/8.5.0",
                "dictionary": null,
            })
        );
    }

    #[test]
    fn the_buffer_is_bounded_and_the_path_not_empty() {
        let mut config = LogConfig {
            access_buffer: 0,
            ..LogConfig::default()
        };
        let err = config.check().unwrap_err().to_string();
        assert!(err.contains("log.access_buffer"), "{err}");
        config.access_buffer = 1;
        config.access = Some(PathBuf::new());
        let err = config.check().unwrap_err().to_string();
        assert!(err.contains("log.access"), "{err}");
    }

    #[test]
    fn an_unopenable_path_names_the_key_and_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir/access.log");
        let config = LogConfig {
            access: Some(path.clone()),
            ..LogConfig::default()
        };
        let Err(err) = AccessLog::start(&config, AccessLogCounters::default()) else {
            panic!("a path in a missing directory opens");
        };
        let message = err.to_string();
        assert!(
            message.starts_with("`log.access`: cannot open ")
                && message.contains(&path.display().to_string()),
            "{message}"
        );
    }
}
