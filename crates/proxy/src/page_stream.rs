//! The manifest of a page too large to buffer, read while it streams to the client.
//!
//! A page over `limits.max_buffered_body` (or one the decoder could not hold) is never
//! whole in memory, so `manifests` cannot parse it. Instead its body is tapped: each
//! chunk, as it goes to the client, is also handed (a reference to the same bytes, no
//! copy) to a task that decodes it, hashes it and feeds it to the page scanner
//! (`wirefold_page::InlineScanner`, the same element handlers a buffered page's manifest
//! is read with), on the blocking pool. The client's bytes never wait for the scan.
//!
//! The work is bounded by `hints.stream_scan_bytes`: past that many bytes (decoded, or
//! as they came when coded) the tap hands on nothing more and the scan ends with what
//! it found in them, so a page that never ends costs at most that much parsing, and
//! the bytes handed on but not yet parsed are at most that much memory. It also ends
//! once it has found 16 times `hints.max_manifest_entries` references, which a page of
//! thousands of tiny tags would otherwise turn into many times its bytes. The version a
//! manifest read this way belongs to is the SHA-256 of the decoded bytes it was read
//! from: the whole content's hash (the same a buffered copy would have) when the page
//! ended within the bound, else that of the bound's prefix, which no whole page has.
//! A page cut short before either (the client went away, the origin failed) leaves no
//! manifest.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use sha2::{Digest, Sha256};
use store::Hash;
use tokio::sync::mpsc;
use wirefold_http::ContentCoding;
use wirefold_page::{InlineReference, InlineScanner};

use crate::body::{tapped, Body, Tap};

/// What a streamed page's scan read.
pub struct ScannedPage {
    /// SHA-256 of the decoded bytes read: the whole page, or its first
    /// `hints.stream_scan_bytes`.
    pub hash: Hash,
    /// Its inline references, in document order.
    pub references: Vec<InlineReference>,
    /// Whether the page ended within the bound (else only its prefix was read).
    pub whole: bool,
}

/// What the tap hands the scan.
enum Handed {
    Data(Bytes),
    /// The body ended normally.
    End,
    /// The tap handed on `stream_scan_bytes` and stops: the scan ends there.
    Bound,
}

/// Taps `body` (a page carrying `coding`, at `page_url`) for its manifest: returns
/// the body to send in its place, unchanged, and the scan, which resolves once the
/// page ended or `bound` bytes were read, with what it found; `None` when the page
/// was cut short first or could not be decoded. The scan must be spawned (it runs
/// as the body is sent); dropping it costs the tap nothing.
pub fn scan(
    body: Body,
    coding: Option<ContentCoding>,
    page_url: String,
    bound: ScanBound,
) -> (
    Body,
    impl std::future::Future<Output = Option<ScannedPage>> + Send + 'static,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handed = AtomicU64::new(0);
    let bound_u64 = bound.bytes as u64;
    // Per chunk on the client's path: a reference count and a queue push, nothing
    // more; the queue holds at most `bound` bytes, since nothing is handed past it.
    let body = tapped(body, move |tap| match tap {
        Tap::Data(data) => {
            let before = handed.fetch_add(data.len() as u64, Ordering::Relaxed);
            if before < bound_u64 {
                let _ = tx.send(Handed::Data(data.clone()));
                if before + data.len() as u64 >= bound_u64 {
                    let _ = tx.send(Handed::Bound);
                }
            }
        }
        Tap::End => {
            if handed.load(Ordering::Relaxed) < bound_u64 {
                let _ = tx.send(Handed::End);
            }
        }
        Tap::Failed(_) => {}
    });
    (body, read(rx, coding, page_url, bound))
}

/// Where a streamed page's scan ends, whichever comes first.
#[derive(Clone, Copy, Debug)]
pub struct ScanBound {
    /// Bytes read (decoded, or as they came when coded).
    pub bytes: usize,
    /// References found.
    pub references: usize,
}

/// The scan's own state, moved to the blocking pool for each batch of chunks.
struct Reader {
    scanner: InlineScanner,
    decoder: Option<codec::Decoder>,
    hasher: Sha256,
    /// Decoded bytes read so far.
    read: usize,
    bound: usize,
    /// The decoder failed: the page is not what its coding says.
    broken: bool,
    /// References found at which the scan ends.
    max_references: usize,
}

impl Reader {
    /// Reads `chunk` (as it came), up to the bound.
    fn take(&mut self, chunk: &[u8]) {
        if self.broken || self.read >= self.bound {
            return;
        }
        let decoded;
        let content = match &mut self.decoder {
            Some(decoder) => {
                match decoder.write(chunk) {
                    Ok(()) => {}
                    // The decoder refuses to produce past the bound; what it made
                    // before refusing goes with the refusal: the scan ends short of it.
                    Err(codec::DecodeError::TooLarge { .. }) => {
                        self.read = self.bound;
                        return;
                    }
                    Err(_) => {
                        self.broken = true;
                        return;
                    }
                }
                decoded = decoder.take_output();
                decoded.as_slice()
            }
            None => chunk,
        };
        let content = &content[..content.len().min(self.bound - self.read)];
        self.hasher.update(content);
        self.scanner.feed(content);
        self.read += content.len();
        // Thousands of references in few bytes (`<img src=/1>` is 12) would hold far
        // more memory than the bytes read: past this many the scan ends as at the
        // bound, with more than a manifest keeps to rank from.
        if self.scanner.found() >= self.max_references {
            self.read = self.bound;
        }
    }

    /// Ends the scan: `whole` when the page ended within the bound (a coded one must
    /// then end where its coding does, else it is not read: `None`).
    fn finish(mut self, whole: bool) -> Option<ScannedPage> {
        if whole {
            if let Some(decoder) = self.decoder.take() {
                let rest = decoder.finish().ok()?;
                self.hasher.update(&rest);
                self.scanner.feed(&rest);
            }
        }
        Some(ScannedPage {
            hash: Hash(self.hasher.finalize().into()),
            references: self.scanner.finish(),
            whole,
        })
    }
}

async fn read(
    mut rx: mpsc::UnboundedReceiver<Handed>,
    coding: Option<ContentCoding>,
    page_url: String,
    bound: ScanBound,
) -> Option<ScannedPage> {
    let mut reader = Reader {
        scanner: InlineScanner::new(&page_url),
        decoder: coding.map(|c| codec::Decoder::new(c, bound.bytes)),
        hasher: Sha256::new(),
        read: 0,
        bound: bound.bytes,
        broken: false,
        max_references: bound.references,
    };
    loop {
        // One blocking task per batch of what has arrived, not per chunk.
        let mut batch = Vec::new();
        let mut ended = None;
        match rx.recv().await? {
            Handed::Data(data) => batch.push(data),
            Handed::End => ended = Some(true),
            Handed::Bound => ended = Some(false),
        }
        while ended.is_none() {
            match rx.try_recv() {
                Ok(Handed::Data(data)) => batch.push(data),
                Ok(Handed::End) => ended = Some(true),
                Ok(Handed::Bound) => ended = Some(false),
                Err(_) => break,
            }
        }
        reader = delta::blocking::run(move || {
            for chunk in &batch {
                reader.take(chunk);
            }
            reader
        })
        .await;
        let whole = match ended {
            _ if reader.broken => return None,
            Some(ended) => ended && reader.read < reader.bound,
            None if reader.read >= reader.bound => false,
            None => continue,
        };
        return delta::blocking::run(move || reader.finish(whole)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn page(references: usize) -> Vec<u8> {
        let mut html = b"<html><head><link rel=stylesheet href=/s.css></head><body>".to_vec();
        for i in 0..references {
            html.extend_from_slice(format!("<img src=/i{i}.png>").as_bytes());
        }
        html.extend_from_slice(b"</body></html>");
        html
    }

    async fn drain(body: Body) -> Vec<u8> {
        body.collect().await.unwrap().to_bytes().to_vec()
    }

    /// `bytes` as a body of `size`-byte chunks, sent as they are taken.
    fn chunked(bytes: &[u8], size: usize) -> Body {
        let (tx, body) = crate::body::channel(4);
        let chunks: Vec<Bytes> = bytes.chunks(size).map(Bytes::copy_from_slice).collect();
        tokio::spawn(async move {
            for chunk in chunks {
                if tx.send(Ok(chunk)).await.is_err() {
                    return;
                }
            }
        });
        body
    }

    fn bytes(bytes: usize) -> ScanBound {
        ScanBound {
            bytes,
            references: 1 << 20,
        }
    }

    /// Scans `html` sent in `chunk`-byte pieces (identity) to a client that takes it
    /// all, checking the client got every byte unchanged.
    async fn scan_sent(html: &[u8], chunk: usize, bound: ScanBound) -> Option<ScannedPage> {
        let (body, scanning) = scan(chunked(html, chunk), None, "http://a.test/".into(), bound);
        let scanning = tokio::spawn(scanning);
        assert_eq!(
            drain(body).await,
            html,
            "the client gets every byte, unchanged"
        );
        scanning.await.unwrap()
    }

    #[tokio::test]
    async fn a_whole_page_is_read_as_a_buffered_one_would_be() {
        let html = page(100);
        let scanned = scan_sent(&html, 7, bytes(1 << 20))
            .await
            .expect("a page that ended is read");
        assert!(scanned.whole);
        assert_eq!(scanned.hash, Hash::of(&html));
        assert_eq!(
            scanned.references,
            wirefold_page::inline_references(&html, "http://a.test/")
        );
    }

    #[tokio::test]
    async fn a_coded_page_is_read_decoded() {
        let html = page(10);
        let coded = codec::compress(ContentCoding::Gzip, 6, &html);
        let (body, scanning) = scan(
            chunked(&coded, 5),
            Some(ContentCoding::Gzip),
            "http://a.test/".into(),
            bytes(1 << 20),
        );
        let scanning = tokio::spawn(scanning);
        assert_eq!(drain(body).await, coded, "passed on as it came");
        let scanned = scanning.await.unwrap().unwrap();
        assert_eq!(scanned.hash, Hash::of(&html));
        assert_eq!(scanned.references.len(), 11);
    }

    #[tokio::test]
    async fn past_the_bound_only_the_prefix_is_read() {
        let html = page(10_000);
        let scanned = scan_sent(&html, 1000, bytes(4096)).await.unwrap();
        assert!(!scanned.whole);
        assert_eq!(scanned.hash, Hash::of(&html[..4096]));
        assert_eq!(
            scanned.references,
            wirefold_page::inline_references(&html[..4096], "http://a.test/")
        );
    }

    #[tokio::test]
    async fn thousands_of_references_end_the_scan_at_its_reference_bound() {
        let html = page(10_000);
        let bound = ScanBound {
            bytes: 1 << 20,
            references: 500,
        };
        let scanned = scan_sent(&html, 1000, bound).await.unwrap();
        assert!(!scanned.whole);
        // Ended within the chunk that found the 500th: a few more, never thousands.
        assert!((500..600).contains(&scanned.references.len()));
    }

    #[tokio::test]
    async fn a_page_cut_short_leaves_nothing() {
        let html = page(100);
        let (body, scanning) = scan(
            chunked(&html, 100),
            None,
            "http://a.test/".into(),
            bytes(1 << 20),
        );
        let scanning = tokio::spawn(scanning);
        // The client goes away after the first chunk.
        let mut body = body;
        body.frame().await.unwrap().unwrap();
        drop(body);
        assert!(scanning.await.unwrap().is_none());
    }
}
