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

use std::sync::Arc;

use bytes::{Buf, Bytes};
use codec::dictionary::DictionaryCoding;
use http::header::{self, HeaderValue};
use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt;
use store::Hash;
use wirefold_http::cache_control::CacheControl;
use wirefold_http::ContentCoding;

use crate::body::{self, Body};
use crate::config::{CodingList, CompressionProfile, Config};
use crate::decode::Windows;
use crate::model::{Instance, InstanceBody, Provenance, RequestContext, StreamCoding};
use delta::derived::{produce_off_reactor, DerivedBodies, Produce, Variant};
use delta::{DeltaChoice, DeltaEngine, DeltaRequest};

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
    /// SHA-256 of the decoded instance, when the body was whole: sent as
    /// `Wirefold-Digest` so a client can verify what it reconstructs.
    pub instance_hash: Option<Hash>,
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
    /// Compressed against the dictionary the client named (RFC 9842).
    Dictionary(DictionaryCoding),
    /// An RFC 3229 delta (`226 IM Used`, `IM: vcdiff`) against the instance with
    /// this validator.
    Vcdiff {
        base_etag: String,
    },
}

impl SentCoding {
    /// The metrics label.
    pub fn mechanism(&self) -> &'static str {
        match self {
            SentCoding::Identity => "identity",
            SentCoding::Encoded(c) => c.token(),
            SentCoding::Origin(_) => "passthrough",
            SentCoding::Dictionary(c) => c.token(),
            SentCoding::Vcdiff { .. } => "vcdiff",
        }
    }
}

/// Runs on every instance, after `hint`: chooses identity, a content coding the client
/// accepts, or a delta the delta engine offers, and produces it (kept in `bodies` when
/// the instance is reusable); adds `Use-As-Dictionary` and dictionary links. May not
/// change the instance's content. Never fails: an encoding problem falls back to
/// identity, a corrupt origin stream ends the body with an error.
pub async fn encode(
    config: &Config,
    bodies: &DerivedBodies,
    deltas: &DeltaEngine,
    ctx: &RequestContext,
    instance: Instance,
) -> Representation {
    let Instance {
        status,
        mut headers,
        body,
        provenance,
        reusable,
        last_modified,
        ..
    } = instance;
    let compression = &config.compression;
    let cache_control = CacheControl::from_headers(&headers);
    let no_transform = cache_control.no_transform;
    let profile = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| compression.profile_for(ct))
        .filter(|_| compression.enabled && !no_transform)
        .filter(|_| {
            !matches!(
                status,
                StatusCode::PARTIAL_CONTENT | StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED
            )
        });
    let big_enough = |len: u64| len >= compression.min_size as u64;
    let accept = &ctx.profile.accept_encoding;
    let pick = |list: &CodingList| -> Option<(ContentCoding, u32)> {
        let chosen = accept.negotiate(list.0.iter().map(|(c, _)| *c))?;
        list.0.iter().find(|(c, _)| *c == chosen).copied()
    };
    let rep = |body, coding, negotiated, original_len| Representation {
        status,
        headers: HeaderMap::new(),
        body,
        coding,
        negotiated,
        original_len,
        instance_hash: None,
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
                    let list = if reusable {
                        &prof.cached
                    } else {
                        &prof.on_the_fly
                    };
                    pick(list).map(|choice| (prof, choice))
                });
            let (plain, sent) = match choice {
                None => (bytes.clone(), SentCoding::Identity),
                Some((prof, (coding, level))) if reusable => (
                    cached_compression(bodies, prof, hash, &bytes, coding, level).await,
                    SentCoding::Encoded(coding),
                ),
                Some((_, (coding, level))) => (
                    compress_once(coding, level, bytes.clone()).await,
                    SentCoding::Encoded(coding),
                ),
            };
            let deltas_apply = reusable
                && negotiable
                && status == StatusCode::OK
                && !ctx.profile.wants_range
                && config.delta.enabled;
            let request = deltas_apply.then(|| delta_request(config, ctx));
            let delta = match &request {
                Some(request) => {
                    deltas
                        .choose(request, &headers, hash, &bytes, plain.len())
                        .await
                }
                None => None,
            };
            if let Some(request) = &request {
                let links_until = deltas
                    .announce(request, &mut headers, &cache_control, hash, &bytes)
                    .await;
                if let Some(until) = links_until {
                    ctx.repeat.expire_by(until);
                }
            }
            let mut whole = match delta {
                Some(DeltaChoice::Dictionary { coding, body }) => rep(
                    RepresentationBody::Whole(body),
                    SentCoding::Dictionary(coding),
                    true,
                    Some(len),
                ),
                Some(DeltaChoice::Vcdiff { body, base_etag }) => {
                    let mut r = rep(
                        RepresentationBody::Whole(body),
                        SentCoding::Vcdiff { base_etag },
                        true,
                        Some(len),
                    );
                    r.status = StatusCode::IM_USED;
                    r
                }
                None => rep(
                    RepresentationBody::Whole(plain),
                    sent,
                    negotiable,
                    Some(len),
                ),
            };
            whole.instance_hash = Some(hash);
            whole
        }
        InstanceBody::Stream {
            body,
            coding,
            length,
        } => match coding {
            StreamCoding::Unknown(value) => rep(
                RepresentationBody::Stream { body, length },
                SentCoding::Origin(value),
                false,
                None,
            ),
            StreamCoding::Known(origin_coding) if no_transform || accept.accepts(origin_coding) => {
                let value = HeaderValue::from_static(origin_coding.token());
                rep(
                    RepresentationBody::Stream { body, length },
                    SentCoding::Origin(value),
                    profile.is_some(),
                    None,
                )
            }
            StreamCoding::Known(origin_coding) => {
                let target = profile.and_then(|prof| pick(&prof.on_the_fly));
                let transform = Transform::new(
                    Some((origin_coding, config.limits.max_decoded_body)),
                    target,
                );
                let body = transform.apply(body);
                let sent = target.map_or(SentCoding::Identity, |(c, _)| SentCoding::Encoded(c));
                rep(
                    RepresentationBody::Stream { body, length: None },
                    sent,
                    profile.is_some(),
                    None,
                )
            }
            StreamCoding::Identity => {
                let negotiable = profile.is_some() && length.is_none_or(big_enough);
                match profile
                    .filter(|_| negotiable)
                    .and_then(|prof| pick(&prof.on_the_fly))
                {
                    Some(target) => {
                        let body = Transform::new(None, Some(target)).apply(body);
                        rep(
                            RepresentationBody::Stream { body, length: None },
                            SentCoding::Encoded(target.0),
                            true,
                            length,
                        )
                    }
                    None => rep(
                        RepresentationBody::Stream { body, length },
                        SentCoding::Identity,
                        negotiable,
                        length,
                    ),
                }
            }
        },
        InstanceBody::File { file, len } => {
            let negotiable = profile.is_some() && big_enough(len);
            match profile
                .filter(|_| negotiable && !ctx.profile.wants_range)
                .and_then(|prof| pick(&prof.on_the_fly))
            {
                Some(target) => {
                    let body = Transform::new(None, Some(target)).apply(body::file(file, 0, len));
                    rep(
                        RepresentationBody::Stream { body, length: None },
                        SentCoding::Encoded(target.0),
                        true,
                        Some(len),
                    )
                }
                None => rep(
                    RepresentationBody::File { file, len },
                    SentCoding::Identity,
                    negotiable,
                    Some(len),
                ),
            }
        }
    };
    representation.headers = headers;
    representation
}

/// What the delta engine reads of this request.
fn delta_request<'a>(config: &Config, ctx: &'a RequestContext) -> DeltaRequest<'a> {
    let profile = &ctx.profile;
    DeltaRequest {
        site: &ctx.site,
        resource: &ctx.resource,
        uri: &profile.uri,
        headers: &profile.headers,
        accept_encoding: &profile.accept_encoding,
        if_none_match: profile.preconditions.if_none_match.as_ref(),
        accepted_manipulations: profile.accepted_manipulations.as_ref(),
        available_dictionary: profile.available_dictionary,
        public_path: config.cache.is_public_path(profile.uri.path()),
    }
}

/// Plain compression of reusable content at `level`, answering at the profile's
/// `on_the_fly` level meanwhile when that is lower.
async fn cached_compression(
    bodies: &DerivedBodies,
    profile: &CompressionProfile,
    hash: Hash,
    bytes: &Bytes,
    coding: ContentCoding,
    level: u32,
) -> Bytes {
    let quick = profile
        .on_the_fly
        .0
        .iter()
        .find(|(c, _)| *c == coding)
        .map(|(_, l)| *l)
        .filter(|l| *l < level);
    let produce = || -> Produce {
        let content = bytes.clone();
        Arc::new(move |l| codec::compress(coding, l, &content))
    };
    let variant = Variant::Coded { coding, level };
    bodies
        .get_or_make(hash, bytes.len(), &variant, quick, level, produce)
        .await
}

/// Compression of content used once.
async fn compress_once(coding: ContentCoding, level: u32, bytes: Bytes) -> Bytes {
    let len = bytes.len();
    let produce: Produce = Arc::new(move |l| codec::compress(coding, l, &bytes));
    produce_off_reactor(&produce, level, len).await
}

/// A streaming transformation: optionally decode the origin's coding (bounded), then
/// optionally encode with the negotiated one. Runs on the blocking pool a window at a
/// time: one coded chunk may decode to far more than a window (a bomb), so its output
/// is made and sent window by window, and the next chunk is read only after the last
/// window of this one went into the body. The body's channel holds
/// [`TRANSFORMED_AHEAD`] windows: the origin is read no further ahead of the client.
struct Transform {
    decoder: Option<Windows>,
    encoder: Option<codec::Encoder>,
}

/// Transformed windows waiting for the client, at most.
const TRANSFORMED_AHEAD: usize = 2;

impl Transform {
    fn new(decode: Option<(ContentCoding, usize)>, encode: Option<(ContentCoding, u32)>) -> Self {
        Transform {
            decoder: decode.map(|(c, limit)| Windows::new(c, limit)),
            encoder: encode.map(|(c, level)| codec::Encoder::new(c, level)),
        }
    }

    /// Whether the input given so far may still yield output.
    fn has_pending(&self) -> bool {
        self.decoder.as_ref().is_some_and(Windows::has_pending)
    }

    /// Transforms at most a window's worth of `input` (advancing it); the output
    /// may be empty while codecs buffer.
    fn step(&mut self, input: &mut Bytes) -> Result<Vec<u8>, codec::DecodeError> {
        let Some(windows) = &mut self.decoder else {
            let input = std::mem::take(input);
            return Ok(match &mut self.encoder {
                Some(e) => {
                    e.write(&input);
                    e.take_output()
                }
                None => input.to_vec(),
            });
        };
        let mut rest = &input[..];
        let window = windows.next(&mut rest)?.unwrap_or_default();
        input.advance(input.len() - rest.len());
        Ok(match &mut self.encoder {
            Some(e) => {
                e.write(&window);
                e.take_output()
            }
            None => window,
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
        let (tx, out) = body::channel(TRANSFORMED_AHEAD);
        tokio::spawn(async move {
            let mut transform = self;
            let mut input = Bytes::new();
            loop {
                if input.is_empty() && !transform.has_pending() {
                    let Some(frame) = body.frame().await else {
                        break;
                    };
                    match frame {
                        Ok(frame) => match frame.into_data() {
                            Ok(data) => input = data,
                            Err(_) => continue, // trailers: dropped, the coding changed the body
                        },
                        Err(e) => {
                            let _ = tx.send(Err(e)).await;
                            return;
                        }
                    }
                }
                let (back, rest, result) = delta::blocking::run(move || {
                    let result = transform.step(&mut input);
                    (transform, input, result)
                })
                .await;
                (transform, input) = (back, rest);
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
            let tail = delta::blocking::run(move || transform.finish()).await;
            let _ = match tail {
                Ok(out) if out.is_empty() => Ok(()),
                Ok(out) => tx.send(Ok(Bytes::from(out))).await,
                Err(e) => tx.send(Err(Box::new(e))).await,
            };
        });
        out
    }
}
