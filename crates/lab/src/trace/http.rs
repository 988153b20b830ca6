//! HTTP/1.x messages as WARC records store them: status line, header fields, and the
//! body as it went over the wire (maybe chunked, maybe content-coded).

use wirefold_http::ContentCoding;

/// A response parsed from a record block.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The payload with transfer and content codings removed; `None` when a content
    /// coding is one the codec crate does not know.
    pub body: Option<Vec<u8>>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Splits `block` into the header section and the rest (lenient about bare LF,
/// which some crawlers write).
pub fn split_head(block: &[u8]) -> Option<(&[u8], &[u8])> {
    let crlf = find(block, b"\r\n\r\n").map(|i| (i, i + 4));
    let lf = find(block, b"\n\n").map(|i| (i, i + 2));
    let (end, body) = match (crlf, lf) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b)?,
    };
    Some((&block[..end], &block[body..]))
}

/// Status line and header fields of a head section.
pub fn parse_head(head: &[u8]) -> Result<(String, Vec<(String, String)>), String> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.lines();
    let start = lines.next().unwrap_or("").trim().to_string();
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in lines {
        if line.starts_with([' ', '\t']) {
            // obs-fold: a continuation of the previous field.
            if let Some((_, v)) = headers.last_mut() {
                v.push(' ');
                v.push_str(line.trim());
            }
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("header line without a colon: {line:?}"));
        };
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    Ok((start, headers))
}

/// Parses a response block. With `headers_only` (revisit records), no body is decoded.
pub fn parse_response(block: &[u8], limit: usize, headers_only: bool) -> Result<Response, String> {
    let (head, raw_body) = split_head(block).unwrap_or((block, &[]));
    let (status_line, headers) = parse_head(head)?;
    let status = status_of(&status_line)?;
    if headers_only {
        return Ok(Response {
            status,
            headers,
            body: None,
        });
    }
    let chunked = header(&headers, "transfer-encoding")
        .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
    // Some archivers store the body de-chunked but keep the header: when the body does
    // not parse as chunks, it is taken as it is.
    let body = match chunked.then(|| dechunk(raw_body, limit)).flatten() {
        Some(body) => body,
        None => raw_body.to_vec(),
    };
    let body = match header(&headers, "content-encoding") {
        Some(codings) => decode_content(body, codings, limit)?,
        None => Some(body),
    };
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// `HTTP/1.1 200 OK` → 200.
fn status_of(line: &str) -> Result<u16, String> {
    let mut parts = line.split_whitespace();
    let version = parts.next().unwrap_or("");
    let code = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/") {
        return Err(format!("not an HTTP status line: {line:?}"));
    }
    code.parse::<u16>()
        .ok()
        .filter(|c| (100..1000).contains(c))
        .ok_or_else(|| format!("bad status code in {line:?}"))
}

/// Removes chunked transfer coding (RFC 9112 §7.1); `None` if `data` is not chunked
/// or would decode past `limit`.
pub fn dechunk(data: &[u8], limit: usize) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = data;
    loop {
        let line_end = find(rest, b"\n")?;
        let line = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size_text = line.split(';').next()?.trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        rest = &rest[line_end + 1..];
        if size == 0 {
            // Trailer fields follow; they carry nothing the lab uses.
            return Some(out);
        }
        if size > rest.len() || out.len() + size > limit {
            return None;
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size..];
        rest = rest
            .strip_prefix(b"\r\n")
            .or_else(|| rest.strip_prefix(b"\n"))?;
    }
}

/// Undoes `Content-Encoding: c1, c2` (applied in that order, so undone last first).
/// `Ok(None)` for a coding the codec crate does not know.
fn decode_content(
    mut body: Vec<u8>,
    codings: &str,
    limit: usize,
) -> Result<Option<Vec<u8>>, String> {
    for token in codings.rsplit(',').map(str::trim) {
        if token.is_empty() || token.eq_ignore_ascii_case("identity") {
            continue;
        }
        let Some(coding) = ContentCoding::from_token(token) else {
            return Ok(None);
        };
        // Some archivers (Common Crawl's, for one) store the payload decoded but keep
        // the header: a body that does not even start like its coding is taken as is.
        if starts_unlike(coding, &body) {
            continue;
        }
        body = codec::decompress(coding, &body, limit)
            .map_err(|e| format!("content-encoding {token}: {e}"))?;
    }
    Ok(Some(body))
}

/// True when `body` lacks the signature `coding` starts with (brotli has none).
fn starts_unlike(coding: ContentCoding, body: &[u8]) -> bool {
    match coding {
        ContentCoding::Gzip => !body.starts_with(&[0x1f, 0x8b]),
        ContentCoding::Zstd => !body.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]),
        // A zlib header: method 8, and CMF·256 + FLG a multiple of 31 (RFC 1950).
        ContentCoding::Deflate => match body {
            [cmf, flg, ..] => cmf & 0x0f != 8 || (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 != 0,
            _ => true,
        },
        ContentCoding::Br => false,
    }
}

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_and_gzip_bodies_are_decoded() {
        let payload = b"<html>hello, chunked world</html>";
        let gz = codec::compress(ContentCoding::Gzip, 6, payload);
        let mut block = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n\r\n".to_vec();
        let (a, b) = gz.split_at(10);
        for chunk in [a, b] {
            block.extend_from_slice(format!("{:x};ext=1\r\n", chunk.len()).as_bytes());
            block.extend_from_slice(chunk);
            block.extend_from_slice(b"\r\n");
        }
        block.extend_from_slice(b"0\r\nX-Trailer: 1\r\n\r\n");
        let r = parse_response(&block, 1 << 20, false).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body.as_deref(), Some(&payload[..]));
    }

    #[test]
    fn a_dechunked_body_with_a_chunked_header_is_kept() {
        let block = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nplain body";
        let r = parse_response(block, 1 << 20, false).unwrap();
        assert_eq!(r.body.as_deref(), Some(&b"plain body"[..]));
    }

    #[test]
    fn stacked_codings_are_undone_in_reverse() {
        let payload = b"body body body body";
        let coded = codec::compress(
            ContentCoding::Br,
            5,
            &codec::compress(ContentCoding::Deflate, 6, payload),
        );
        let mut block = b"HTTP/1.0 200 OK\nContent-Encoding: deflate, br\n\n".to_vec();
        block.extend_from_slice(&coded);
        let r = parse_response(&block, 1 << 20, false).unwrap();
        assert_eq!(r.body.as_deref(), Some(&payload[..]));
    }

    #[test]
    fn a_body_stored_decoded_under_a_coding_header_is_kept() {
        let block = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n<!DOCTYPE html>";
        let r = parse_response(block, 1 << 20, false).unwrap();
        assert_eq!(r.body.as_deref(), Some(&b"<!DOCTYPE html>"[..]));
        let corrupt = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n\x1f\x8b\x08garbage";
        assert!(parse_response(corrupt, 1 << 20, false).is_err());
    }

    #[test]
    fn bombs_and_unknown_codings() {
        let bomb = codec::compress(ContentCoding::Zstd, 3, &vec![0u8; 1 << 20]);
        let mut block = b"HTTP/1.1 200 OK\r\nContent-Encoding: zstd\r\n\r\n".to_vec();
        block.extend_from_slice(&bomb);
        assert!(parse_response(&block, 1000, false).is_err());
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: compress\r\n\r\nxx",
            1000,
            false,
        )
        .unwrap();
        assert_eq!(r.body, None);
        assert!(parse_response(b"GET / HTTP/1.1\r\n\r\n", 1000, false).is_err());
    }
}
