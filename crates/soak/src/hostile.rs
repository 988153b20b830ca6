//! Hostile requests. Some are well-formed HTTP with hostile field values (sent like
//! any request and verified like any answer: a 4xx is a clean refusal, a 2xx must
//! carry the right body); some are malformed and go over raw TCP (the server must
//! refuse them with a 4xx or close, never a 5xx, never hang); and the slowloris
//! trickles a head that never ends (the server must close the connection).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wirefold_http::dictionary::{available_dictionary_value, AVAILABLE_DICTIONARY};

use crate::catalogue::{self, InstanceId, CATALOGUE};
use crate::truth::Truths;
use crate::verify::{verify, Answer, Asked, Verdict};

/// What a hostile field case writes into.
pub struct Hostile<'a> {
    pub headers: &'a mut HeaderMap,
    /// A body on the GET.
    pub body: &'a mut Bytes,
    pub asked: &'a mut Asked,
    /// The instances of this resource the client holds, newest first, as tagged.
    pub held: &'a [(InstanceId, String)],
    /// Randomness for this request.
    pub random: u64,
}

/// Well-formed HTTP with a hostile field value.
pub struct FieldCase {
    pub name: &'static str,
    pub build: fn(&mut Hostile<'_>),
}

fn set(h: &mut Hostile<'_>, name: HeaderName, value: &str) {
    // Every value below is visible ASCII or obs-text, which a field value may hold.
    if let Ok(value) = HeaderValue::from_bytes(value.as_bytes()) {
        h.headers.append(name, value);
    }
}

fn list_held(h: &mut Hostile<'_>) -> String {
    let tags: Vec<&str> = h.held.iter().map(|(_, tag)| tag.as_str()).collect();
    h.asked.listed.extend(h.held.iter().map(|(id, _)| *id));
    tags.join(", ")
}

pub const FIELD_CASES: &[FieldCase] = &[
    FieldCase {
        name: "available_dictionary_not_base64",
        build: |h| {
            set(h, header::ACCEPT_ENCODING, "br, dcb, dcz");
            set(h, AVAILABLE_DICTIONARY, ":!!not base64!!:");
        },
    },
    FieldCase {
        name: "available_dictionary_unknown",
        build: |h| {
            set(h, header::ACCEPT_ENCODING, "gzip, br, zstd, dcb, dcz");
            let mut hash = [0u8; 32];
            for (i, b) in hash.iter_mut().enumerate() {
                *b = (h.random >> ((i % 8) * 8)) as u8 ^ i as u8;
            }
            h.headers
                .append(AVAILABLE_DICTIONARY, available_dictionary_value(&hash));
        },
    },
    FieldCase {
        name: "available_dictionary_repeated",
        build: |h| {
            set(h, header::ACCEPT_ENCODING, "dcz, dcb");
            h.headers
                .append(AVAILABLE_DICTIONARY, available_dictionary_value(&[1; 32]));
            h.headers
                .append(AVAILABLE_DICTIONARY, available_dictionary_value(&[2; 32]));
        },
    },
    FieldCase {
        name: "available_dictionary_oversized",
        build: |h| {
            set(h, header::ACCEPT_ENCODING, "dcz");
            set(
                h,
                AVAILABLE_DICTIONARY,
                &format!(":{}:", "QUFB".repeat(5000)),
            );
        },
    },
    FieldCase {
        name: "a_im_garbage",
        build: |h| {
            set(
                h,
                HeaderName::from_static("a-im"),
                "vcdiff;q=abc, ,,, *;q=2, vcdiff",
            );
            let tags = list_held(h);
            if !tags.is_empty() {
                set(h, header::IF_NONE_MATCH, &tags);
            }
        },
    },
    FieldCase {
        // Another resource's current instance as the base: never a base for this one.
        name: "a_im_foreign_base",
        build: |h| {
            let other = (h.asked.resource + 1) % CATALOGUE.len() as u16;
            let version = catalogue::get(other)
                .map_or(0, |r| r.version_at(other, std::time::SystemTime::now()));
            let foreign = InstanceId {
                resource: other,
                version,
            };
            h.asked.listed.push(foreign);
            set(h, HeaderName::from_static("a-im"), "vcdiff");
            set(
                h,
                header::IF_NONE_MATCH,
                &format!("\"{}\"", foreign.opaque()),
            );
        },
    },
    FieldCase {
        name: "if_none_match_unterminated",
        build: |h| {
            set(h, HeaderName::from_static("a-im"), "vcdiff");
            let tag = format!("W/\"soak.{}.{}", h.asked.resource, h.random % 1000);
            set(h, header::IF_NONE_MATCH, &tag);
        },
    },
    FieldCase {
        name: "if_none_match_star",
        build: |h| {
            h.asked.listed_any = true;
            if h.random % 2 == 0 {
                set(h, HeaderName::from_static("a-im"), "vcdiff");
            }
            set(h, header::IF_NONE_MATCH, "*");
        },
    },
    FieldCase {
        name: "if_none_match_1500_tags",
        build: |h| {
            let resource = h.asked.resource;
            let mut tags: Vec<String> = (0..1500u64)
                .map(|v| {
                    h.asked.listed.push(InstanceId {
                        resource,
                        version: v,
                    });
                    format!("W/\"soak.{resource}.{v}-br\"")
                })
                .collect();
            tags.push(list_held(h));
            set(h, HeaderName::from_static("a-im"), "vcdiff");
            set(h, header::IF_NONE_MATCH, &tags.join(","));
        },
    },
    FieldCase {
        name: "range_garbage",
        build: |h| {
            const GARBAGE: &[&str] = &[
                "bytes=abc",
                "bytes=5-1",
                "bytes=-0",
                "bytes=99999999999999999999999-",
                "lines=0-5",
                "bytes=",
                "bytes=0-0,-1,5-,",
            ];
            set(h, header::RANGE, GARBAGE[h.random as usize % GARBAGE.len()]);
        },
    },
    FieldCase {
        name: "range_300_parts",
        build: |h| {
            let parts: Vec<String> = (0..300).map(|i| format!("{i}-{i}")).collect();
            set(h, header::RANGE, &format!("bytes={}", parts.join(",")));
        },
    },
    FieldCase {
        name: "range_beyond_the_end",
        build: |h| set(h, header::RANGE, "bytes=100000000-"),
    },
    FieldCase {
        name: "client_hints_garbage",
        build: |h| {
            set(h, HeaderName::from_static("save-data"), "on;;=?");
            set(h, HeaderName::from_static("ect"), "9g");
            set(h, HeaderName::from_static("rtt"), "-1");
            set(h, HeaderName::from_static("downlink"), "1e400");
            set(h, HeaderName::from_static("device-memory"), "NaN");
            set(h, HeaderName::from_static("viewport-width"), "\u{221e}");
            set(h, header::ACCEPT_ENCODING, "br, gzip");
        },
    },
    FieldCase {
        name: "accept_encoding_garbage",
        build: |h| {
            set(
                h,
                header::ACCEPT_ENCODING,
                "br;q=2, gzip;q=-1, zstd;q=0.5.5, *;q=abc, ;;;, dcz",
            )
        },
    },
    FieldCase {
        name: "accept_encoding_nothing_acceptable",
        build: |h| set(h, header::ACCEPT_ENCODING, "identity;q=0, *;q=0"),
    },
    FieldCase {
        name: "get_with_body",
        build: |h| {
            set(h, header::CONTENT_TYPE, "application/x-www-form-urlencoded");
            *h.body = Bytes::from_static(b"q=1&q=2&debug=true");
        },
    },
    FieldCase {
        name: "cache_control_garbage",
        build: |h| {
            set(
                h,
                header::CACHE_CONTROL,
                "max-age=-5, no-cache=\"x, max-stale=abc",
            );
            set(h, header::PRAGMA, "no-cache, ;;");
            set(h, header::ACCEPT_ENCODING, "zstd");
        },
    },
    FieldCase {
        name: "credentials",
        build: |h| {
            set(h, header::AUTHORIZATION, "Bearer soak-token");
            set(h, header::COOKIE, "session=abc; theme=dark");
            set(h, header::ACCEPT_ENCODING, "gzip, br, zstd, dcb, dcz");
        },
    },
];

/// A malformed request, sent over raw TCP.
pub struct RawCase {
    pub name: &'static str,
    /// The bytes, for a request target and a `Host`.
    pub build: fn(&str, &str) -> Vec<u8>,
    /// Our sending side closes after the bytes: a body that ends early.
    pub half_close: bool,
    /// Only a refusal is right (the request is not valid HTTP/1.1); otherwise a
    /// well-formed request comes first and may be answered.
    pub refuse_only: bool,
    /// The server must close the connection (RFC 9112: after a framing error).
    pub must_close: bool,
}

pub const RAW_CASES: &[RawCase] = &[
    RawCase {
        name: "garbage_request_line",
        build: |_, _| b"\x16\x03\x01\x02\x00 hello there\r\n\r\n".to_vec(),
        half_close: false,
        refuse_only: true,
        must_close: true,
    },
    RawCase {
        name: "field_without_colon",
        build: |t, h| {
            format!("GET {t} HTTP/1.1\r\nHost: {h}\r\nNo colon here\r\n\r\n").into_bytes()
        },
        half_close: false,
        refuse_only: true,
        must_close: true,
    },
    RawCase {
        name: "space_before_colon",
        build: |t, h| format!("GET {t} HTTP/1.1\r\nHost : {h}\r\n\r\n").into_bytes(),
        half_close: false,
        refuse_only: true,
        must_close: true,
    },
    RawCase {
        name: "control_byte_in_field",
        build: |t, h| {
            format!("GET {t} HTTP/1.1\r\nHost: {h}\r\nX-Evil: a\x01b\r\n\r\n").into_bytes()
        },
        half_close: false,
        refuse_only: true,
        must_close: true,
    },
    RawCase {
        name: "nul_in_target",
        build: |t, h| format!("GET {t}\0x HTTP/1.1\r\nHost: {h}\r\n\r\n").into_bytes(),
        half_close: false,
        refuse_only: true,
        must_close: true,
    },
    RawCase {
        name: "unknown_version",
        build: |t, h| format!("GET {t} HTTP/2.7\r\nHost: {h}\r\n\r\n").into_bytes(),
        half_close: false,
        refuse_only: true,
        must_close: true,
    },
    RawCase {
        name: "head_of_600_kib",
        build: |t, h| {
            format!(
                "GET {t} HTTP/1.1\r\nHost: {h}\r\nX-Big: {}\r\n\r\n",
                "a".repeat(600 << 10)
            )
            .into_bytes()
        },
        half_close: false,
        refuse_only: true,
        must_close: true,
    },
    RawCase {
        name: "target_of_100_kib",
        build: |t, h| {
            format!(
                "GET {t}?{} HTTP/1.1\r\nHost: {h}\r\n\r\n",
                "x".repeat(100 << 10)
            )
            .into_bytes()
        },
        half_close: false,
        refuse_only: false,
        must_close: false,
    },
    RawCase {
        name: "500_fields",
        build: |t, h| {
            let fields: String = (0..500).map(|i| format!("X-F{i}: {i}\r\n")).collect();
            format!("GET {t} HTTP/1.1\r\nHost: {h}\r\n{fields}\r\n").into_bytes()
        },
        half_close: false,
        refuse_only: false,
        must_close: false,
    },
    RawCase {
        name: "conflicting_content_lengths",
        build: |t, h| {
            format!("GET {t} HTTP/1.1\r\nHost: {h}\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!")
                .into_bytes()
        },
        half_close: false,
        refuse_only: true,
        must_close: true,
    },
    RawCase {
        name: "content_length_and_chunked",
        build: |t, h| {
            format!(
                "GET {t} HTTP/1.1\r\nHost: {h}\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
            )
            .into_bytes()
        },
        half_close: false,
        refuse_only: false,
        must_close: true,
    },
    RawCase {
        name: "invalid_chunk_size",
        build: |t, h| {
            format!("GET {t} HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")
                .into_bytes()
        },
        half_close: false,
        refuse_only: false,
        must_close: true,
    },
    RawCase {
        name: "body_shorter_than_its_length",
        build: |t, h| {
            format!("GET {t} HTTP/1.1\r\nHost: {h}\r\nContent-Length: 1000\r\n\r\nonly ten b")
                .into_bytes()
        },
        half_close: true,
        refuse_only: false,
        must_close: true,
    },
    RawCase {
        name: "body_longer_than_its_length",
        build: |t, h| {
            format!("GET {t} HTTP/1.1\r\nHost: {h}\r\nContent-Length: 5\r\n\r\nhelloGARBAGE GARBAGE\r\n\r\n")
                .into_bytes()
        },
        half_close: false,
        refuse_only: false,
        must_close: true,
    },
    RawCase {
        name: "obsolete_line_folding",
        build: |t, h| {
            format!("GET {t} HTTP/1.1\r\nHost: {h}\r\nX-Folded: a\r\n b\r\n\r\n").into_bytes()
        },
        half_close: false,
        refuse_only: false,
        must_close: false,
    },
];

/// What came back on a raw connection.
#[derive(Debug, Default)]
pub struct RawResult {
    pub data: Vec<u8>,
    /// The server closed (EOF, reset, or a failed write).
    pub closed: bool,
}

/// Sends `bytes` to `addr` and reads until the server closes, the first whole answer
/// when `stop_after_answer`, or `limit`.
pub async fn send_raw(
    addr: SocketAddr,
    bytes: &[u8],
    half_close: bool,
    stop_after_answer: bool,
    limit: Duration,
) -> std::io::Result<RawResult> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut stream = TcpStream::connect(addr).await?;
    let mut result = RawResult::default();
    // A server may refuse a long head before it is all written.
    let written = tokio::time::timeout_at(deadline, stream.write_all(bytes)).await;
    if !matches!(written, Ok(Ok(()))) {
        result.closed = written.is_ok();
    }
    if half_close && !result.closed {
        let _ = stream.shutdown().await;
    }
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => break,
            Ok(Ok(0)) | Ok(Err(_)) => {
                result.closed = true;
                break;
            }
            Ok(Ok(n)) => {
                result.data.extend_from_slice(&buf[..n]);
                if stop_after_answer
                    && parse_answers(&result.data, false).is_ok_and(|a| !a.is_empty())
                {
                    break;
                }
            }
        }
    }
    Ok(result)
}

/// The answers in `data`, in order; an answer whose body runs to the close counts
/// only when `closed`. `Err` when the bytes are not HTTP/1.1 answers.
pub fn parse_answers(mut data: &[u8], closed: bool) -> Result<Vec<Answer>, String> {
    let mut answers = Vec::new();
    while !data.is_empty() {
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut head = httparse::Response::new(&mut fields);
        let head_len = match head.parse(data) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => break,
            Err(e) => return Err(format!("unreadable answer: {e}")),
        };
        let status = StatusCode::from_u16(head.code.unwrap_or(0)).map_err(|e| e.to_string())?;
        let mut headers = HeaderMap::new();
        for field in head.headers.iter() {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(field.name.as_bytes()),
                HeaderValue::from_bytes(field.value),
            ) {
                headers.append(name, value);
            }
        }
        let rest = &data[head_len..];
        let chunked = headers
            .get(header::TRANSFER_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        let length = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<usize>().ok());
        let bodyless = status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED;
        let (body, used) = if bodyless {
            (Vec::new(), 0)
        } else if chunked {
            match dechunk(rest)? {
                Some(done) => done,
                None => break,
            }
        } else if let Some(n) = length {
            if rest.len() < n {
                break;
            }
            (rest[..n].to_vec(), n)
        } else if closed {
            (rest.to_vec(), rest.len())
        } else {
            break;
        };
        data = &rest[used..];
        if !status.is_informational() {
            answers.push(Answer {
                status,
                headers,
                body: body.into(),
            });
        }
    }
    Ok(answers)
}

/// A chunked body and the bytes it took; `None` when it is not all there yet.
fn dechunk(data: &[u8]) -> Result<Option<(Vec<u8>, usize)>, String> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let Some(end) = data[at..].windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let line = std::str::from_utf8(&data[at..at + end]).map_err(|e| e.to_string())?;
        let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {line:?}"))?;
        at += end + 2;
        if size == 0 {
            // No trailer fields: the empty line; else the fields, then the empty line.
            if data[at..].starts_with(b"\r\n") {
                return Ok(Some((body, at + 2)));
            }
            return Ok(data[at..]
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map(|end| (body, at + end + 4)));
        }
        if data.len() < at + size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&data[at..at + size]);
        at += size + 2;
    }
}

/// Judges what a raw case got back. Answers with content are verified as `asked`.
pub fn judge_raw(case: &RawCase, result: &RawResult, asked: &Asked, truths: &Truths) -> Verdict {
    let answers = match parse_answers(&result.data, result.closed) {
        Ok(answers) => answers,
        Err(e) => {
            return Verdict::Failed {
                kind: "hostile_garbled",
                detail: format!("{}: {e}", case.name),
            }
        }
    };
    let mut refused = answers.is_empty();
    for answer in &answers {
        let status = answer.status;
        // 501 and 505 refuse a method or version the server does not implement.
        if status.is_server_error()
            && status != StatusCode::NOT_IMPLEMENTED
            && status != StatusCode::HTTP_VERSION_NOT_SUPPORTED
        {
            return Verdict::Failed {
                kind: "hostile_5xx",
                detail: format!("{}: {status}", case.name),
            };
        }
        if status.is_client_error() || status.is_server_error() {
            refused = true;
            continue;
        }
        if case.refuse_only {
            return Verdict::Failed {
                kind: "hostile_accepted",
                detail: format!("{}: {status}", case.name),
            };
        }
        match verify(asked, answer, truths) {
            Verdict::Correct { .. } | Verdict::Refused => {}
            other => return other,
        }
    }
    if answers.is_empty() && !result.closed {
        return Verdict::Failed {
            kind: "hostile_hang",
            detail: format!("{}: no answer and no close", case.name),
        };
    }
    if case.must_close && !result.closed {
        return Verdict::Failed {
            kind: "hostile_kept_open",
            detail: format!("{}: answered but not closed", case.name),
        };
    }
    if refused {
        Verdict::Refused
    } else {
        Verdict::Correct { held: None }
    }
}

/// A head that never ends: a field every second. The server must close the
/// connection (with or without a 408) before `limit`.
pub async fn slowloris(addr: SocketAddr, target: &str, host: &str, limit: Duration) -> Verdict {
    let started = Instant::now();
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return Verdict::Failed {
            kind: "connect",
            detail: format!("slowloris: cannot connect to {addr}"),
        };
    };
    let mut data = Vec::new();
    let mut closed = stream
        .write_all(format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n").as_bytes())
        .await
        .is_err();
    let mut buf = [0u8; 4096];
    let mut field = 0u64;
    while !closed && started.elapsed() < limit {
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => closed = true,
                Ok(n) => data.extend_from_slice(&buf[..n]),
            },
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                field += 1;
                closed = stream
                    .write_all(format!("X-Slow-{field}: {field}\r\n").as_bytes())
                    .await
                    .is_err();
            }
        }
    }
    if !closed {
        return Verdict::Failed {
            kind: "slowloris_not_closed",
            detail: format!("open after {} s of a trickled head", limit.as_secs()),
        };
    }
    match parse_answers(&data, true) {
        Ok(answers) if answers.iter().all(|a| a.status.is_client_error()) => Verdict::Refused,
        Ok(answers) => Verdict::Failed {
            kind: "hostile_5xx",
            detail: format!(
                "slowloris answered {:?}",
                answers.iter().map(|a| a.status).collect::<Vec<_>>()
            ),
        },
        Err(e) => Verdict::Failed {
            kind: "hostile_garbled",
            detail: format!("slowloris: {e}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_in_every_framing() {
        let data = b"HTTP/1.1 100 Continue\r\n\r\n\
            HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello\
            HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n\
            HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\nbad";
        let answers = parse_answers(data, true).unwrap();
        let got: Vec<(u16, &[u8])> = answers
            .iter()
            .map(|a| (a.status.as_u16(), &a.body[..]))
            .collect();
        assert_eq!(got, [(200, &b"hello"[..]), (200, b"abcde"), (400, b"bad")]);
        // Not closed: the last body may not be whole.
        assert_eq!(parse_answers(data, false).unwrap().len(), 2);
        assert!(parse_answers(b"SSH-2.0-x\r\n\r\n", true).is_err());
    }

    #[test]
    fn raw_judgement_wants_a_refusal_or_a_close() {
        let truths = Truths::default();
        let asked = Asked {
            hostile: true,
            ..Asked::default()
        };
        let case = &RAW_CASES[0];
        let result = |data: &[u8], closed| RawResult {
            data: data.to_vec(),
            closed,
        };
        let refusal = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(
            judge_raw(case, &result(refusal, true), &asked, &truths),
            Verdict::Refused
        );
        assert_eq!(
            judge_raw(case, &result(b"", true), &asked, &truths),
            Verdict::Refused
        );
        let kind = |v| match v {
            Verdict::Failed { kind, .. } => kind,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            kind(judge_raw(case, &result(b"", false), &asked, &truths)),
            "hostile_hang"
        );
        assert_eq!(
            kind(judge_raw(case, &result(refusal, false), &asked, &truths)),
            "hostile_kept_open"
        );
        let error = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(
            kind(judge_raw(case, &result(error, true), &asked, &truths)),
            "hostile_5xx"
        );
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(
            kind(judge_raw(case, &result(ok, true), &asked, &truths)),
            "hostile_accepted"
        );
    }
}
