//! Certificates and rustls server configs (RFC 8446 / RFC 5246 termination via rustls).
//!
//! PEM parsing is rustls-pemfile's; signing keys (RSA, ECDSA P-256/P-384, Ed25519) come from
//! the build's rustls crypto provider ([`crate::tls::options::base_provider`]). A config is built
//! once per (certificate, ALPN set, `tls` options) when the route table is compiled, never per
//! connection; its resumption state comes from [`crate::tls::sessions`].

use crate::tls::options::{base_provider, TlsOptions};
use crate::tls::sessions::Sessions;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
pub use rustls::sign::CertifiedKey;
use rustls::sign::SingleCertAndKey;
use rustls::{RootCertStore, ServerConfig};
use std::sync::Arc;

/// A client-certificate verifier (mTLS) for a rustls server config.
pub type ClientVerifier = Arc<dyn ClientCertVerifier>;

/// Parses a PEM chain (leaf first, then intermediates) and a PEM private key (PKCS#8, PKCS#1 or
/// SEC1) into a rustls [`CertifiedKey`], checking that the key matches the leaf.
///
/// Errors are sentences for a `ConfigError` message ("certChain holds no CERTIFICATE block").
pub fn load_certified_key(chain_pem: &[u8], key_pem: &[u8]) -> Result<Arc<CertifiedKey>, String> {
    let mut rd = chain_pem;
    let certs: Vec<_> = rustls_pemfile::certs(&mut rd)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("certChain is not valid PEM: {e}"))?;
    if certs.is_empty() {
        return Err("certChain holds no CERTIFICATE block (expected PEM text)".into());
    }
    let mut rd = key_pem;
    let key = rustls_pemfile::private_key(&mut rd)
        .map_err(|e| format!("privateKey is not valid PEM: {e}"))?
        .ok_or_else(|| "privateKey holds no PRIVATE KEY block (expected PEM text)".to_string())?;
    let signer = base_provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("privateKey is not a supported RSA/ECDSA/Ed25519 key: {e}"))?;
    let ck = CertifiedKey::new(certs, signer);
    ck.keys_match().map_err(|e| {
        format!("privateKey does not match the first certificate of certChain: {e}")
    })?;
    Ok(Arc::new(ck))
}

/// A client-certificate verifier (`mtls`) over the CA certificates in `ca_pem` (one or more PEM
/// CERTIFICATE blocks), rustls' [`WebPkiClientVerifier`]: `required` refuses a handshake without
/// a client certificate, otherwise one is asked for and, when sent, must verify. Errors are
/// sentences for a `ConfigError` message.
pub fn client_verifier(ca_pem: &[u8], required: bool) -> Result<ClientVerifier, String> {
    let mut rd = ca_pem;
    let certs: Vec<_> = rustls_pemfile::certs(&mut rd)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("is not valid PEM: {e}"))?;
    if certs.is_empty() {
        return Err("holds no CERTIFICATE block (expected PEM text)".into());
    }
    let mut roots = RootCertStore::empty();
    for c in certs {
        roots
            .add(c)
            .map_err(|e| format!("holds a certificate that is not a usable CA: {e}"))?;
    }
    let provider = Arc::new(base_provider());
    let b = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
    let b = if required {
        b
    } else {
        b.allow_unauthenticated()
    };
    b.build()
        .map_err(|e| format!("cannot verify client certificates: {e}"))
}

/// Checks that `der` is a stapleable OCSP response (RFC 6960 §4.2.1): one DER `OCSPResponse`
/// SEQUENCE and nothing after it, `responseStatus` successful (0), `responseBytes` present. Its
/// content (signature, validity, which certificate it is about) is not verified: the client
/// does that, as with HAProxy's `.ocsp` files. Errors are sentences for a `ConfigError`.
pub fn check_ocsp_response(der: &[u8]) -> Result<(), String> {
    use x509_parser::der_parser::asn1_rs::{Any, Class, Enumerated, FromDer, Sequence};
    if der.is_empty() {
        return Err("is empty (expected a DER OCSPResponse)".into());
    }
    let not_ocsp = |e: String| format!("is not a DER OCSPResponse (RFC 6960 §4.2.1): {e}");
    let (rest, seq) = Sequence::from_der(der).map_err(|e| not_ocsp(e.to_string()))?;
    if !rest.is_empty() {
        return Err(not_ocsp(format!(
            "{} bytes follow the response",
            rest.len()
        )));
    }
    let (rest, status) =
        Enumerated::from_der(&seq.content).map_err(|e| not_ocsp(format!("responseStatus: {e}")))?;
    const STATUS: [&str; 7] = [
        "successful",
        "malformedRequest",
        "internalError",
        "tryLater",
        "unknown",
        "sigRequired",
        "unauthorized",
    ];
    if status.0 != 0 {
        let name = STATUS.get(status.0 as usize).copied().unwrap_or("unknown");
        return Err(format!(
            "has responseStatus {} ({name}), not successful (0): nothing to staple",
            status.0
        ));
    }
    let (_, bytes) = Any::from_der(rest).map_err(|_| not_ocsp("no responseBytes".to_string()))?;
    if bytes.class() != Class::ContextSpecific || bytes.tag().0 != 0 {
        return Err(not_ocsp("no responseBytes ([0])".to_string()));
    }
    Ok(())
}

/// The subject common name of a DER certificate (`None` when it has none or does not parse).
pub fn subject_cn(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// A rustls server config serving `cert`, offering the ALPN protocol ids `alpn` in preference
/// order (a client offering none of them fails the handshake, RFC 7301 §3.2; one without ALPN
/// gets none), asking for client certificates with `client_auth` (mTLS) when given, with the
/// versions, suites and groups of `opts` and the resumption state `sessions`.
///
/// Errors when `opts` leave no handshake possible; the config layer refuses such options first
/// ([`crate::config::tls`]), so a validated config never gets one.
pub fn server_config(
    cert: Arc<CertifiedKey>,
    alpn: Vec<Vec<u8>>,
    client_auth: Option<ClientVerifier>,
    opts: &TlsOptions,
    sessions: &Sessions,
) -> Result<Arc<ServerConfig>, String> {
    let b = ServerConfig::builder_with_provider(opts.provider()?)
        .with_protocol_versions(&opts.rustls_versions())
        .map_err(|e| e.to_string())?;
    let b = match client_auth {
        Some(v) => b.with_client_cert_verifier(v),
        None => b.with_no_client_auth(),
    };
    let mut cfg = b.with_cert_resolver(Arc::new(SingleCertAndKey::from(cert)));
    cfg.alpn_protocols = alpn;
    cfg.ignore_client_order = opts.prefer_server_cipher_order;
    cfg.session_storage = sessions.storage.clone();
    cfg.ticketer = sessions.ticketer.clone();
    if !opts.session_tickets && opts.session_cache_size == 0 {
        // Nothing to resume with: no TLS 1.3 NewSessionTicket messages at all.
        cfg.send_tls13_tickets = 0;
    }
    Ok(Arc::new(cfg))
}

/// Generates a self-signed certificate for `hosts` (DNS names or IP literals): returns
/// `(certificate PEM, PKCS#8 private key PEM)`, ECDSA P-256. For demos and tests.
pub fn self_signed(hosts: &[String]) -> Result<(String, String), String> {
    let ck = rcgen::generate_simple_self_signed(hosts.to_vec()).map_err(|e| e.to_string())?;
    Ok((ck.cert.pem(), ck.key_pair.serialize_pem()))
}
