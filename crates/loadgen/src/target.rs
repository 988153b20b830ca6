//! What every request of a run asks: the server's address, the request target, and
//! the header fields (`Host` and the `-H` ones), parsed once and checked.

use std::net::{SocketAddr, ToSocketAddrs};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, HOST};
use http::{Request, Uri};
use http_body_util::Empty;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TargetError {
    #[error("URL {0:?} is not an http:// URL with a host (this loader speaks HTTP/1.1 over TCP, no TLS)")]
    Url(String),
    #[error("path {0:?} is not an origin-form request target (it starts with /)")]
    Path(String),
    #[error("address {0:?} is not HOST:PORT")]
    Address(String),
    #[error("{0:?} resolves to no address")]
    Unresolved(String),
    #[error("header {0:?} is not \"name: value\" with a valid field name and value")]
    Header(String),
}

/// A server and the one request a run sends it, over and over.
#[derive(Clone, Debug)]
pub struct Target {
    addr: SocketAddr,
    path: Uri,
    headers: HeaderMap,
}

impl Target {
    /// From `http://host[:port]/path?query`.
    pub fn from_url(url: &str, headers: &[String]) -> Result<Self, TargetError> {
        let bad = || TargetError::Url(url.to_string());
        let uri: Uri = url.parse().map_err(|_| bad())?;
        if uri.scheme_str() != Some("http") {
            return Err(bad());
        }
        let authority = uri.authority().ok_or_else(bad)?;
        let port = authority.port_u16().unwrap_or(80);
        let addr = resolve(authority.host(), port, url)?;
        let path = uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse()
            .map_err(|_| bad())?;
        Self::new(addr, authority.as_str(), path, headers)
    }

    /// From `host:port` and an origin-form path (`/page.html`).
    pub fn from_addr(addr: &str, path: &str, headers: &[String]) -> Result<Self, TargetError> {
        let bad = || TargetError::Address(addr.to_string());
        let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(bad());
        }
        let resolved = resolve(host, port, addr)?;
        if !path.starts_with('/') {
            return Err(TargetError::Path(path.to_string()));
        }
        let path = path
            .parse()
            .map_err(|_| TargetError::Path(path.to_string()))?;
        Self::new(resolved, addr, path, headers)
    }

    fn new(
        addr: SocketAddr,
        authority: &str,
        path: Uri,
        headers: &[String],
    ) -> Result<Self, TargetError> {
        let mut fields = HeaderMap::new();
        let host =
            HeaderValue::from_str(authority).map_err(|_| TargetError::Url(authority.into()))?;
        fields.insert(HOST, host);
        for line in headers {
            let (name, value) = parse_header(line)?;
            if name == HOST {
                fields.insert(name, value);
            } else {
                fields.append(name, value);
            }
        }
        Ok(Target {
            addr,
            path,
            headers: fields,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A GET of the target with its fields.
    pub fn request(&self) -> Request<Empty<Bytes>> {
        self.request_to(self.path.clone())
    }

    /// A GET of another origin-form `path` on the same server, with the target's fields.
    pub fn request_to(&self, path: Uri) -> Request<Empty<Bytes>> {
        let mut request = Request::new(Empty::new());
        *request.uri_mut() = path;
        *request.headers_mut() = self.headers.clone();
        request
    }
}

fn resolve(host: &str, port: u16, input: &str) -> Result<SocketAddr, TargetError> {
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| TargetError::Unresolved(input.to_string()))
}

/// `name: value`, as curl and wrk take `-H`.
fn parse_header(line: &str) -> Result<(HeaderName, HeaderValue), TargetError> {
    let bad = || TargetError::Header(line.to_string());
    let (name, value) = line.split_once(':').ok_or_else(bad)?;
    let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| bad())?;
    let value = HeaderValue::from_str(value.trim()).map_err(|_| bad())?;
    Ok((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_gives_address_path_and_host() {
        let t = Target::from_url(
            "http://127.0.0.1:8080/page.html?x=1",
            &["Accept-Encoding: gzip, br".into()],
        )
        .unwrap();
        assert_eq!(t.addr(), "127.0.0.1:8080".parse().unwrap());
        let r = t.request();
        assert_eq!(r.uri(), "/page.html?x=1");
        assert_eq!(r.headers()[HOST], "127.0.0.1:8080");
        assert_eq!(r.headers()["accept-encoding"], "gzip, br");
        let bare = Target::from_url("http://127.0.0.1", &[]).unwrap();
        assert_eq!(bare.addr().port(), 80);
        assert_eq!(bare.request().uri(), "/");
    }

    #[test]
    fn an_address_and_path_give_the_same() {
        let t = Target::from_addr("127.0.0.1:9", "/page.html", &["host: example".into()]).unwrap();
        assert_eq!(t.addr(), "127.0.0.1:9".parse().unwrap());
        assert_eq!(t.request().headers()[HOST], "example");
        assert_eq!(t.request().headers().get_all(HOST).iter().count(), 1);
        let v6 = Target::from_addr("[::1]:9", "/", &[]).unwrap();
        assert_eq!(v6.addr(), "[::1]:9".parse().unwrap());
    }

    #[test]
    fn bad_input_is_named() {
        for url in [
            "https://127.0.0.1/",
            "127.0.0.1:80/x",
            "http:///x",
            "ftp://h/",
        ] {
            assert_eq!(
                Target::from_url(url, &[]).unwrap_err(),
                TargetError::Url(url.into())
            );
        }
        assert_eq!(
            Target::from_addr("127.0.0.1", "/", &[]).unwrap_err(),
            TargetError::Address("127.0.0.1".into())
        );
        assert_eq!(
            Target::from_addr("127.0.0.1:99999", "/", &[]).unwrap_err(),
            TargetError::Address("127.0.0.1:99999".into())
        );
        assert_eq!(
            Target::from_addr("127.0.0.1:80", "page.html", &[]).unwrap_err(),
            TargetError::Path("page.html".into())
        );
        for header in ["no colon", "bad name: x", ": empty name", "x: line\nbreak"] {
            assert_eq!(
                Target::from_addr("127.0.0.1:80", "/", &[header.into()]).unwrap_err(),
                TargetError::Header(header.into())
            );
        }
    }
}
