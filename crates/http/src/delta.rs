//! RFC 3229 fields: `A-IM` (the instance manipulations a client accepts) and the
//! response fields of `226 IM Used`.

use http::header::{HeaderMap, HeaderName};

use crate::accept_encoding::AcceptEncoding;
use crate::fields;

pub const A_IM: HeaderName = HeaderName::from_static("a-im");
pub const IM: HeaderName = HeaderName::from_static("im");
pub const DELTA_BASE: HeaderName = HeaderName::from_static("delta-base");

/// A request's `A-IM`: the instance manipulations it accepts. `A-IM` has
/// `Accept-Encoding`'s syntax, so it is parsed the same way. A client that sends
/// it is delta-aware (it lists the instances it holds in `If-None-Match`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AcceptedManipulations(AcceptEncoding);

impl AcceptedManipulations {
    /// `None` when the request has no `A-IM`.
    pub fn from_headers(headers: &HeaderMap) -> Option<Self> {
        fields::combined(headers, A_IM).map(|value| Self(AcceptEncoding::parse(&value)))
    }

    /// Whether the manipulation `im` (e.g. `vcdiff`) is accepted with q > 0.
    pub fn accepts(&self, im: &str) -> bool {
        self.0.accepts_token(im)
    }
}

/// Whether the request's `A-IM` accepts the manipulation `im`.
pub fn accepts_im(headers: &HeaderMap, im: &str) -> bool {
    AcceptedManipulations::from_headers(headers).is_some_and(|a| a.accepts(im))
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
