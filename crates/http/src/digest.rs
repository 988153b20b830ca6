//! `Wirefold-Digest`: the SHA-256 of the decoded instance a response stands for
//! (after removing any content coding and applying any delta), so a client can
//! verify what it reconstructs. `Wirefold-Digest: sha-256=:<base64>:`, the
//! structured-field form of RFC 9530's `Repr-Digest`, which names the encoded
//! representation instead and so cannot check a delta's result.

use base64::Engine;
use http::header::{HeaderMap, HeaderName, HeaderValue};

pub const WIREFOLD_DIGEST: HeaderName = HeaderName::from_static("wirefold-digest");

/// The field value naming `sha256`.
#[allow(
    clippy::expect_used,
    reason = "base64 between literal text is visible ASCII, which a field value may hold"
)]
pub fn digest_value(sha256: &[u8; 32]) -> HeaderValue {
    // Written in place: every response with a known instance carries one.
    const PREFIX: &[u8] = b"sha-256=:";
    let mut text = [0u8; PREFIX.len() + 44 + 1];
    text[..PREFIX.len()].copy_from_slice(PREFIX);
    let written = base64::engine::general_purpose::STANDARD
        .encode_slice(sha256, &mut text[PREFIX.len()..])
        .expect("32 bytes are 44 base64 characters");
    text[PREFIX.len() + written] = b':';
    HeaderValue::from_bytes(&text).expect("base64 is a valid header value")
}

/// The SHA-256 a response claims for its instance; `None` when absent, repeated or
/// malformed.
pub fn instance_digest(headers: &HeaderMap) -> Option<[u8; 32]> {
    let mut values = headers.get_all(WIREFOLD_DIGEST).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let inner = value
        .to_str()
        .ok()?
        .trim()
        .strip_prefix("sha-256=:")?
        .strip_suffix(':')?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(inner)
        .ok()?;
    bytes.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::test_map as map;

    #[test]
    fn round_trips_and_rejects_junk() {
        let mut h = HeaderMap::new();
        h.insert(WIREFOLD_DIGEST, digest_value(&[9; 32]));
        assert_eq!(
            digest_value(&[0; 32]),
            format!("sha-256=:{}=:", "A".repeat(43)).as_str()
        );
        assert_eq!(instance_digest(&h), Some([9; 32]));
        for bad in [
            &b"sha-512=:AAAA:"[..],
            b"sha-256=:AAAA:",
            b"sha-256=abc",
            b"\xff",
        ] {
            assert_eq!(instance_digest(&map(&[("wirefold-digest", bad)])), None);
        }
    }
}
