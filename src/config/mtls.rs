//! `mtls: { clientCaCert, requireClientCert }` on listeners and routes (docs/proxy.md: mTLS;
//! Symphony-compatible): client certificates verified against the given CAs by rustls'
//! `WebPkiClientVerifier`. `requireClientCert` defaults to true on a listener and false on a
//! route (a route's `mtls` replaces its listener's for that route).

use super::error::Issues;
use super::value::{self as v, field, join};
use crate::tls::certs::{client_verifier, ClientVerifier};
use serde_json::Value;

/// A validated `mtls` object.
#[derive(Debug, Clone)]
pub struct Mtls {
    /// The verifier built over `clientCaCert`.
    pub verifier: ClientVerifier,
    /// `requireClientCert`: a handshake without a client certificate fails.
    pub required: bool,
    /// SHA-256 of the CA PEM and `required`: which sessions may resume under this policy
    /// ([`crate::tls::sessions::SessionKey`]).
    pub digest: [u8; 32],
}

/// Parses `mtls` at `path`; `required_default` is true for listeners, false for routes.
pub(crate) fn parse_mtls(
    val: &Value,
    path: &str,
    required_default: bool,
    issues: &mut Issues,
) -> Option<Mtls> {
    let mut build = Issues::default();
    let m = parse_mtls_split(val, path, required_default, issues, &mut build);
    issues.0.extend(build.0);
    m
}

/// [`parse_mtls`] with a CA that does not load (not PEM, no certificate, not a usable CA) in
/// `build` (a route's build failure, docs/proxy.md: Route isolation) and the field's own problems
/// in `issues`.
pub(crate) fn parse_mtls_split(
    val: &Value,
    path: &str,
    required_default: bool,
    issues: &mut Issues,
    build: &mut Issues,
) -> Option<Mtls> {
    let obj = v::object(val, path, issues)?;
    v::reject_unknown(obj, &["clientCaCert", "requireClientCert"], path, issues);
    let required = field(obj, "requireClientCert")
        .and_then(|b| v::boolean(b, &join(path, "requireClientCert"), issues))
        .unwrap_or(required_default);
    let ca_path = join(path, "clientCaCert");
    let Some(ca) = field(obj, "clientCaCert") else {
        issues.push(ca_path, "is required (PEM CA certificates)");
        return None;
    };
    let pem = v::pem_bytes(ca, &ca_path, issues)?;
    match client_verifier(&pem, required) {
        Ok(verifier) => {
            use sha2::{Digest, Sha256};
            let digest = Sha256::new()
                .chain_update(&pem)
                .chain_update([u8::from(required)])
                .finalize()
                .into();
            Some(Mtls {
                verifier,
                required,
                digest,
            })
        }
        Err(e) => {
            build.push(ca_path, e);
            None
        }
    }
}
