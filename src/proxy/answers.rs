//! The HTTP/1.1 responses Rampart writes itself instead of the upstream's: `429 Too Many
//! Requests` for a request over the client's `requestLimit`, `503 Service Unavailable` for a
//! request the upstream has no room for. Each is a whole response that ends the connection
//! (`Connection: close`), sent by the request follower ([`super::forward_headers::HeaderWriter`])
//! once the responses to the client's earlier requests have passed.
//!
//! The 429 carries the rate-limit fields of the IETF draft "RateLimit header fields for HTTP"
//! (draft-ietf-httpapi-ratelimit-headers, structured-field syntax, RFC 8941): `RateLimit-Policy:
//! "rampart";q=<quota>;w=<window s>` (the GCRA as a quota of `burst` requests per the `burst /
//! rate` seconds the limit needs to grant them again) and `RateLimit: "rampart";r=0;t=<s>` (none
//! left, `t` seconds until the next request conforms), beside `Retry-After` (RFC 9110 §10.2.3).

use crate::clock::NS_PER_SEC;

/// Body of the 429 answer.
const BODY_429: &str = "429 Too Many Requests\n";
/// Body of the 503 answer.
const BODY_503: &str = "503 Service Unavailable\n";

/// Whole seconds in `ns`, rounded up, at least 1 (`Retry-After` and `t` are integers; 0 would
/// invite an immediate retry that is refused again).
pub(crate) fn ceil_secs(ns: u64) -> u64 {
    ns.div_ceil(NS_PER_SEC).max(1)
}

/// The `w` of `RateLimit-Policy` for `burst` requests at `per_second`: the seconds the limit
/// takes to grant a whole burst again, rounded up, at least 1 (the advertised quota per window
/// is then never above the real rate).
pub(crate) fn window_secs(per_second: f64, burst: u64) -> u64 {
    let w = (burst as f64 / per_second).ceil();
    if w.is_finite() && w >= 1.0 {
        (w as u64).min(u64::from(u32::MAX))
    } else {
        1
    }
}

/// The `429 Too Many Requests` answer to a request over a budget of `burst` requests at
/// `per_second` (> 0), conforming again in `retry_after_ns`: `Retry-After` and `RateLimit`'s `t`
/// are those ns in seconds rounded up (at least 1).
pub(crate) fn too_many_requests(retry_after_ns: u64, per_second: f64, burst: u64) -> Vec<u8> {
    let s = ceil_secs(retry_after_ns);
    let w = window_secs(per_second, burst);
    format!(
        "HTTP/1.1 429 Too Many Requests\r\n\
Content-Type: text/plain\r\n\
Content-Length: {}\r\n\
Connection: close\r\n\
Retry-After: {s}\r\n\
RateLimit-Policy: \"rampart\";q={burst};w={w}\r\n\
RateLimit: \"rampart\";r=0;t={s}\r\n\
\r\n{BODY_429}",
        BODY_429.len()
    )
    .into_bytes()
}

/// The `503 Service Unavailable` answer to a request the upstream has no room for, with
/// `Retry-After: <retry_after_s>` (at least 1).
pub(crate) fn service_unavailable(retry_after_s: u32) -> Vec<u8> {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\n\
Content-Type: text/plain\r\n\
Content-Length: {}\r\n\
Connection: close\r\n\
Retry-After: {}\r\n\
\r\n{BODY_503}",
        BODY_503.len(),
        retry_after_s.max(1)
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_429_carries_the_draft_s_fields_exactly() {
        // 10 requests/s, burst 20: a quota of 20 per 2 s; 1.2 s to wait → 2 s.
        let got = too_many_requests(1_200_000_000, 10.0, 20);
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain\r\n\
Content-Length: 22\r\nConnection: close\r\nRetry-After: 2\r\n\
RateLimit-Policy: \"rampart\";q=20;w=2\r\nRateLimit: \"rampart\";r=0;t=2\r\n\r\n\
429 Too Many Requests\n"
        );
        let mut fields = [httparse::EMPTY_HEADER; 16];
        let mut res = httparse::Response::new(&mut fields);
        let bytes = too_many_requests(1, 0.5, 1);
        let len = match res.parse(&bytes).unwrap() {
            httparse::Status::Complete(n) => n,
            httparse::Status::Partial => panic!("partial"),
        };
        assert_eq!(res.code, Some(429));
        assert_eq!(bytes.len() - len, BODY_429.len());
    }

    #[test]
    fn seconds_round_up_and_never_reach_zero() {
        assert_eq!(ceil_secs(0), 1);
        assert_eq!(ceil_secs(1), 1);
        assert_eq!(ceil_secs(NS_PER_SEC), 1);
        assert_eq!(ceil_secs(NS_PER_SEC + 1), 2);
        assert_eq!(window_secs(10.0, 5), 1);
        assert_eq!(window_secs(3.0, 5), 2);
        assert_eq!(window_secs(0.5, 3), 6);
    }

    #[test]
    fn the_503_has_a_retry_after() {
        let got = String::from_utf8(service_unavailable(0)).unwrap();
        assert_eq!(
            got,
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n\
Content-Length: 24\r\nConnection: close\r\nRetry-After: 1\r\n\r\n503 Service Unavailable\n"
        );
    }
}
