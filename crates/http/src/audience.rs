//! Who besides the requester may receive a response, or anything derived from it
//! (a shared cache entry, a delta base, a dictionary, a training sample).
//!
//! RFC 9111 lets a shared cache store an answer to a request with `Cookie`, and
//! says nothing about using it as a dictionary for other clients. wirefold is
//! stricter, as Varnish is by default: a page fetched with credentials, or one
//! that sets a cookie, says `private`, or varies on a credential field, is
//! personal. The origin (`public`, `s-maxage`) may let a shared cache keep it for
//! requests that match its `Vary`; only the operator (a public path) may make it a
//! delta base, a dictionary or a training sample for other clients.

use http::header::{HeaderMap, HeaderName, AUTHORIZATION, COOKIE, SET_COOKIE};

use crate::cache_control::CacheControl;
use crate::vary::Vary;

/// How widely a response may be shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Audience {
    /// The same for every client: it may be a shared cache entry, a delta base, a
    /// dictionary or a training sample for anyone.
    Everyone,
    /// Fetched with credentials, and the origin allowed shared caching (`public`,
    /// `s-maxage`): a shared cache entry under its `Vary` key, but never a delta
    /// base, dictionary or training sample, which outlive the entry and reach
    /// clients the origin was never asked about.
    CacheOnly,
    /// Made for the client that asked: nothing of it reaches anyone else.
    Requester,
}

impl Audience {
    /// Whether a shared cache may keep it (under its secondary key).
    pub fn may_cache(self) -> bool {
        self != Audience::Requester
    }

    /// Whether it may serve other clients as a delta base, a dictionary or a
    /// training sample.
    pub fn may_derive(self) -> bool {
        self == Audience::Everyone
    }
}

/// The audience of `response`, answered to `request`.
///
/// `public_path` is the operator's word that every response on this path is the
/// same whatever cookie a request sends (static assets); it lifts the `Cookie` rule
/// only, and not for a response that varies on `Cookie`. `Authorization`,
/// `Set-Cookie` and `private` always hold.
pub fn audience(request: &HeaderMap, response: &HeaderMap, public_path: bool) -> Audience {
    let cc = CacheControl::from_headers(response);
    if cc.private || response.contains_key(SET_COOKIE) {
        return Audience::Requester;
    }
    let sent_authorization = request.contains_key(AUTHORIZATION);
    let sent_cookie = request.contains_key(COOKIE);
    if !sent_authorization && !sent_cookie {
        // Nothing in it came from any user, whatever it varies on.
        return Audience::Everyone;
    }
    if sent_cookie && !sent_authorization && public_path && !varies_on(response, &COOKIE) {
        return Audience::Everyone;
    }
    if cc.public || cc.s_maxage.is_some() {
        Audience::CacheOnly
    } else {
        Audience::Requester
    }
}

/// Whether the response varies on `field` (`Vary` naming it, or `*`).
fn varies_on(response: &HeaderMap, field: &HeaderName) -> bool {
    match Vary::from_headers(response) {
        Vary::Absent => false,
        Vary::Any => true,
        Vary::Fields(names) => names.contains(field),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{CACHE_CONTROL, VARY};
    use http::HeaderValue;

    fn headers(fields: &[(HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in fields {
            map.append(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn a_cookie_makes_a_page_personal_unless_the_operator_says_public() {
        let cookie = headers(&[(COOKIE, "session=alice")]);
        for response in ["no-cache", "max-age=0", "max-age=60"] {
            let response = headers(&[(CACHE_CONTROL, response)]);
            assert_eq!(audience(&cookie, &response, false), Audience::Requester);
            assert_eq!(audience(&cookie, &response, true), Audience::Everyone);
            let anonymous = audience(&HeaderMap::new(), &response, false);
            assert_eq!(anonymous, Audience::Everyone);
        }
    }

    #[test]
    fn the_origins_public_word_allows_a_cache_entry_and_nothing_more() {
        let cookie = headers(&[(COOKIE, "session=alice")]);
        for shared in ["public, max-age=60", "s-maxage=0", "no-cache, s-maxage=60"] {
            let response = headers(&[(CACHE_CONTROL, shared)]);
            let found = audience(&cookie, &response, false);
            assert_eq!(found, Audience::CacheOnly, "{shared}");
            assert!(found.may_cache() && !found.may_derive());
        }
    }

    #[test]
    fn set_cookie_and_private_are_personal_on_any_path() {
        let none = HeaderMap::new();
        for response in [
            headers(&[(SET_COOKIE, "id=1")]),
            headers(&[(CACHE_CONTROL, "private, max-age=60")]),
            headers(&[(SET_COOKIE, "id=1"), (CACHE_CONTROL, "public, max-age=60")]),
        ] {
            assert_eq!(audience(&none, &response, true), Audience::Requester);
        }
    }

    #[test]
    fn authorization_is_never_lifted_by_a_public_path() {
        let auth = headers(&[(AUTHORIZATION, "Bearer x")]);
        let plain = headers(&[(CACHE_CONTROL, "max-age=60")]);
        assert_eq!(audience(&auth, &plain, true), Audience::Requester);
        let public = headers(&[(CACHE_CONTROL, "public, max-age=60")]);
        assert_eq!(audience(&auth, &public, true), Audience::CacheOnly);
    }

    #[test]
    fn a_public_path_does_not_lift_a_page_that_varies_on_cookie() {
        let cookie = headers(&[(COOKIE, "session=alice")]);
        for vary in ["Cookie", "accept-encoding, cookie", "*"] {
            let response = headers(&[(VARY, vary), (CACHE_CONTROL, "max-age=60")]);
            assert_eq!(audience(&cookie, &response, true), Audience::Requester);
            // Without a cookie it is the anonymous variant, the same for everyone.
            let anonymous = audience(&HeaderMap::new(), &response, false);
            assert_eq!(anonymous, Audience::Everyone, "{vary}");
        }
        let response = headers(&[(VARY, "Accept-Language"), (CACHE_CONTROL, "max-age=60")]);
        assert_eq!(audience(&cookie, &response, true), Audience::Everyone);
    }
}
