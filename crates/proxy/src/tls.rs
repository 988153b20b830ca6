//! TLS for the listener: a configured certificate, or one generated for local use
//! (written to `<data dir>/self-signed-cert.pem` so that clients, such as a client
//! proxy, can trust it). ALPN offers h2 and http/1.1.

use std::sync::Arc;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::TlsConfig;

/// Where a generated certificate is published, under the data directory.
pub const SELF_SIGNED_CERT_FILE: &str = "self-signed-cert.pem";

pub fn acceptor(cfg: &TlsConfig, data_dir: &std::path::Path) -> Result<TlsAcceptor, String> {
    let (chain, key) = if cfg.self_signed {
        let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let generated = rcgen::generate_simple_self_signed(names)
            .map_err(|e| format!("generating a certificate: {e}"))?;
        let published = data_dir.join(SELF_SIGNED_CERT_FILE);
        std::fs::create_dir_all(data_dir)
            .and_then(|()| std::fs::write(&published, generated.cert.pem()))
            .map_err(|e| format!("writing {}: {e}", published.display()))?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            generated.signing_key.serialize_der(),
        ));
        (vec![generated.cert.der().clone()], key)
    } else {
        let (cert_path, key_path) = cfg
            .cert
            .as_ref()
            .zip(cfg.key.as_ref())
            .ok_or("tls.cert and tls.key are both needed")?;
        let read =
            |p: &std::path::Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
        let cert_pem = read(cert_path)?;
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{}: {e}", cert_path.display()))?;
        if chain.is_empty() {
            return Err(format!("{}: no PEM certificate found", cert_path.display()));
        }
        let key_pem = read(key_path)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
            pem::Error::NoItemsFound => format!("{}: no PEM private key found", key_path.display()),
            e => format!("{}: {e}", key_path.display()),
        })?;
        (chain, key)
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("certificate and key do not fit: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
