//! Unit tests of the parent module.

use super::*;

fn complete(buf: &[u8]) -> Request {
    match parse(buf) {
        Parsed::Complete(r) => *r,
        other => panic!("not complete: {other:?}"),
    }
}

#[test]
fn hosts() {
    assert_eq!(strip_port("Example.com:8080"), Some("Example.com"));
    assert_eq!(strip_port("example.com"), Some("example.com"));
    assert_eq!(strip_port("example.com:"), Some("example.com"));
    assert_eq!(strip_port("[2001:db8::1]:80"), Some("[2001:db8::1]"));
    assert_eq!(strip_port("[::1]"), Some("[::1]"));
    assert_eq!(strip_port("a b"), None);
    assert_eq!(strip_port("a/b"), None);
    assert_eq!(strip_port("a:80x"), None);
    assert_eq!(strip_port(""), None);
    assert_eq!(strip_port("[::1]x"), None);
    // Empty labels are not host names; one trailing dot is.
    assert_eq!(strip_port(".."), None);
    assert_eq!(strip_port(".a"), None);
    assert_eq!(strip_port("a..b:80"), None);
    assert_eq!(strip_port("a.:80"), Some("a."));
}

#[test]
fn attack_shapes() {
    let host = |b: &[u8]| complete(b).host;
    // Routed and redirected as nginx's `$host`: lower case, no trailing dot.
    assert_eq!(
        host(b"GET / HTTP/1.1\r\nHost: ACME.Test.:8080\r\n\r\n"),
        HostField::Name("acme.test".into())
    );
    // absolute-form: its authority must be the Host.
    assert_eq!(
        host(b"GET http://evil.test/p HTTP/1.1\r\nHost: a.test\r\n\r\n"),
        HostField::Invalid
    );
    assert_eq!(
        host(b"GET http://u@a.test/p HTTP/1.1\r\nHost: a.test\r\n\r\n"),
        HostField::Invalid
    );
    assert_eq!(
        host(b"GET http://A.test:80?q HTTP/1.1\r\nHost: a.test\r\n\r\n"),
        HostField::Name("a.test".into())
    );
    // Content-Length that two parsers could read differently: 400.
    for bad in [
        &b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: abc\r\n\r\n"[..],
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
    ] {
        assert_eq!(
            parse(bad),
            Parsed::Invalid,
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    let same = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n";
    assert!(!complete(same).keep_alive);
    assert!(complete(b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 00\r\n\r\n").keep_alive);
    // The challenge path carries one bodiless GET of a base64url token, nothing else.
    let acme = |b: &[u8]| complete(b).acme;
    assert!(acme(
        b"GET /.well-known/acme-challenge/aZ09-_ HTTP/1.1\r\nHost: a\r\n\r\n"
    ));
    for path in ["../../admin", "%2e%2e/admin", "tok?x=1", "tok/more", "t.k"] {
        let req = format!("GET {ACME_PREFIX}{path} HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(!acme(req.as_bytes()), "{path}");
    }
    assert!(!acme(
        b"GET /.well-known/acme-challenge/tok HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n"
    ));
    // The path alone: a query or fragment never holds the prefix, nor follows the token.
    for target in [
        "http://a?/.well-known/acme-challenge/t",
        "http://a#/.well-known/acme-challenge/t",
        "http://a/x?/.well-known/acme-challenge/t",
        "/x?/.well-known/acme-challenge/t",
        "/.well-known/acme-challenge/t?",
        "/.well-known/acme-challenge/t#f",
    ] {
        let req = format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(!acme(req.as_bytes()), "{target}");
    }
    assert_eq!(
        complete(b"GET http://a?/.well-known/acme-challenge/t HTTP/1.1\r\nHost: a\r\n\r\n").path,
        "/?/.well-known/acme-challenge/t"
    );
    // absolute-form: the upstream gets the path in origin-form.
    let r = complete(b"GET http://a:80/.well-known/acme-challenge/t HTTP/1.1\r\nHost: a\r\n\r\n");
    assert!(r.acme);
    assert_eq!(
        r.upstream_head,
        b"GET /.well-known/acme-challenge/t HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    );
}

#[test]
fn the_challenge_head_carries_no_client_forwarded_or_hop_by_hop_fields() {
    let r = complete(
        b"GET /.well-known/acme-challenge/t HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 6.6.6.6\r\n\
X_Forwarded_For: 6.6.6.6\r\nx-forwarded_proto: http\r\nX-JA3: s\r\nX_JA4: s\r\nConnection: keep-alive, X-Forwarded-For\r\n\
Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nKeep-Alive: timeout=5\r\nAccept: */*\r\n\r\n",
    );
    assert!(r.acme);
    assert_eq!(
        String::from_utf8_lossy(&r.upstream_head),
        "GET /.well-known/acme-challenge/t HTTP/1.1\r\nHost: a\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
}

#[test]
fn requests() {
    let r = complete(b"GET /a?b=1 HTTP/1.1\r\nHost: www.example.com:80\r\n\r\nGET");
    assert_eq!(r.len, 49);
    assert_eq!(r.host, HostField::Name("www.example.com".into()));
    assert_eq!(r.path, "/a?b=1");
    assert!(!r.acme && r.keep_alive);
    let r = complete(b"GET /.well-known/acme-challenge/tok HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\n");
    assert!(r.acme);
    assert_eq!(
        r.upstream_head,
        b"GET /.well-known/acme-challenge/tok HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    );
    assert!(!complete(b"GET /.well-known/acme-challenge/ HTTP/1.1\r\nHost: a\r\n\r\n").acme);
    assert!(
        !complete(
            b"POST /.well-known/acme-challenge/t HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"
        )
        .acme
    );
    assert_eq!(complete(b"GET / HTTP/1.1\r\n\r\n").host, HostField::Missing);
    assert_eq!(
        complete(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n").host,
        HostField::Invalid
    );
    assert!(!complete(b"GET / HTTP/1.0\r\nHost: a\r\n\r\n").keep_alive);
    assert!(complete(b"GET / HTTP/1.0\r\nHost: a\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
    assert!(!complete(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: x, close\r\n\r\n").keep_alive);
    assert!(!complete(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc").keep_alive);
    assert_eq!(
        complete(b"GET http://a/p?q HTTP/1.1\r\nHost: a\r\n\r\n").path,
        "/p?q"
    );
    assert_eq!(parse(b"GET / HTTP/1.1\r\nHost"), Parsed::Partial);
    assert_eq!(parse(b"\x16\x03\x01\x00"), Parsed::Invalid);
    let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
    big.resize(MAX_HEAD_BYTES, b'a');
    assert_eq!(parse(&big), Parsed::TooLarge);
}

#[test]
fn responses() {
    assert_eq!(
        response(301, Some("https://a/x"), true),
        b"HTTP/1.1 301 Moved Permanently\r\nLocation: https://a/x\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n"
    );
    assert_eq!(
        response(404, None, false),
        b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 14\r\nConnection: close\r\n\r\n404 Not Found\n"
    );
}
