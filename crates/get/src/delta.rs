//! Deltas and dictionaries: what a request offers (the instances held for the URL,
//! the best dictionary for it) and how an answer is turned back into the instance —
//! a 304 confirming one offered, a 226 applied to its `Delta-Base`, content codings
//! and `dcb`/`dcz` removed — then verified against `Wirefold-Digest`.

use bytes::Bytes;
use codec::dictionary::DictionaryCoding;
use http::header::{self, HeaderMap, HeaderValue};
use http::StatusCode;
use store::Hash;
use wirefold_http::conditional::EntityTag;
use wirefold_http::delta::{A_IM, DELTA_BASE, IM};
use wirefold_http::dictionary::{available_dictionary_value, AVAILABLE_DICTIONARY};
use wirefold_http::digest::instance_digest;
use wirefold_http::ContentCoding;

use crate::cache::{Cache, InstanceEntry};
use crate::exchange::{field, Exchange, Outcome, Target};

const PLAIN_CODINGS: &str = "br, zstd, gzip, deflate";

/// What the request tells the server the client holds.
#[derive(Default)]
pub(crate) struct Offer {
    /// Instances of this URL, newest first.
    held: Vec<InstanceEntry>,
    /// The best matching dictionary and its bytes.
    dictionary: Option<(Hash, Bytes)>,
}

impl Offer {
    pub(crate) fn from_cache(cache: &Cache, target: &Target) -> Offer {
        let held = cache
            .index
            .resources
            .get(&target.url)
            .cloned()
            .unwrap_or_default();
        let held = held
            .into_iter()
            .filter(|i| i.hash().is_some_and(|h| cache.has_blob(&h)))
            .collect();
        // RFC 9842 §2.2.2: the longest match wins, then the most recent.
        let dictionary = cache
            .index
            .dictionaries
            .iter()
            .filter(|d| d.origin == target.origin && target.matched_by(&d.pattern))
            .max_by_key(|d| (d.pattern.len(), d.time))
            .and_then(|d| d.hash())
            .and_then(|hash| cache.blob(&hash).map(|bytes| (hash, bytes)));
        Offer { held, dictionary }
    }

    pub(crate) fn request_headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let user_agent = concat!("wirefold-get/", env!("CARGO_PKG_VERSION"));
        headers.insert(header::USER_AGENT, HeaderValue::from_static(user_agent));
        let accept = match self.dictionary {
            Some(_) => HeaderValue::from_static("br, zstd, gzip, deflate, dcb, dcz"),
            None => HeaderValue::from_static(PLAIN_CODINGS),
        };
        headers.insert(header::ACCEPT_ENCODING, accept);
        if let Some((hash, _)) = &self.dictionary {
            headers.insert(AVAILABLE_DICTIONARY, available_dictionary_value(&hash.0));
        }
        let tags: Vec<&str> = self.held.iter().map(|i| i.etag.as_str()).collect();
        // RFC 3229 §10.5.3: a delta request names the instances it could be based on.
        if let (false, Ok(list)) = (tags.is_empty(), HeaderValue::from_str(&tags.join(", "))) {
            headers.insert(A_IM, HeaderValue::from_static("vcdiff"));
            headers.insert(header::IF_NONE_MATCH, list);
        }
        headers
    }

    fn held_by_tag(&self, tag: &str) -> Option<&InstanceEntry> {
        let tag = EntityTag::parse(tag)?;
        self.held
            .iter()
            .find(|i| EntityTag::parse(&i.etag).is_some_and(|t| t.weak_eq(&tag)))
    }
}

/// Decodes, applies and verifies a response against what was offered; `Err` says why
/// it must not be delivered.
pub(crate) fn interpret(
    cache: &Cache,
    offer: &Offer,
    exchange: &Exchange,
    limit: usize,
) -> Result<Outcome, String> {
    let headers = &exchange.headers;
    let (instance, delivery, cached) = match exchange.status {
        StatusCode::NOT_MODIFIED => {
            let held =
                held_for_304(offer, headers).ok_or("304 for an instance that was not offered")?;
            let hash = held.hash().ok_or("cache index names a malformed hash")?;
            let bytes = cache.blob(&hash).ok_or("the cached instance is gone")?;
            (bytes, "cached".to_string(), true)
        }
        StatusCode::IM_USED => {
            let base_tag = field(headers, &DELTA_BASE).ok_or("226 without Delta-Base")?;
            let base = offer.held_by_tag(&base_tag).ok_or_else(|| {
                format!("226 against Delta-Base {base_tag}, which was not offered")
            })?;
            let base_bytes = base
                .hash()
                .and_then(|h| cache.blob(&h))
                .ok_or("the delta base is gone from the cache")?;
            let (mut data, _) = decode_content(headers, &exchange.body, offer, limit)?;
            let ims = field(headers, &IM).ok_or("226 without IM")?;
            for im in ims.split(',').map(|t| t.trim().to_ascii_lowercase()).rev() {
                data = match (im.as_str(), ContentCoding::from_token(&im)) {
                    ("vcdiff", _) => codec::vcdiff::decode(&base_bytes, &data, limit)
                        .map_err(|e| format!("vcdiff: {e}"))?,
                    (_, Some(coding)) => {
                        codec::decompress(coding, &data, limit).map_err(|e| e.to_string())?
                    }
                    _ => return Err(format!("unsupported instance manipulation `{im}`")),
                };
            }
            (
                Bytes::from(data),
                format!("{ims} against {base_tag}"),
                false,
            )
        }
        _ => {
            let (data, delivery) = decode_content(headers, &exchange.body, offer, limit)?;
            (Bytes::from(data), delivery, false)
        }
    };
    let hash = Hash::of(&instance);
    let verified = match instance_digest(headers) {
        Some(expected) if expected != hash.0 => {
            return Err(format!("digest mismatch after {delivery}"))
        }
        Some(_) => true,
        None => false,
    };
    Ok(Outcome {
        status: exchange.status,
        headers: headers.clone(),
        instance,
        hash,
        delivery,
        verified,
        cached,
    })
}

/// The offered instance a 304 confirms: named by digest when the server sends one,
/// else by validator.
fn held_for_304<'a>(offer: &'a Offer, headers: &HeaderMap) -> Option<&'a InstanceEntry> {
    match instance_digest(headers) {
        Some(digest) => offer
            .held
            .iter()
            .find(|i| i.hash().is_some_and(|h| h.0 == digest)),
        None => offer.held_by_tag(&field(headers, &header::ETAG)?),
    }
}

/// Removes the content codings in reverse order of application; returns the
/// content and a description (`br`, `dcz against 1a2b3c4d`, `identity`).
fn decode_content(
    headers: &HeaderMap,
    body: &[u8],
    offer: &Offer,
    limit: usize,
) -> Result<(Vec<u8>, String), String> {
    let codings: Vec<String> = field(headers, &header::CONTENT_ENCODING)
        .unwrap_or_default()
        .split(',')
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty() && t != "identity")
        .collect();
    let mut data = body.to_vec();
    let mut described = Vec::new();
    for token in codings.iter().rev() {
        if let Some(coding) = ContentCoding::from_token(token) {
            data = codec::decompress(coding, &data, limit).map_err(|e| e.to_string())?;
            described.push(token.clone());
        } else if let Some(coding) = DictionaryCoding::from_token(token) {
            let (hash, dictionary) = offer
                .dictionary
                .as_ref()
                .ok_or_else(|| format!("{token} without a dictionary offered"))?;
            // The decoder checks that the body's header names this dictionary.
            data = codec::dictionary::decode(coding, dictionary, &data, limit)
                .map_err(|e| e.to_string())?;
            described.push(format!("{token} against {}", &hash.to_hex()[..8]));
        } else {
            return Err(format!("unsupported content coding `{token}`"));
        }
    }
    described.reverse();
    let description = if described.is_empty() {
        "identity".to_string()
    } else {
        described.join(", ")
    };
    Ok((data, description))
}
