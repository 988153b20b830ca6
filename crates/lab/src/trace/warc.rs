//! WARC 1.0 and 1.1 (ISO 28500), plain or gzip-compressed record by record (one gzip
//! member per record, as crawlers write them; a file gzipped whole works too).
//!
//! Records are read one at a time. `response` records become exchanges, paired with
//! their `request` record (WARC-Concurrent-To either way, else the same
//! WARC-Target-URI) for the method; identical-payload `revisit` records become
//! exchanges whose body is the earlier capture's. A record that cannot be read is
//! reported with its offset (for gzip: its member's offset) and reading resumes at the
//! next record (plain: the next `WARC/1.` line; gzip: the next gzip member).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use flate2::bufread::GzDecoder;

use super::http::{self, header};
use super::{media_type, Exchange, Item, Location, Skipped, TraceLimits};
use crate::LabError;

pub const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// Gzip magic plus the deflate method byte: where a resync may find the next member.
const GZIP_MEMBER_START: [u8; 3] = [0x1f, 0x8b, 0x08];
/// Where a resync in a plain file finds the next record: a version line after a newline.
const RECORD_START: &[u8] = b"\nWARC/1.";
/// The most a record's header section may take.
const MAX_HEADER_BYTES: u64 = 64 << 10;
/// How many request records wait for their response.
const RECENT_REQUESTS: usize = 256;
const IO_BUFFER: usize = 256 << 10;

pub fn read(path: &Path, limits: TraceLimits) -> Result<WarcReader, LabError> {
    let read_error = |source| LabError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut file = BufReader::with_capacity(IO_BUFFER, File::open(path).map_err(read_error)?);
    let gzip = file
        .fill_buf()
        .map_err(read_error)?
        .starts_with(&GZIP_MAGIC);
    Ok(WarcReader {
        path: path.to_path_buf(),
        limits,
        input: Input::Between(Counted::new(file, 0)),
        gzip,
        requests: VecDeque::new(),
        pending: None,
        ready: VecDeque::new(),
    })
}

/// A reader that knows how many bytes it has handed out.
struct Counted<R> {
    inner: R,
    position: u64,
}

impl<R> Counted<R> {
    fn new(inner: R, position: u64) -> Self {
        Counted { inner, position }
    }
}

impl<R: BufRead> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.position += n as u64;
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counted<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }
    fn consume(&mut self, amt: usize) {
        self.position += amt as u64;
        self.inner.consume(amt);
    }
}

type FileReader = BufReader<File>;

enum Input {
    /// At a record (plain) or member (gzip) boundary of the file.
    Between(Counted<FileReader>),
    /// Inside the gzip member starting at `offset`; the decoder counts decompressed bytes.
    Member {
        decoder: Box<Counted<BufReader<GzDecoder<FileReader>>>>,
        offset: u64,
    },
    Done,
}

/// A record as read: its header fields and its block.
struct Record {
    fields: Vec<(String, String)>,
    block: Vec<u8>,
}

impl Record {
    fn field(&self, name: &str) -> Option<&str> {
        header(&self.fields, name)
    }

    /// `<urn:uuid:…>` record ids named by a field (WARC-Concurrent-To may repeat).
    fn ids(&self, name: &str) -> Vec<String> {
        self.fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn target(&self) -> Option<String> {
        // WARC 1.0 examples wrap the URI in angle brackets; 1.1 does not.
        self.field("WARC-Target-URI")
            .map(|u| u.trim_start_matches('<').trim_end_matches('>').to_string())
    }
}

/// Why a record could not be read, and whether the reader must look for the next record.
struct RecordError {
    reason: String,
    resync: bool,
}

impl RecordError {
    fn corrupt(reason: impl Into<String>) -> Self {
        RecordError {
            reason: reason.into(),
            resync: true,
        }
    }
}

impl From<io::Error> for RecordError {
    fn from(e: io::Error) -> Self {
        RecordError::corrupt(e.to_string())
    }
}

/// Reads the next record, or `None` at the end of the stream.
fn read_record(r: &mut impl BufRead, limit: usize) -> Result<Option<Record>, RecordError> {
    if !skip_newlines(r)? {
        return Ok(None);
    }
    let mut head = Vec::new();
    (&mut *r)
        .take(MAX_HEADER_BYTES)
        .read_until(b'\n', &mut head)?;
    if !head.starts_with(b"WARC/1.") {
        return Err(RecordError::corrupt(format!(
            "expected a WARC/1.x version line, found {:?}",
            String::from_utf8_lossy(&head[..head.len().min(40)])
        )));
    }
    let mut fields = Vec::new();
    loop {
        let mut line = Vec::new();
        let budget = MAX_HEADER_BYTES.saturating_sub(head.len() as u64);
        (&mut *r).take(budget).read_until(b'\n', &mut line)?;
        head.extend_from_slice(&line);
        if line.is_empty() || !line.ends_with(b"\n") {
            return Err(RecordError::corrupt(
                "record header cut short or over 64 KiB",
            ));
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            break;
        }
        let Some((name, value)) = text.split_once(':') else {
            return Err(RecordError::corrupt(format!(
                "header line without a colon: {text:?}"
            )));
        };
        fields.push((name.trim().to_string(), value.trim().to_string()));
    }
    let length: u64 = header(&fields, "Content-Length")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| RecordError::corrupt("missing or bad Content-Length"))?;
    if length > limit as u64 {
        let skipped = io::copy(&mut (&mut *r).take(length), &mut io::sink())?;
        if skipped < length {
            return Err(RecordError::corrupt("block cut short"));
        }
        return Err(RecordError {
            reason: format!(
                "block of {length} bytes is over the limit of {limit} (--max-body-mib)"
            ),
            resync: false,
        });
    }
    let mut block = Vec::with_capacity(length as usize);
    (&mut *r).take(length).read_to_end(&mut block)?;
    if (block.len() as u64) < length {
        return Err(RecordError::corrupt(format!(
            "block cut short: {} of {length} bytes",
            block.len()
        )));
    }
    // The block is followed by CRLF CRLF; anything else means the Content-Length is
    // wrong. (A last record cut right after its block is accepted.)
    let mut end = Vec::with_capacity(4);
    (&mut *r).take(4).read_to_end(&mut end)?;
    if !end.is_empty() && end != b"\r\n\r\n" {
        return Err(RecordError::corrupt(
            "block not followed by CRLF CRLF (wrong Content-Length?)",
        ));
    }
    Ok(Some(Record { fields, block }))
}

/// Skips CR and LF bytes (writers differ in how many they put between records);
/// false at the end of the stream.
fn skip_newlines(r: &mut impl BufRead) -> io::Result<bool> {
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(false);
        }
        let n = buf
            .iter()
            .take_while(|&&b| b == b'\r' || b == b'\n')
            .count();
        let whole = n == buf.len();
        r.consume(n);
        if !whole {
            return Ok(true);
        }
    }
}

/// Moves `file` to the first occurrence of `pattern` at or after `from` (plus `skip`
/// bytes into it), or to the end. Returns the new position.
fn resync(file: &mut FileReader, from: u64, pattern: &[u8], skip: usize) -> io::Result<u64> {
    file.seek(SeekFrom::Start(from))?;
    let mut position = from;
    // The last bytes of the previous buffer, so a pattern split across reads is found.
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let buf = file.fill_buf()?;
        if buf.is_empty() {
            return Ok(position);
        }
        let mut window = std::mem::take(&mut carry);
        let window_start = position - window.len() as u64;
        window.extend_from_slice(buf);
        if let Some(i) = http::find(&window, pattern) {
            let target = window_start + (i + skip) as u64;
            file.seek(SeekFrom::Start(target))?;
            return Ok(target);
        }
        let n = buf.len();
        file.consume(n);
        position += n as u64;
        let keep = window.len().min(pattern.len() - 1);
        carry = window[window.len() - keep..].to_vec();
    }
}

/// A request record waiting for its response.
struct Request {
    id: Option<String>,
    concurrent: Vec<String>,
    uri: Option<String>,
    method: Option<String>,
}

/// A response waiting one record for a request written after it.
struct Pending {
    exchange: Exchange,
    id: Option<String>,
    concurrent: Vec<String>,
}

pub struct WarcReader {
    path: PathBuf,
    limits: TraceLimits,
    input: Input,
    gzip: bool,
    requests: VecDeque<Request>,
    pending: Option<Pending>,
    ready: VecDeque<Item>,
}

impl WarcReader {
    fn skipped(&self, offset: u64, reason: String) -> Skipped {
        Skipped {
            file: self.path.clone(),
            at: Location::Byte(offset),
            reason,
        }
    }

    /// The next record with its offset.
    fn next_record(&mut self) -> Option<Result<(u64, Record), Skipped>> {
        let limit = self.limits.max_body;
        loop {
            match std::mem::replace(&mut self.input, Input::Done) {
                Input::Done => return None,
                Input::Between(mut file) if !self.gzip => {
                    let start = file.position;
                    match read_record(&mut file, limit) {
                        Ok(None) => return None,
                        Ok(Some(record)) => {
                            self.input = Input::Between(file);
                            return Some(Ok((start, record)));
                        }
                        Err(e) => {
                            let mut reason = e.reason;
                            if e.resync {
                                match resync(&mut file.inner, start + 1, RECORD_START, 1) {
                                    Ok(at) => file.position = at,
                                    Err(io) => reason = format!("{reason}; then {io}"),
                                }
                            }
                            self.input = Input::Between(file);
                            return Some(Err(self.skipped(start, reason)));
                        }
                    }
                }
                Input::Between(mut file) => {
                    match file.fill_buf() {
                        Ok([]) => return None,
                        Ok(_) => {}
                        Err(e) => return Some(Err(self.skipped(file.position, e.to_string()))),
                    }
                    let offset = file.position;
                    let decoder = BufReader::new(GzDecoder::new(file.inner));
                    self.input = Input::Member {
                        decoder: Box::new(Counted::new(decoder, 0)),
                        offset,
                    };
                }
                Input::Member {
                    mut decoder,
                    offset,
                } => {
                    let within = decoder.position;
                    // Look past the record before yielding it, so that a member whose
                    // checksum fails at its end is reported instead of read.
                    let read = read_record(&mut *decoder, limit).and_then(|record| {
                        decoder
                            .fill_buf()
                            .map(|_| record)
                            .map_err(RecordError::from)
                    });
                    match read {
                        Ok(Some(record)) => {
                            self.input = Input::Member { decoder, offset };
                            return Some(Ok((offset, record)));
                        }
                        Ok(None) => {
                            // The decoder took from the file only what the member used.
                            let mut file = decoder.inner.into_inner().into_inner();
                            match file.stream_position() {
                                Ok(position) => {
                                    self.input = Input::Between(Counted::new(file, position))
                                }
                                Err(e) => return Some(Err(self.skipped(offset, e.to_string()))),
                            }
                        }
                        Err(e) => {
                            let mut file = decoder.inner.into_inner().into_inner();
                            let mut reason = e.reason;
                            if within > 0 {
                                reason = format!(
                                    "{reason} (at byte {within} of the decompressed member)"
                                );
                            }
                            // Skip what is left of the member even when the record itself
                            // was only too large: the decoder is gone.
                            let position = resync(&mut file, offset + 1, &GZIP_MEMBER_START, 0)
                                .unwrap_or_else(|io| {
                                    reason = format!("{reason}; then {io}");
                                    u64::MAX
                                });
                            if position != u64::MAX {
                                self.input = Input::Between(Counted::new(file, position));
                            }
                            return Some(Err(self.skipped(offset, reason)));
                        }
                    }
                }
            }
        }
    }

    fn handle(&mut self, offset: u64, record: Record) {
        let kind = record.field("WARC-Type").unwrap_or("").to_ascii_lowercase();
        match kind.as_str() {
            "request" => self.on_request(&record),
            "response" | "revisit" => {
                if let Some(p) = self.pending.take() {
                    self.ready.push_back(Ok(p.exchange));
                }
                match self.exchange(&kind, &record) {
                    Ok(Some(pending)) => self.pending = Some(pending),
                    Ok(None) => {}
                    Err(reason) => {
                        let skipped = self.skipped(offset, reason);
                        self.ready.push_back(Err(skipped));
                    }
                }
            }
            _ => {}
        }
    }

    fn on_request(&mut self, record: &Record) {
        let method = http::split_head(&record.block)
            .or(Some((&record.block[..], &[][..])))
            .and_then(|(head, _)| http::parse_head(head).ok())
            .and_then(|(line, _)| line.split_whitespace().next().map(str::to_string));
        let request = Request {
            id: record.field("WARC-Record-ID").map(str::to_string),
            concurrent: record.ids("WARC-Concurrent-To"),
            uri: record.target(),
            method,
        };
        let paired = self
            .pending
            .take_if(|p| pairs(&request, p.id.as_deref(), &p.concurrent));
        if let Some(mut p) = paired {
            p.exchange.method = request.method;
            self.ready.push_back(Ok(p.exchange));
            return;
        }
        if self.requests.len() == RECENT_REQUESTS {
            self.requests.pop_front();
        }
        self.requests.push_back(request);
    }

    /// A response or revisit record as an exchange (`None` for non-HTTP captures such
    /// as `dns:`), waiting for its request unless that was already read.
    fn exchange(&mut self, kind: &str, record: &Record) -> Result<Option<Pending>, String> {
        let Some(url) = record.target() else {
            return Err("no WARC-Target-URI".into());
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Ok(None);
        }
        let revisit = kind == "revisit";
        let identical = revisit
            && record
                .field("WARC-Profile")
                .is_some_and(|p| p.ends_with("identical-payload-digest"));
        let response = if revisit && record.block.is_empty() {
            // The block may be empty: an identical payload implies a 200, a
            // server-not-modified revisit a 304.
            http::Response {
                status: if identical { 200 } else { 304 },
                headers: Vec::new(),
                body: None,
            }
        } else {
            http::parse_response(&record.block, self.limits.max_body, revisit)?
        };
        let id = record.field("WARC-Record-ID").map(str::to_string);
        let concurrent = record.ids("WARC-Concurrent-To");
        let method = self
            .take_request(id.as_deref(), &concurrent, &url)
            .map(|r| r.method);
        let revisit_of = identical.then(|| {
            record
                .field("WARC-Refers-To-Target-URI")
                .map_or_else(|| url.clone(), str::to_string)
        });
        let exchange = Exchange {
            content_type: response.header("content-type").and_then(media_type),
            method: method.clone().flatten(),
            url,
            status: response.status,
            client: None,
            time: record.field("WARC-Date").map(str::to_string),
            body: response.body,
            revisit_of,
        };
        let paired = method.is_some();
        if paired {
            self.ready.push_back(Ok(exchange));
            return Ok(None);
        }
        Ok(Some(Pending {
            exchange,
            id,
            concurrent,
        }))
    }

    /// The request paired with a response: by record ids, else the latest to the same URI.
    fn take_request(
        &mut self,
        id: Option<&str>,
        concurrent: &[String],
        uri: &str,
    ) -> Option<Request> {
        let i = self
            .requests
            .iter()
            .rposition(|r| pairs(r, id, concurrent))
            .or_else(|| {
                self.requests
                    .iter()
                    .rposition(|r| r.uri.as_deref() == Some(uri))
            })?;
        self.requests.remove(i)
    }
}

/// A request and a response are one exchange when either names the other concurrent.
fn pairs(request: &Request, response_id: Option<&str>, response_concurrent: &[String]) -> bool {
    let named_by_request = response_id.is_some_and(|id| request.concurrent.iter().any(|c| c == id));
    let named_by_response = request
        .id
        .as_deref()
        .is_some_and(|id| response_concurrent.iter().any(|c| c == id));
    named_by_request || named_by_response
}

impl Iterator for WarcReader {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        loop {
            if let Some(item) = self.ready.pop_front() {
                return Some(item);
            }
            match self.next_record() {
                None => return self.pending.take().map(|p| Ok(p.exchange)),
                Some(Err(skipped)) => return Some(Err(skipped)),
                Some(Ok((offset, record))) => self.handle(offset, record),
            }
        }
    }
}
