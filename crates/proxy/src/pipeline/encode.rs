//! Stage 6, encode: chooses the representation sent — identity or a content coding
//! the client accepts — and produces it.
//!
//! What compresses: bodies whose media type has a compression profile, at least
//! `compression.min_size` bytes, without `Cache-Control: no-transform`, not a range.
//! Reusable bodies (stored or file content) use the profile's `cached` list and their
//! encodings are kept in the store by (content hash, coding, level): the first request
//! is served at the `on_the_fly` level while the `cached` level is produced in the
//! background, so no client waits for a slow high level and repeats cost no CPU.
//! Other bodies use the `on_the_fly` list. Streams are compressed as they flow.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use codec::ContentCoding;
use http::header::{self, HeaderValue};
use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt;
use store::Hash;
use wirefold_http::cache_control::CacheControl;

use super::{Instance, InstanceBody, Pipeline, Provenance, RequestContext, StreamCoding};
use crate::body::{self, Body};
use crate::config::{CodingList, CompressionProfile};

/// The representation `respond` sends.
pub struct Representation {
    pub status: StatusCode,
    /// The instance's fields; `respond` adds `Content-Encoding`, `Content-Length`,
    /// `Vary` and the representation's `ETag`.
    pub headers: HeaderMap,
    pub body: RepresentationBody,
    pub coding: SentCoding,
    /// The choice depended on `Accept-Encoding`: `Vary` must say so.
    pub negotiated: bool,
    /// Bytes before encoding, when known (for metrics).
    pub original_len: Option<u64>,
    pub provenance: Provenance,
    pub last_modified: Option<std::time::SystemTime>,
}

pub enum RepresentationBody {
    Whole(Bytes),
    Stream { body: Body, length: Option<u64> },
    File { file: tokio::fs::File, len: u64 },
    Empty,
}

/// The content coding of what is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SentCoding {
    Identity,
    /// Produced by wirefold: the `ETag` is suffixed and weakened.
    Encoded(ContentCoding),
    /// The origin's coding, forwarded untouched.
    Origin(HeaderValue),
}

impl SentCoding {
    /// The metrics label.
    pub fn mechanism(&self) -> &'static str {
        match self {
            SentCoding::Identity => "identity",
            SentCoding::Encoded(c) => c.token(),
            SentCoding::Origin(_) => "passthrough",
        }
    }
}

/// Background encodes at the `cached` level under way, by (content, variant), so
/// concurrent misses start one job.
#[derive(Default)]
pub struct BackgroundJobs {
    running: Arc<Mutex<HashSet<(Hash, String)>>>,
}

/// Runs on every instance that has a body; never fails (an encoding problem falls
/// back to identity, a corrupt origin stream ends the body with an error).
pub async fn encode(p: &Pipeline, ctx: &RequestContext, instance: Instance) -> Representation {
    let Instance { status, headers, body, provenance, reusable, last_modified } = instance;
    let compression = &p.config.compression;
    let no_transform = CacheControl::from_headers(&headers).no_transform;
    let profile = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| compression.profile_for(ct))
        .filter(|_| compression.enabled && !no_transform)
        .filter(|_| !matches!(status, StatusCode::PARTIAL_CONTENT | StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED));
    let big_enough = |len: u64| len >= compression.min_size as u64;
    let accept = &ctx.profile.accept_encoding;
    let pick = |list: &CodingList| -> Option<(ContentCoding, u32)> {
        let preference: Vec<ContentCoding> = list.0.iter().map(|(c, _)| *c).collect();
        let chosen = accept.negotiate(&preference)?;
        list.0.iter().find(|(c, _)| *c == chosen).copied()
    };
    let rep = |body, coding, negotiated, original_len| Representation {
        status,
        headers: HeaderMap::new(),
        body,
        coding,
        negotiated,
        original_len,
        provenance,
        last_modified,
    };

    let mut representation = match body {
        InstanceBody::Empty => rep(RepresentationBody::Empty, SentCoding::Identity, false, None),
        InstanceBody::Whole { bytes, hash } => {
            let len = bytes.len() as u64;
            let negotiable = profile.is_some() && big_enough(len);
            let choice = profile
                .filter(|_| negotiable && !ctx.profile.wants_range)
                .and_then(|prof| {
                    let list = if reusable { &prof.cached } else { &prof.on_the_fly };
                    pick(list).map(|choice| (prof, choice))
                });
            match choice {
                None => rep(RepresentationBody::Whole(bytes), SentCoding::Identity, negotiable, Some(len)),
                Some((prof, (coding, level))) => {
                    let encoded = if reusable {
                        cached_encoding(p, prof, hash, &bytes, coding, level).await
                    } else {
                        compress_off_reactor(coding, level, bytes).await
                    };
                    rep(RepresentationBody::Whole(encoded), SentCoding::Encoded(coding), true, Some(len))
                }
            }
        }
        InstanceBody::Stream { body, coding, length } => match coding {
            StreamCoding::Unknown(value) => {
                rep(RepresentationBody::Stream { body, length }, SentCoding::Origin(value), false, None)
            }
            StreamCoding::Known(origin_coding) if no_transform || accept.accepts(origin_coding) => {
                let value = HeaderValue::from_static(origin_coding.token());
                rep(RepresentationBody::Stream { body, length }, SentCoding::Origin(value), profile.is_some(), None)
            }
            StreamCoding::Known(origin_coding) => {
                let target = profile.and_then(|prof| pick(&prof.on_the_fly));
                let transform = Transform::new(Some((origin_coding, p.config.limits.max_decoded_body)), target);
                let body = transform.apply(body);
                let sent = target.map_or(SentCoding::Identity, |(c, _)| SentCoding::Encoded(c));
                rep(RepresentationBody::Stream { body, length: None }, sent, profile.is_some(), None)
            }
            StreamCoding::Identity => {
                let negotiable = profile.is_some() && length.is_none_or(big_enough);
                match profile.filter(|_| negotiable).and_then(|prof| pick(&prof.on_the_fly)) {
                    Some(target) => {
                        let body = Transform::new(None, Some(target)).apply(body);
                        rep(RepresentationBody::Stream { body, length: None }, SentCoding::Encoded(target.0), true, length)
                    }
                    None => rep(RepresentationBody::Stream { body, length }, SentCoding::Identity, negotiable, length),
                }
            }
        },
        InstanceBody::File { file, len } => {
            let negotiable = profile.is_some() && big_enough(len);
            match profile.filter(|_| negotiable && !ctx.profile.wants_range).and_then(|prof| pick(&prof.on_the_fly)) {
                Some(target) => {
                    let body = Transform::new(None, Some(target)).apply(body::file(file, 0, len));
                    rep(RepresentationBody::Stream { body, length: None }, SentCoding::Encoded(target.0), true, Some(len))
                }
                None => rep(RepresentationBody::File { file, len }, SentCoding::Identity, negotiable, Some(len)),
            }
        }
    };
    representation.headers = headers;
    representation
}

/// Bodies below this size are compressed on the reactor thread: handing them to the
/// blocking pool costs more than the work.
const INLINE_COMPRESS_MAX: usize = 16 * 1024;

async fn compress_off_reactor(coding: ContentCoding, level: u32, bytes: Bytes) -> Bytes {
    if bytes.len() <= INLINE_COMPRESS_MAX {
        return Bytes::from(codec::compress(coding, level, &bytes));
    }
    tokio::task::spawn_blocking(move || Bytes::from(codec::compress(coding, level, &bytes)))
        .await
        .expect("compression does not panic")
}

fn variant_name(coding: ContentCoding, level: u32) -> String {
    format!("{}-{}", coding.token(), level)
}

/// The stored encoding at `level`; on a miss, the stored on-the-fly encoding or a
/// fresh one (kept), while the `level` encoding is made in the background.
async fn cached_encoding(
    p: &Pipeline,
    profile: &CompressionProfile,
    hash: Hash,
    bytes: &Bytes,
    coding: ContentCoding,
    level: u32,
) -> Bytes {
    let Some(store) = p.store.clone() else {
        return compress_off_reactor(coding, level, bytes.clone()).await;
    };
    let quick_level = profile.on_the_fly.0.iter().find(|(c, _)| *c == coding).map(|(_, l)| *l).filter(|l| *l < level);
    let wanted = variant_name(coding, level);
    if let Some(hit) = store.get_encoding_in_memory(&hash, &wanted) {
        p.metrics.encoding_cache_result("hit");
        return hit;
    }
    let quick = quick_level.map(|l| variant_name(coding, l));
    let lookup_store = store.clone();
    let (wanted_hit, quick_hit) = tokio::task::spawn_blocking({
        let (wanted, quick) = (wanted.clone(), quick.clone());
        move || {
            let wanted_hit = lookup_store.get_encoding(&hash, &wanted).ok().flatten();
            let quick_hit = match (&wanted_hit, quick) {
                (None, Some(q)) => lookup_store.get_encoding(&hash, &q).ok().flatten(),
                _ => None,
            };
            (wanted_hit, quick_hit)
        }
    })
    .await
    .expect("store reads do not panic");
    if let Some(hit) = wanted_hit {
        p.metrics.encoding_cache_result("hit");
        return hit;
    }
    let Some(quick_level) = quick_level else {
        p.metrics.encoding_cache_result("miss");
        let encoded = compress_off_reactor(coding, level, bytes.clone()).await;
        keep_encoding(p, store, hash, wanted, encoded.clone());
        return encoded;
    };
    start_background_encode(p, store.clone(), hash, bytes.clone(), coding, level, wanted);
    if let Some(hit) = quick_hit {
        p.metrics.encoding_cache_result("quick_hit");
        return hit;
    }
    p.metrics.encoding_cache_result("miss");
    let encoded = compress_off_reactor(coding, quick_level, bytes.clone()).await;
    keep_encoding(p, store, hash, quick.expect("quick level implies a name"), encoded.clone());
    encoded
}

fn keep_encoding(p: &Pipeline, store: store::Store, hash: Hash, variant: String, encoded: Bytes) {
    let errors = p.metrics.store_write_errors.clone();
    p.background.spawn_blocking(move || {
        if let Err(e) = store.put_encoding(&hash, &variant, &encoded) {
            errors.inc();
            if !matches!(e, store::StoreError::WritesSuspended) {
                tracing::warn!(error = %e, variant, "encoding not cached");
            }
        }
    });
}

fn start_background_encode(
    p: &Pipeline,
    store: store::Store,
    hash: Hash,
    bytes: Bytes,
    coding: ContentCoding,
    level: u32,
    variant: String,
) {
    let job = (hash, variant.clone());
    if !p.encode_jobs.running.lock().expect("jobs poisoned").insert(job.clone()) {
        return;
    }
    let errors = p.metrics.store_write_errors.clone();
    let running = Arc::clone(&p.encode_jobs.running);
    p.background.spawn_blocking(move || {
        let encoded = codec::compress(coding, level, &bytes);
        if let Err(e) = store.put_encoding(&hash, &variant, &encoded) {
            errors.inc();
            if !matches!(e, store::StoreError::WritesSuspended) {
                tracing::warn!(error = %e, variant, "background encoding not cached");
            }
        }
        running.lock().expect("jobs poisoned").remove(&job);
    });
}

/// A streaming transformation: optionally decode the origin's coding (bounded), then
/// optionally encode with the negotiated one. Runs on the blocking pool chunk by chunk.
struct Transform {
    decoder: Option<codec::Decoder>,
    encoder: Option<codec::Encoder>,
}

impl Transform {
    fn new(decode: Option<(ContentCoding, usize)>, encode: Option<(ContentCoding, u32)>) -> Self {
        Transform {
            decoder: decode.map(|(c, limit)| codec::Decoder::new(c, limit)),
            encoder: encode.map(|(c, level)| codec::Encoder::new(c, level)),
        }
    }

    fn push(&mut self, data: &[u8]) -> Result<Vec<u8>, codec::DecodeError> {
        let decoded = match &mut self.decoder {
            Some(d) => {
                d.write(data)?;
                d.take_output()
            }
            None => data.to_vec(),
        };
        Ok(match &mut self.encoder {
            Some(e) => {
                e.write(&decoded);
                e.take_output()
            }
            None => decoded,
        })
    }

    fn finish(self) -> Result<Vec<u8>, codec::DecodeError> {
        let tail = match self.decoder {
            Some(d) => d.finish()?,
            None => Vec::new(),
        };
        Ok(match self.encoder {
            Some(mut e) => {
                e.write(&tail);
                e.finish()
            }
            None => tail,
        })
    }

    /// Spawns the task that pulls `body` through the transformation.
    fn apply(self, mut body: Body) -> Body {
        let (tx, out) = body::channel(4);
        tokio::spawn(async move {
            let mut transform = self;
            loop {
                let Some(frame) = body.frame().await else { break };
                let data = match frame {
                    Ok(frame) => match frame.into_data() {
                        Ok(data) => data,
                        Err(_) => continue, // trailers: dropped, the coding changed the body
                    },
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                };
                let (back, result) = tokio::task::spawn_blocking(move || {
                    let result = transform.push(&data);
                    (transform, result)
                })
                .await
                .expect("codecs do not panic");
                transform = back;
                match result {
                    Ok(out) if out.is_empty() => {}
                    Ok(out) => {
                        if tx.send(Ok(Bytes::from(out))).await.is_err() {
                            return; // the client went away
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(Box::new(e))).await;
                        return;
                    }
                }
            }
            let tail = tokio::task::spawn_blocking(move || transform.finish()).await.expect("codecs do not panic");
            let _ = match tail {
                Ok(out) if out.is_empty() => Ok(()),
                Ok(out) => tx.send(Ok(Bytes::from(out))).await,
                Err(e) => tx.send(Err(Box::new(e))).await,
            };
        });
        out
    }
}
