//! The host a request is for (RFC 9112 §3.2, RFC 9113 §8.3.1): the target's
//! authority when the request-target has one (absolute form, or HTTP/2's
//! `:authority`), else the one `Host` field. Anything ambiguous is refused, since a
//! proxy and an origin that read it differently key and answer different things.

use http::header::{HeaderMap, HOST};
use http::uri::Authority;
use http::{Uri, Version};

/// Why a request's host cannot be known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("an HTTP/1.1 request needs a Host field")]
    Missing,
    #[error("a request may carry one Host field only")]
    Repeated,
    #[error("the Host field is not a valid host[:port]")]
    Invalid,
    #[error("the Host field differs from the request's :authority")]
    Conflicting,
}

/// The authority `uri` and `headers` name, or `None` for an HTTP/1.0 request
/// that names none.
///
/// # Errors
/// No `Host` on HTTP/1.1, two `Host` fields, an invalid one (userinfo included),
/// or, on HTTP/2 and later, a `Host` that differs from `:authority`.
pub fn request_host(
    version: Version,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Option<Authority>, HostError> {
    let mut fields = headers.get_all(HOST).iter();
    let field = fields.next();
    if fields.next().is_some() {
        return Err(HostError::Repeated);
    }
    let field = field.map(parse_authority).transpose()?;
    let target = uri.authority().cloned();
    if target.as_ref().is_some_and(|t| t.as_str().contains('@')) {
        return Err(HostError::Invalid);
    }
    if version >= Version::HTTP_2 {
        if let (Some(target), Some(field)) = (&target, &field) {
            if !same_authority(target, field, uri.scheme_str()) {
                return Err(HostError::Conflicting);
            }
        }
        return Ok(target.or(field));
    }
    if field.is_none() && version == Version::HTTP_11 {
        return Err(HostError::Missing);
    }
    // Absolute form: the target wins over `Host` (RFC 9112 §3.2.2).
    Ok(target.or(field))
}

/// Equal hosts (case aside) and ports, an absent port being the scheme's default.
fn same_authority(a: &Authority, b: &Authority, scheme: Option<&str>) -> bool {
    let default = match scheme {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    };
    a.host().eq_ignore_ascii_case(b.host()) && a.port_u16().or(default) == b.port_u16().or(default)
}

fn parse_authority(value: &http::HeaderValue) -> Result<Authority, HostError> {
    let text = value.to_str().map_err(|_| HostError::Invalid)?;
    if text.is_empty() || text.contains('@') {
        return Err(HostError::Invalid);
    }
    text.parse::<Authority>().map_err(|_| HostError::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn hosts(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for value in values {
            map.append(HOST, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn host_of(version: Version, uri: &str, values: &[&str]) -> Result<Option<String>, HostError> {
        let uri: Uri = uri.parse().unwrap();
        request_host(version, &uri, &hosts(values)).map(|a| a.map(|a| a.to_string()))
    }

    #[test]
    fn origin_form_takes_the_one_host_field() {
        let h11 = Version::HTTP_11;
        assert_eq!(
            host_of(h11, "/a", &["example.com"]),
            Ok(Some("example.com".into()))
        );
        assert_eq!(host_of(h11, "/a", &[]), Err(HostError::Missing));
        assert_eq!(host_of(Version::HTTP_10, "/a", &[]), Ok(None));
        let two = host_of(h11, "/a", &["a.example", "b.example"]);
        assert_eq!(two, Err(HostError::Repeated));
        let same_twice = host_of(Version::HTTP_10, "/a", &["a.example", "a.example"]);
        assert_eq!(same_twice, Err(HostError::Repeated));
        for bad in ["", "user@evil.example", "a b", "a.example/path"] {
            assert_eq!(
                host_of(h11, "/a", &[bad]),
                Err(HostError::Invalid),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn absolute_form_wins_over_host() {
        let found = host_of(
            Version::HTTP_11,
            "http://target.example/a",
            &["other.example"],
        );
        assert_eq!(found, Ok(Some("target.example".into())));
        let userinfo = host_of(
            Version::HTTP_11,
            "http://u@target.example/a",
            &["target.example"],
        );
        assert_eq!(userinfo, Err(HostError::Invalid));
    }

    #[test]
    fn http2_authority_must_agree_with_host() {
        let h2 = Version::HTTP_2;
        let uri = "https://a.example/x";
        assert_eq!(host_of(h2, uri, &[]), Ok(Some("a.example".into())));
        assert_eq!(
            host_of(h2, uri, &["A.example"]),
            Ok(Some("a.example".into()))
        );
        assert_eq!(
            host_of(h2, uri, &["b.example"]),
            Err(HostError::Conflicting)
        );
        assert_eq!(
            host_of(h2, uri, &["a.example:443"]),
            Ok(Some("a.example".into()))
        );
        assert_eq!(
            host_of(h2, uri, &["a.example:8443"]),
            Err(HostError::Conflicting)
        );
        assert_eq!(
            host_of(h2, "/x", &["b.example"]),
            Ok(Some("b.example".into()))
        );
    }
}
