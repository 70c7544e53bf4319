//! A `{ certChain, privateKey, ocspResponse? }` field (a listener's `defaultCert`, a route's
//! `cert`), parsed into a rustls key once; `ocspResponse` (DER, a Buffer) is stapled to every
//! full handshake serving that certificate (RFC 6066 §8 `status_request`, TLS 1.3 RFC 8446
//! §4.4.2.1).

use crate::config::error::Issues;
use crate::config::value::{self as v, field, join};
use crate::tls::certs::{check_ocsp_response, load_certified_key, CertifiedKey};
use serde_json::Value;
use std::sync::Arc;

/// Parses a `{ certChain, privateKey, ocspResponse? }` object: the field's own problems (an
/// `ocspResponse` that is not a successful DER OCSPResponse included) go to `issues`; a chain or
/// key that does not load, or a key that does not match the leaf, goes to `build` (a route's
/// build failure, docs/proxy.md: Route isolation; a listener passes its `issues` twice over).
pub(super) fn parse_cert(
    v: &Value,
    path: &str,
    issues: &mut Issues,
    build: &mut Issues,
) -> Option<Arc<CertifiedKey>> {
    let obj = v::object(v, path, issues)?;
    v::reject_unknown(
        obj,
        &["certChain", "privateKey", "ocspResponse"],
        path,
        issues,
    );
    let chain = match field(obj, "certChain") {
        Some(c) => v::pem_bytes(c, &join(path, "certChain"), issues),
        None => {
            issues.push(join(path, "certChain"), "is required");
            None
        }
    };
    let key = match field(obj, "privateKey") {
        Some(k) => v::pem_bytes(k, &join(path, "privateKey"), issues),
        None => {
            issues.push(join(path, "privateKey"), "is required");
            None
        }
    };
    let ocsp = field(obj, "ocspResponse").and_then(|o| {
        let p = join(path, "ocspResponse");
        let der = v::buffer_bytes(o, &p, issues)?;
        check_ocsp_response(&der)
            .map_err(|e| issues.push(&p, e))
            .ok()
            .map(|()| der)
    });
    if field(obj, "ocspResponse").is_some() && ocsp.is_none() {
        return None;
    }
    let (chain, key) = (chain?, key?);
    match load_certified_key(&chain, &key) {
        Ok(ck) if ocsp.is_some() => {
            let mut ck = Arc::unwrap_or_clone(ck);
            ck.ocsp = ocsp;
            Some(Arc::new(ck))
        }
        Ok(ck) => Some(ck),
        Err(e) => {
            build.push(path, e);
            None
        }
    }
}
