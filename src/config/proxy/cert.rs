//! A `{ certChain, privateKey }` field (a listener's `defaultCert`, a route's `cert`), parsed
//! into a rustls key once.

use crate::config::error::Issues;
use crate::config::value::{self as v, field, join};
use crate::tls::certs::{load_certified_key, CertifiedKey};
use serde_json::Value;
use std::sync::Arc;

/// Parses a `{ certChain, privateKey }` object: the field's own problems go to `issues`; a chain
/// or key that does not load, or a key that does not match the leaf, goes to `build` (a route's
/// build failure, docs/proxy.md: Route isolation; a listener passes its `issues` twice over).
pub(super) fn parse_cert(
    v: &Value,
    path: &str,
    issues: &mut Issues,
    build: &mut Issues,
) -> Option<Arc<CertifiedKey>> {
    let obj = v::object(v, path, issues)?;
    v::reject_unknown(obj, &["certChain", "privateKey"], path, issues);
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
    let (chain, key) = (chain?, key?);
    match load_certified_key(&chain, &key) {
        Ok(ck) => Some(ck),
        Err(e) => {
            build.push(path, e);
            None
        }
    }
}
