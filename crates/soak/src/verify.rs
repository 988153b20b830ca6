//! The verifier: one answer, judged against the truth. Pure: the request as asked,
//! the answer as received, the expected bodies; no I/O.
//!
//! Every answer that carries or confirms content names its instance (`ETag`, and
//! `Delta-Base` for a 226); the verifier rebuilds what the client ends up holding
//! (decoding content codings with wirefold's own decoders, applying a dictionary or
//! a VCDIFF delta to the base it names) and compares its SHA-256 with the truth of
//! that instance. A 304 is right only when it names an instance the request listed.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use codec::dictionary::{self, DictionaryCoding};
use http::header::{self, HeaderMap};
use http::StatusCode;
use sha2::{Digest, Sha256};
use wirefold_http::delta::{DELTA_BASE, IM};
use wirefold_http::digest::instance_digest;
use wirefold_http::ContentCoding;

use crate::catalogue::{self, InstanceId};
use crate::truth::Truths;

/// The most a decoded body may grow to: every catalogue body is far smaller.
const DECODED_LIMIT: usize = 16 << 20;

/// What the request asked, as far as the answer depends on it.
#[derive(Clone, Debug, Default)]
pub struct Asked {
    /// The resource of the request's URL.
    pub resource: u16,
    /// A HEAD: no body, and the fields describe the instance.
    pub head: bool,
    /// The instances `If-None-Match` named.
    pub listed: Vec<InstanceId>,
    /// `If-None-Match: *`: any current instance may be confirmed.
    pub listed_any: bool,
    /// The dictionary `Available-Dictionary` offered (its bytes).
    pub dictionary: Option<Bytes>,
    /// The first byte of the `Range` asked for.
    pub range_start: Option<u64>,
    /// A hostile request: a 4xx is a clean refusal.
    pub hostile: bool,
    /// When the answer's head arrived: no instance may be newer than the origin's
    /// clock then.
    pub answered_at: Option<SystemTime>,
}

/// An answer as received: status, fields, the whole body.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// The judgement of one answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Right; `held` is the whole instance the client now holds, with the validator
    /// as sent, when the answer delivered one (200, 226).
    Correct { held: Option<(InstanceId, String)> },
    /// A hostile request refused with a 4xx.
    Refused,
    /// Content the origin did not produce for this request, or a confirmation of an
    /// instance the client does not hold: a wrong body.
    Wrong(String),
    /// No content claimed, but not a correct answer either: the kind names why
    /// (`status_5xx`, `decode`, `no_validator`, …).
    Failed { kind: &'static str, detail: String },
}

fn failed(kind: &'static str, detail: impl Into<String>) -> Verdict {
    Verdict::Failed {
        kind,
        detail: detail.into(),
    }
}

/// Judges `answer` to `asked`.
pub fn verify(asked: &Asked, answer: &Answer, truths: &Truths) -> Verdict {
    let status = answer.status;
    if status.is_server_error() {
        return failed("status_5xx", format!("{status}: {}", snippet(&answer.body)));
    }
    if status.is_client_error() {
        return if asked.hostile {
            Verdict::Refused
        } else {
            failed("status_4xx", format!("{status}: {}", snippet(&answer.body)))
        };
    }
    let judged = match status.as_u16() {
        200 | 206 | 226 | 304 => named(asked, answer),
        _ => return failed("status_unexpected", status.to_string()),
    };
    let (id, etag) = match judged {
        Ok(named) => named,
        Err(verdict) => return verdict,
    };
    let Some(truth) = truths.get(id) else {
        return Verdict::Wrong(format!("no such instance {id:?}"));
    };
    if let Some(digest) = instance_digest(&answer.headers) {
        if digest != truth.sha256 {
            return Verdict::Wrong(format!(
                "Wirefold-Digest {} names other content than {}",
                hex::encode(digest),
                id.opaque()
            ));
        }
    }
    match status.as_u16() {
        304 => not_modified(asked, id),
        206 => partial(asked, answer, &truth.body),
        226 => delta(asked, answer, id, etag, &truth.sha256, truths),
        _ if asked.head => head(answer, id, truth.body.len()),
        _ => match decode_codings(asked, &answer.headers, answer.body.clone()) {
            Ok(content) => whole(&content, id, etag, &truth.sha256),
            Err(verdict) => verdict,
        },
    }
}

/// The instance the answer's `ETag` names, and the tag as sent; checked against
/// the resource asked for and the origin's clock.
fn named(asked: &Asked, answer: &Answer) -> Result<(InstanceId, String), Verdict> {
    let Some(etag) = answer
        .headers
        .get(header::ETAG)
        .and_then(|v| v.to_str().ok())
    else {
        return Err(failed(
            "no_validator",
            format!("{} without an ETag", answer.status),
        ));
    };
    let Some(id) = InstanceId::from_etag(etag) else {
        return Err(failed("no_validator", format!("unreadable ETag {etag}")));
    };
    if id.resource != asked.resource {
        return Err(Verdict::Wrong(format!(
            "ETag {etag} names resource {}, asked for {}",
            id.resource, asked.resource
        )));
    }
    if let (Some(at), Some(resource)) = (asked.answered_at, catalogue::get(id.resource)) {
        // A second of slack for the clock read after the origin's.
        let newest = resource.version_at(id.resource, at + Duration::from_secs(1));
        if id.version > newest {
            return Err(Verdict::Wrong(format!(
                "ETag {etag} names a version the origin has not made (newest {newest})"
            )));
        }
    }
    Ok((id, etag.to_string()))
}

fn not_modified(asked: &Asked, id: InstanceId) -> Verdict {
    if asked.listed_any || asked.listed.contains(&id) {
        Verdict::Correct { held: None }
    } else {
        Verdict::Wrong(format!(
            "304 confirms {}, which the request did not list ({:?})",
            id.opaque(),
            asked.listed
        ))
    }
}

fn whole(content: &[u8], id: InstanceId, etag: String, sha256: &[u8; 32]) -> Verdict {
    if <[u8; 32]>::from(Sha256::digest(content)) == *sha256 {
        Verdict::Correct {
            held: Some((id, etag)),
        }
    } else {
        Verdict::Wrong(format!(
            "{} bytes whose SHA-256 is not {}'s",
            content.len(),
            id.opaque()
        ))
    }
}

/// A HEAD's fields must describe the instance: its length when sent as it is.
fn head(answer: &Answer, id: InstanceId, len: usize) -> Verdict {
    if !answer.body.is_empty() {
        return Verdict::Wrong(format!("a body of {} bytes to a HEAD", answer.body.len()));
    }
    let coded = answer.headers.contains_key(header::CONTENT_ENCODING);
    let length = answer
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    match length {
        Some(n) if !coded && n != len => {
            Verdict::Wrong(format!("HEAD says {n} bytes, {} has {len}", id.opaque()))
        }
        // The client holds nothing new after a HEAD.
        _ => Verdict::Correct { held: None },
    }
}

fn partial(asked: &Asked, answer: &Answer, truth: &[u8]) -> Verdict {
    let Some(start) = asked.range_start else {
        return failed("status_unexpected", "206 to a request without Range");
    };
    if answer.headers.contains_key(header::CONTENT_ENCODING) {
        return failed(
            "status_unexpected",
            "206 of a coded representation to an identity request",
        );
    }
    let Some((first, last, total)) = answer
        .headers
        .get(header::CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(content_range)
    else {
        return failed("bad_206", "206 without a readable Content-Range");
    };
    if total != truth.len() as u64 || first != start || last < first || last >= total {
        return Verdict::Wrong(format!(
            "Content-Range {first}-{last}/{total} for bytes={start}- of {} bytes",
            truth.len()
        ));
    }
    if answer.body[..] != truth[first as usize..=last as usize] {
        return Verdict::Wrong(format!("bytes {first}-{last} differ from the instance's"));
    }
    Verdict::Correct { held: None }
}

/// `bytes FIRST-LAST/TOTAL`.
fn content_range(value: &str) -> Option<(u64, u64, u64)> {
    let rest = value.trim().strip_prefix("bytes ")?;
    let (span, total) = rest.split_once('/')?;
    let (first, last) = span.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?, total.parse().ok()?))
}

fn delta(
    asked: &Asked,
    answer: &Answer,
    id: InstanceId,
    etag: String,
    sha256: &[u8; 32],
    truths: &Truths,
) -> Verdict {
    let vcdiff = answer
        .headers
        .get(IM)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|m| m.trim().eq_ignore_ascii_case("vcdiff"))
        });
    if !vcdiff {
        return failed("bad_226", "226 without IM: vcdiff");
    }
    let Some(base_tag) = answer.headers.get(DELTA_BASE).and_then(|v| v.to_str().ok()) else {
        return failed("bad_226", "226 without Delta-Base");
    };
    let Some(base) = InstanceId::from_etag(base_tag) else {
        return Verdict::Wrong(format!("226 against {base_tag}, which names no instance"));
    };
    if base.resource != asked.resource || !asked.listed.contains(&base) {
        return Verdict::Wrong(format!(
            "226 against {}, which the request did not list ({:?})",
            base.opaque(),
            asked.listed
        ));
    }
    let Some(base_truth) = truths.get(base) else {
        return Verdict::Wrong(format!("226 against unknown {base_tag}"));
    };
    let coded = match decode_codings(asked, &answer.headers, answer.body.clone()) {
        Ok(coded) => coded,
        Err(verdict) => return verdict,
    };
    match codec::vcdiff::decode(&base_truth.body, &coded, DECODED_LIMIT) {
        Ok(content) => whole(&content, id, etag, sha256),
        Err(e) => failed("decode", format!("vcdiff against {}: {e}", base.opaque())),
    }
}

/// A derived dictionary (`Link: rel="compression-dictionary"`), fetched: its
/// content must hash to the name it was linked by, and it must say which URLs it is
/// for. Returns the content and its `match` pattern.
pub fn verify_dictionary(answer: &Answer, hash: &[u8; 32]) -> Result<(Bytes, String), Verdict> {
    if answer.status.is_server_error() {
        return Err(failed(
            "status_5xx",
            format!("dictionary: {}", answer.status),
        ));
    }
    if answer.status != StatusCode::OK {
        return Err(failed(
            "bad_dictionary",
            format!("dictionary: {}", answer.status),
        ));
    }
    let content = decode_codings(&Asked::default(), &answer.headers, answer.body.clone())?;
    if <[u8; 32]>::from(Sha256::digest(&content)) != *hash {
        return Err(Verdict::Wrong(format!(
            "dictionary {}: its content has another SHA-256",
            hex::encode(hash)
        )));
    }
    let Some(pattern) = wirefold_http::dictionary::use_as_dictionary_match(&answer.headers) else {
        return Err(failed(
            "bad_dictionary",
            "a dictionary without Use-As-Dictionary",
        ));
    };
    Ok((content, pattern))
}

/// Undoes the `Content-Encoding` list, last applied first.
fn decode_codings(asked: &Asked, headers: &HeaderMap, body: Bytes) -> Result<Bytes, Verdict> {
    let codings: Vec<String> = headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty() && c != "identity")
        .collect();
    let mut data = body;
    for token in codings.iter().rev() {
        data = if let Some(coding) = DictionaryCoding::from_token(token) {
            let Some(dictionary) = &asked.dictionary else {
                return Err(failed(
                    "decode",
                    format!("{token} without a dictionary offered"),
                ));
            };
            dictionary::decode(coding, dictionary, &data, DECODED_LIMIT)
                .map_err(|e| failed("decode", format!("{token}: {e}")))?
                .into()
        } else if let Some(coding) = ContentCoding::from_token(token) {
            codec::decompress(coding, &data, DECODED_LIMIT)
                .map_err(|e| failed("decode", format!("{token}: {e}")))?
                .into()
        } else {
            return Err(failed("decode", format!("unknown coding {token}")));
        };
    }
    Ok(data)
}

/// The start of a body, for error details.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(120)]);
    text.trim().replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::lookup;
    use http::HeaderValue;

    fn news() -> (u16, InstanceId, InstanceId) {
        let (r, _) = lookup("/news/2.html").unwrap();
        let id = |version| InstanceId {
            resource: r,
            version,
        };
        (r, id(100), id(101))
    }

    fn answer(status: u16, fields: &[(&'static str, String)], body: Vec<u8>) -> Answer {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            headers.append(*name, HeaderValue::from_str(value).unwrap());
        }
        Answer {
            status: StatusCode::from_u16(status).unwrap(),
            headers,
            body: body.into(),
        }
    }

    fn tag(id: InstanceId) -> String {
        format!("\"{}\"", id.opaque())
    }

    #[test]
    fn a_right_body_in_any_coding_is_correct_and_held() {
        let truths = Truths::default();
        let (r, _, new) = news();
        let content = truths.get(new).unwrap().body.clone();
        let asked = Asked {
            resource: r,
            ..Asked::default()
        };
        for (coding, body) in [
            (None, content.to_vec()),
            (
                Some("gzip"),
                codec::compress(ContentCoding::Gzip, 6, &content),
            ),
            (Some("br"), codec::compress(ContentCoding::Br, 5, &content)),
            (
                Some("zstd"),
                codec::compress(ContentCoding::Zstd, 3, &content),
            ),
        ] {
            let mut fields = vec![("etag", format!("W/\"{}-x\"", new.opaque()))];
            if let Some(c) = coding {
                fields.push(("content-encoding", c.to_string()));
            }
            assert_eq!(
                verify(&asked, &answer(200, &fields, body), &truths),
                Verdict::Correct {
                    held: Some((new, format!("W/\"{}-x\"", new.opaque())))
                },
                "{coding:?}"
            );
        }
    }

    #[test]
    fn a_corrupted_body_is_a_wrong_body() {
        let truths = Truths::default();
        let (r, _, new) = news();
        let mut body = truths.get(new).unwrap().body.to_vec();
        body[500] ^= 1;
        let asked = Asked {
            resource: r,
            ..Asked::default()
        };
        let fields = [("etag", tag(new))];
        assert!(matches!(
            verify(&asked, &answer(200, &fields, body.clone()), &truths),
            Verdict::Wrong(_)
        ));
        // The same bytes gzip-coded: decoded, then caught.
        let coded = codec::compress(ContentCoding::Gzip, 6, &body);
        let fields = [("etag", tag(new)), ("content-encoding", "gzip".into())];
        assert!(matches!(
            verify(&asked, &answer(200, &fields, coded), &truths),
            Verdict::Wrong(_)
        ));
        // The right body under another version's tag is wrong too.
        let right = truths.get(new).unwrap().body.to_vec();
        let fields = [("etag", tag(InstanceId { version: 99, ..new }))];
        assert!(matches!(
            verify(&asked, &answer(200, &fields, right), &truths),
            Verdict::Wrong(_)
        ));
    }

    #[test]
    fn dictionary_codings_decode_with_the_offered_dictionary() {
        let truths = Truths::default();
        let (r, old, new) = news();
        let dictionary = truths.get(old).unwrap().body.clone();
        let content = truths.get(new).unwrap().body.clone();
        let asked = Asked {
            resource: r,
            dictionary: Some(dictionary.clone()),
            ..Asked::default()
        };
        for coding in DictionaryCoding::ALL {
            let body = dictionary::encode(coding, 5, &dictionary, &content);
            let fields = [
                ("etag", tag(new)),
                ("content-encoding", coding.token().into()),
            ];
            assert!(
                matches!(
                    verify(&asked, &answer(200, &fields, body.clone()), &truths),
                    Verdict::Correct { held: Some(_) }
                ),
                "{coding:?}"
            );
            // Made against another dictionary: not decodable, so not believed.
            let other = dictionary::encode(coding, 5, b"another dictionary", &content);
            assert!(matches!(
                verify(&asked, &answer(200, &fields, other), &truths),
                Verdict::Failed { kind: "decode", .. }
            ));
        }
    }

    #[test]
    fn a_226_must_name_a_listed_base_and_rebuild_the_instance() {
        let truths = Truths::default();
        let (r, old, new) = news();
        let base = truths.get(old).unwrap().body.clone();
        let content = truths.get(new).unwrap().body.clone();
        let patch = codec::vcdiff::encode(&base, &content);
        let asked = Asked {
            resource: r,
            listed: vec![old],
            ..Asked::default()
        };
        let fields = [
            ("etag", tag(new)),
            ("im", "vcdiff".into()),
            ("delta-base", format!("W/\"{}-br\"", old.opaque())),
        ];
        assert_eq!(
            verify(&asked, &answer(226, &fields, patch.clone()), &truths),
            Verdict::Correct {
                held: Some((new, tag(new)))
            }
        );
        // A base the client did not list.
        let unlisted = Asked {
            listed: vec![InstanceId { version: 7, ..old }],
            ..asked.clone()
        };
        assert!(matches!(
            verify(&unlisted, &answer(226, &fields, patch.clone()), &truths),
            Verdict::Wrong(_)
        ));
        // A delta that rebuilds other content.
        let wrong = codec::vcdiff::encode(
            &base,
            &truths
                .get(InstanceId {
                    version: 102,
                    ..new
                })
                .unwrap()
                .body,
        );
        assert!(matches!(
            verify(&asked, &answer(226, &fields, wrong), &truths),
            Verdict::Wrong(_)
        ));
    }

    #[test]
    fn a_304_must_confirm_a_listed_instance() {
        let truths = Truths::default();
        let (r, old, new) = news();
        let asked = Asked {
            resource: r,
            listed: vec![old],
            ..Asked::default()
        };
        assert_eq!(
            verify(&asked, &answer(304, &[("etag", tag(old))], vec![]), &truths),
            Verdict::Correct { held: None }
        );
        assert!(matches!(
            verify(&asked, &answer(304, &[("etag", tag(new))], vec![]), &truths),
            Verdict::Wrong(_)
        ));
        let any = Asked {
            listed_any: true,
            ..Asked::default()
        };
        let any = Asked { resource: r, ..any };
        assert_eq!(
            verify(&any, &answer(304, &[("etag", tag(new))], vec![]), &truths),
            Verdict::Correct { held: None }
        );
        assert!(matches!(
            verify(&asked, &answer(304, &[], vec![]), &truths),
            Verdict::Failed {
                kind: "no_validator",
                ..
            }
        ));
    }

    #[test]
    fn ranges_must_be_the_instances_bytes() {
        let truths = Truths::default();
        let (r, _, new) = news();
        let content = truths.get(new).unwrap().body.clone();
        let asked = Asked {
            resource: r,
            range_start: Some(100),
            ..Asked::default()
        };
        let range = |first: usize, last: usize| {
            vec![
                ("etag", tag(new)),
                (
                    "content-range",
                    format!("bytes {first}-{last}/{}", content.len()),
                ),
            ]
        };
        assert_eq!(
            verify(
                &asked,
                &answer(206, &range(100, 199), content[100..200].to_vec()),
                &truths
            ),
            Verdict::Correct { held: None }
        );
        assert!(matches!(
            verify(
                &asked,
                &answer(206, &range(100, 199), content[101..201].to_vec()),
                &truths
            ),
            Verdict::Wrong(_)
        ));
        assert!(matches!(
            verify(
                &asked,
                &answer(206, &range(99, 198), content[99..199].to_vec()),
                &truths
            ),
            Verdict::Wrong(_)
        ));
    }

    #[test]
    fn a_wrong_digest_or_a_future_version_is_wrong() {
        let truths = Truths::default();
        let (r, old, new) = news();
        let content = truths.get(new).unwrap().body.to_vec();
        let asked = Asked {
            resource: r,
            ..Asked::default()
        };
        let other = truths.get(old).unwrap().sha256;
        let fields = [
            ("etag", tag(new)),
            (
                "wirefold-digest",
                wirefold_http::digest::digest_value(&other)
                    .to_str()
                    .unwrap()
                    .to_string(),
            ),
        ];
        assert!(matches!(
            verify(&asked, &answer(200, &fields, content.clone()), &truths),
            Verdict::Wrong(_)
        ));
        let now = SystemTime::now();
        let current = catalogue::get(r).unwrap().version_at(r, now);
        let future = InstanceId {
            resource: r,
            version: current + 1000,
        };
        let dated = Asked {
            answered_at: Some(now),
            ..asked
        };
        let body = truths.get(future).unwrap().body.to_vec();
        assert!(matches!(
            verify(
                &dated,
                &answer(200, &[("etag", tag(future))], body),
                &truths
            ),
            Verdict::Wrong(_)
        ));
    }

    #[test]
    fn refusals_count_only_for_hostile_requests() {
        let truths = Truths::default();
        let plain = Asked::default();
        let hostile = Asked {
            hostile: true,
            ..Asked::default()
        };
        let bad = answer(400, &[], b"bad request".to_vec());
        assert_eq!(verify(&hostile, &bad, &truths), Verdict::Refused);
        assert!(matches!(
            verify(&plain, &bad, &truths),
            Verdict::Failed {
                kind: "status_4xx",
                ..
            }
        ));
        let broken = answer(502, &[], b"origin unreachable".to_vec());
        assert!(matches!(
            verify(&hostile, &broken, &truths),
            Verdict::Failed {
                kind: "status_5xx",
                ..
            }
        ));
    }
}
