//! Outbound connections: an http-or-https connector for hyper-util's pooled client
//! (HTTP/1.1, and HTTP/2 by ALPN) and the rustls (ring) client configuration under
//! it, trusting the webpki roots plus an operator's PEM file. The proxy's origin
//! client, the proxy pair's link and `wirefold get` all connect through here.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::dns::GaiResolver;
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// An http-or-https connector (HTTP/1.1, and HTTP/2 by ALPN) trusting the webpki
/// roots plus the PEM certificates in `ca_file`. Errors name the file.
pub fn connector(
    ca_file: Option<&Path>,
    connect_timeout: Duration,
) -> Result<HttpsConnector<HttpConnector>, String> {
    connector_resolving(ca_file, connect_timeout, GaiResolver::new())
}

/// [`connector`] with the names resolved by `resolver` (the proxy's resolver keeps
/// only the addresses it permits).
pub fn connector_resolving<R>(
    ca_file: Option<&Path>,
    connect_timeout: Duration,
    resolver: R,
) -> Result<HttpsConnector<HttpConnector<R>>, String> {
    let tls = tls_client_config(ca_file)?;
    let mut http = HttpConnector::new_with_resolver(resolver);
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_nodelay(true);
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http))
}

/// A rustls (ring) client configuration trusting the webpki roots plus the PEM
/// certificates in `ca_file`. Errors name the file.
pub fn tls_client_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("{}: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
