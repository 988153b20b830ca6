//! Which addresses a forward server proxy may fetch from. Its token holders name any
//! URL, so by default the proxy's own host (loopback) and link-local addresses (cloud
//! metadata services) are off limits. Every resolved address is checked when the
//! connection is made, so a name cannot resolve to a forbidden address after a check.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::Name;
use serde::{Deserialize, Serialize};

/// `[link] destinations`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Destinations {
    /// Globally routable addresses only.
    Public,
    /// Also private networks (RFC 1918, shared 100.64/10, IPv6 unique local): an
    /// office's or data centre's own origins. Never loopback, link-local,
    /// unspecified, multicast or broadcast.
    #[default]
    Private,
    /// Anything, loopback included (an origin on the proxy's own host).
    Any,
}

impl Destinations {
    pub fn permits(self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let local = match ip {
            IpAddr::V4(v4) => {
                v4.is_loopback()
                    || v4.is_link_local()
                    || v4.is_unspecified()
                    || v4.is_multicast()
                    || v4.is_broadcast()
                    || v4.octets()[0] == 0
            }
            IpAddr::V6(v6) => {
                v6.is_loopback()
                    || v6.is_unicast_link_local()
                    || v6.is_unspecified()
                    || v6.is_multicast()
            }
        };
        let private = match ip {
            IpAddr::V4(v4) => {
                let [a, b, ..] = v4.octets();
                v4.is_private() || (a == 100 && (64..128).contains(&b))
            }
            IpAddr::V6(v6) => v6.is_unique_local(),
        };
        match self {
            Destinations::Any => true,
            Destinations::Private => !local,
            Destinations::Public => !local && !private,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Destinations::Public => "public",
            Destinations::Private => "private",
            Destinations::Any => "any",
        }
    }

    /// Why `host` (an address literal) may not be fetched from, if it may not.
    pub fn refuse_literal(self, host: &str) -> Option<String> {
        let ip: IpAddr = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .ok()?;
        (!self.permits(ip)).then(|| self.refusal(host))
    }

    fn refusal(self, host: &str) -> String {
        format!(
            "{host} is not a destination this server proxy may reach (link.destinations = \"{}\")",
            self.name()
        )
    }
}

/// Name resolution (the system's, as hyper's own resolver does it) keeping only the
/// addresses `Destinations` permits.
#[derive(Clone, Copy, Debug)]
pub struct Resolver(pub Destinations);

impl tower_service::Service<Name> for Resolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let destinations = self.0;
        Box::pin(async move {
            let host = name.as_str().to_string();
            let lookup = host.clone();
            let found: Vec<SocketAddr> =
                tokio::task::spawn_blocking(move || (lookup.as_str(), 0).to_socket_addrs())
                    .await
                    .map_err(io::Error::other)??
                    .collect();
            let permitted: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|addr| destinations.permits(addr.ip()))
                .collect();
            if permitted.is_empty() && !found.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    destinations.refusal(&host),
                ));
            }
            Ok(permitted.into_iter())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn permitted(d: Destinations, ip: &str) -> bool {
        d.permits(ip.parse().unwrap())
    }

    #[test]
    fn each_policy_draws_its_line() {
        use Destinations::*;
        for ip in [
            "127.0.0.1",
            "::1",
            "169.254.169.254",
            "fe80::1",
            "0.0.0.0",
            "::",
            "224.0.0.1",
            "255.255.255.255",
            "::ffff:127.0.0.1",
        ] {
            assert!(!permitted(Private, ip), "{ip}");
            assert!(!permitted(Public, ip), "{ip}");
            assert!(permitted(Any, ip), "{ip}");
        }
        for ip in [
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.8.1",
            "fd00::1",
        ] {
            assert!(permitted(Private, ip), "{ip}");
            assert!(!permitted(Public, ip), "{ip}");
        }
        for ip in ["93.184.216.34", "2606:2800:220:1::1", "100.128.0.1"] {
            assert!(permitted(Public, ip), "{ip}");
        }
    }

    #[test]
    fn literals_are_refused_with_the_policy_named() {
        let why = Destinations::Private.refuse_literal("127.0.0.1").unwrap();
        assert!(why.contains("link.destinations = \"private\""), "{why}");
        assert!(Destinations::Private.refuse_literal("[::1]").is_some());
        assert!(Destinations::Private.refuse_literal("10.0.0.1").is_none());
        assert!(Destinations::Private
            .refuse_literal("example.com")
            .is_none());
    }

    #[tokio::test]
    async fn names_resolving_only_to_forbidden_addresses_are_refused() {
        use tower_service::Service;
        let name: Name = "localhost".parse().unwrap();
        let err = Resolver(Destinations::Private)
            .call(name.clone())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        let found: Vec<_> = Resolver(Destinations::Any)
            .call(name)
            .await
            .unwrap()
            .collect();
        assert!(found.iter().all(|a| a.ip().is_loopback()) && !found.is_empty());
    }
}
