//! Support for the tests of the composed wirefold: the server's helpers (the proxy
//! crate's test support, included by path) and the proxy pair.
#![allow(dead_code)] // each test binary uses a different part of this module
#![allow(
    clippy::expect_used,
    reason = "test support: a failed expectation fails the test"
)]

#[path = "../../../proxy/tests/support/mod.rs"]
mod server;

pub use server::*;

use proxy::Config;

/// A server with the server proxy's end of the link on its main listener.
pub async fn start_link_server(config: proxy::Config) -> proxy::Running {
    link_server::start(config)
        .await
        .expect("server proxy starts")
}

/// A proxy pair on loopback: a server proxy (`--link`, forward, self-signed TLS) and a
/// client proxy linked to it. Browsers use `client.addr` as their HTTP proxy.
pub struct Pair {
    pub server: Proxy,
    pub client: client_proxy::RunningClient,
    pub client_data: tempfile::TempDir,
}

impl Pair {
    pub fn proxy(&self) -> String {
        format!("http://{}", self.client.addr)
    }
}

pub async fn start_pair(
    tweak_server: impl FnOnce(&mut Config),
    tweak_client: impl FnOnce(&mut client_proxy::ClientConfig),
) -> Pair {
    let data = tempfile::tempdir().unwrap();
    let mut config = test_config(data.path());
    config.link.enabled = true;
    // The origins are on loopback.
    config.link.destinations = proxy::destinations::Destinations::Any;
    config.tls.self_signed = true;
    tweak_server(&mut config);
    let running = link_server::start(config)
        .await
        .expect("server proxy starts");
    let server = Proxy { running, data };
    let (client, client_data) = start_client(&server, tweak_client).await;
    Pair {
        server,
        client,
        client_data,
    }
}

/// A client proxy linked to `server`, with a store of its own (empty).
async fn start_client(
    server: &Proxy,
    tweak_client: impl FnOnce(&mut client_proxy::ClientConfig),
) -> (client_proxy::RunningClient, tempfile::TempDir) {
    let client_data = tempfile::tempdir().unwrap();
    let mut client_config = client_proxy::ClientConfig {
        upstream: format!("https://localhost:{}", server.running.addr.port()),
        upstream_connect: Some(server.running.addr),
        upstream_ca: Some(server.data.path().join("self-signed-cert.pem")),
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: "127.0.0.1:0".parse().unwrap(),
        data_dir: client_data.path().to_path_buf(),
        ..Default::default()
    };
    tweak_client(&mut client_config);
    let client = client_proxy::start(client_config)
        .await
        .expect("client proxy starts");
    (client, client_data)
}

impl Pair {
    /// The same server proxy with a new client proxy, which holds nothing yet (the
    /// old one stops): a second browser, or the first one after a fresh start.
    pub async fn with_fresh_client(self) -> Pair {
        let (client, client_data) = start_client(&self.server, |_| {}).await;
        self.client.shutdown().await;
        Pair {
            server: self.server,
            client,
            client_data,
        }
    }
}
