//! Hop-by-hop header fields (RFC 9110 §7.6.1): they describe one connection,
//! so a proxy removes them before storing or forwarding a message.

use http::header::{
    HeaderMap, HeaderName, HeaderValue, CONNECTION, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE,
    TRAILER, TRANSFER_ENCODING, UPGRADE,
};

use crate::fields;

/// Removes `Connection`, every field it names, and the fields that are always
/// hop-by-hop: `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`,
/// `Transfer-Encoding`, `Upgrade`, `Proxy-Authorization`,
/// `Proxy-Authenticate`.
///
/// Call it before adding the proxy's own headers: a client can name any
/// field in `Connection`, and this removes it.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    for named in connection_options(headers) {
        headers.remove(named);
    }
    for field in [
        CONNECTION,
        TE,
        TRAILER,
        TRANSFER_ENCODING,
        UPGRADE,
        PROXY_AUTHORIZATION,
        PROXY_AUTHENTICATE,
    ] {
        headers.remove(field);
    }
    for field in ["keep-alive", "proxy-connection"] {
        headers.remove(field);
    }
}

/// For a request that asks to switch protocols (WebSocket and the like):
/// the `Upgrade` value, when `Connection` lists `upgrade` and `Upgrade` is
/// present. Several `Upgrade` lines are combined into one value.
pub fn is_upgrade_request(headers: &HeaderMap) -> Option<HeaderValue> {
    if !connection_options(headers).contains(&UPGRADE) {
        return None;
    }
    let lines: Vec<&[u8]> = headers
        .get_all(UPGRADE)
        .iter()
        .map(HeaderValue::as_bytes)
        .collect();
    match lines.as_slice() {
        [] => None,
        [single] => HeaderValue::from_bytes(single).ok(),
        several => HeaderValue::from_bytes(&several.join(&b", "[..])).ok(),
    }
}

/// The field names listed in `Connection` (lowercase); invalid names skipped.
fn connection_options(headers: &HeaderMap) -> Vec<HeaderName> {
    let Some(value) = fields::combined(headers, CONNECTION) else {
        return Vec::new();
    };
    fields::split_list(&value)
        .filter_map(|option| HeaderName::from_bytes(option.as_bytes()).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::fields::test_map as map;

    #[test]
    fn removes_fixed_and_connection_named_fields() {
        let mut headers = map(&[
            ("connection", b"Keep-Alive, X-Private"),
            ("connection", b"x-other,,bad name,\xff"),
            ("keep-alive", b"timeout=5"),
            ("proxy-connection", b"keep-alive"),
            ("te", b"trailers"),
            ("trailer", b"x-sum"),
            ("transfer-encoding", b"chunked"),
            ("upgrade", b"h2c"),
            ("proxy-authorization", b"Basic x"),
            ("proxy-authenticate", b"Basic"),
            ("x-private", b"1"),
            ("x-other", b"2"),
            ("x-other", b"3"),
            ("content-type", b"text/html"),
            ("cache-control", b"max-age=1"),
        ]);
        remove_hop_by_hop(&mut headers);
        let left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["content-type", "cache-control"]);
    }

    #[test]
    fn no_connection_header_is_fine() {
        let mut headers = map(&[("host", b"example.com")]);
        remove_hop_by_hop(&mut headers);
        assert_eq!(headers.len(), 1);
        let mut empty = HeaderMap::new();
        remove_hop_by_hop(&mut empty);
        assert!(empty.is_empty());
    }

    #[test]
    fn websocket_upgrade() {
        let req = map(&[
            ("connection", b"keep-alive, Upgrade"),
            ("upgrade", b"websocket"),
        ]);
        assert_eq!(is_upgrade_request(&req).unwrap(), "websocket");
        let req = map(&[
            ("connection", b"upgrade"),
            ("upgrade", b"websocket"),
            ("upgrade", b"foo/1"),
        ]);
        assert_eq!(is_upgrade_request(&req).unwrap(), "websocket, foo/1");
    }

    #[test]
    fn not_an_upgrade() {
        assert_eq!(is_upgrade_request(&map(&[("upgrade", b"websocket")])), None);
        assert_eq!(
            is_upgrade_request(&map(&[("connection", b"upgrade")])),
            None
        );
        assert_eq!(
            is_upgrade_request(&map(&[
                ("connection", b"upgraded"),
                ("upgrade", b"websocket")
            ])),
            None
        );
        assert_eq!(
            is_upgrade_request(&map(&[("connection", b"\xff"), ("upgrade", b"websocket")])),
            None
        );
        assert_eq!(is_upgrade_request(&HeaderMap::new()), None);
    }
}
