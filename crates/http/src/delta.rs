//! RFC 3229 fields: `A-IM` (the instance manipulations a client accepts) and the
//! response fields of `226 IM Used`.

use http::header::{HeaderMap, HeaderName};

use crate::accept_encoding::AcceptEncoding;
use crate::fields;

pub const A_IM: HeaderName = HeaderName::from_static("a-im");
pub const IM: HeaderName = HeaderName::from_static("im");
pub const DELTA_BASE: HeaderName = HeaderName::from_static("delta-base");

/// Whether the request's `A-IM` accepts the manipulation `im` (e.g. `vcdiff`) with
/// q > 0. `A-IM` has `Accept-Encoding`'s syntax, so it is parsed the same way.
pub fn accepts_im(headers: &HeaderMap, im: &str) -> bool {
    fields::combined(headers, A_IM)
        .is_some_and(|value| AcceptEncoding::parse(&value).accepts_token(im))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::test_map as map;

    #[test]
    fn a_im_lists_with_q_values() {
        assert!(accepts_im(&map(&[("a-im", b"vcdiff")]), "vcdiff"));
        assert!(accepts_im(
            &map(&[("a-im", b"diffe, VCDIFF;q=0.5")]),
            "vcdiff"
        ));
        assert!(!accepts_im(&map(&[("a-im", b"vcdiff;q=0")]), "vcdiff"));
        assert!(!accepts_im(&map(&[("a-im", b"gzip")]), "vcdiff"));
        assert!(!accepts_im(&HeaderMap::new(), "vcdiff"));
        assert!(!accepts_im(&map(&[("a-im", b"\xff\xfe")]), "vcdiff"));
    }
}
