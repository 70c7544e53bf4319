//! Byte helpers for hand-built ClientHellos (TLS length-prefixed vectors, RFC 8446 §3.4).

#![allow(dead_code)]

/// Big-endian u16 values back to back.
pub(crate) fn u16_vec(values: &[u16]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_be_bytes()).collect()
}

/// `len(2) || body`.
pub(crate) fn with_u16_len(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// `len(1) || body`.
pub(crate) fn with_u8_len(body: &[u8]) -> Vec<u8> {
    let mut out = vec![body.len() as u8];
    out.extend_from_slice(body);
    out
}
