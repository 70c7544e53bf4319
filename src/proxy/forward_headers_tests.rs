//! Unit tests of the parent module.

use super::*;
use crate::config::proxy::ForwardFingerprint;
use std::io;
use std::sync::atomic::Ordering;

const INSERT: &[u8] = b"X-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\n";

/// A rewriter inserting [`INSERT`] with the default tunnels (WebSocket, no `CONNECT`).
fn rewriter() -> Rewriter {
    Rewriter::new(INSERT.to_vec(), Tunnels::default())
}

/// Tunnels allowing `upgrade` and `CONNECT` as `connect` says.
fn tunnels(upgrade: &[&str], connect: bool) -> Tunnels {
    Tunnels {
        upgrade: upgrade.iter().map(|u| u.to_string()).collect(),
        connect,
    }
}

/// Feeds `input` in pieces of `cut` bytes (0: whole), writing everything the way
/// [`HeaderWriter`] does; an upgrade is granted.
fn run(input: &[u8], cut: usize) -> Result<Vec<u8>, Refused> {
    run_answered(input, cut, true)
}

/// [`run`], an upgrade answered with `granted`.
fn run_answered(input: &[u8], cut: usize, granted: bool) -> Result<Vec<u8>, Refused> {
    run_with(rewriter(), input, cut, granted)
}

/// [`run_answered`] through `rw`.
fn run_with(mut rw: Rewriter, input: &[u8], cut: usize, granted: bool) -> Result<Vec<u8>, Refused> {
    let mut out = Vec::new();
    let size = if cut == 0 { input.len().max(1) } else { cut };
    for piece in input.chunks(size) {
        let mut at = 0;
        while at < piece.len() {
            match rw.next(&piece[at..])? {
                Step::Pass(n) => {
                    // Forward at most 3 bytes at a time: partial writes are reported.
                    let k = n.min(3);
                    out.extend_from_slice(&piece[at..at + k]);
                    rw.passed(k);
                    at += k;
                }
                Step::Held(n) => at += n,
                Step::Emit(n) => {
                    out.extend(rw.take_out());
                    at += n;
                }
                Step::Wait => rw.answered(granted),
            }
        }
    }
    Ok(out)
}

fn every_cut(input: &[u8], want: &[u8]) {
    for cut in 0..=input.len() {
        let got = run(input, cut).unwrap_or_else(|e| panic!("cut {cut}: {e:?}"));
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want),
            "cut {cut}"
        );
    }
}

fn refused(input: &[u8]) -> Refused {
    let r = run(input, 0).expect_err("refused");
    for cut in 1..input.len() {
        assert_eq!(run(input, cut), Err(r), "cut {cut}");
    }
    r
}

#[test]
fn header_lines_follow_the_route() {
    let ip: IpAddr = "2001:db8::1".parse().unwrap();
    let both = ForwardFingerprint {
        ja3: true,
        ja4: true,
    };
    let all = ForwardHeaders {
        forwarded_for: true,
        fingerprint: both,
    };
    assert_eq!(
        header_lines(all, ip, "abc", "t13d"),
        b"X-Forwarded-For: 2001:db8::1\r\nX-Forwarded-Proto: https\r\nX-JA3: abc\r\nX-JA4: t13d\r\n"
    );
    let ja4 = ForwardHeaders {
        forwarded_for: false,
        fingerprint: ForwardFingerprint {
            ja3: false,
            ja4: true,
        },
    };
    assert_eq!(header_lines(ja4, ip, "abc", "t13d"), b"X-JA4: t13d\r\n");
}

#[test]
fn spoofed_copies_are_removed_in_any_case_and_pipelined_requests_each_rewritten() {
    let input = b"GET /a HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 6.6.6.6\r\nx-ja3: fake\r\n\r\n\
GET /b HTTP/1.1\r\nX-FORWARDED-PROTO: http\r\nHost: a\r\nx-Ja4: fake\r\nX-Forwarded-Forx: kept\r\n\r\n\
\r\nGET /c HTTP/1.0\nHost: a\n\n";
    let want = b"GET /a HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\n\r\n\
GET /b HTTP/1.1\r\nHost: a\r\nX-Forwarded-Forx: kept\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\n\r\n\
GET /c HTTP/1.0\nHost: a\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\n\n";
    every_cut(input, want);
}

#[test]
fn content_length_bodies_pass_byte_exact_at_every_split() {
    let input = b"POST /u HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nX-JA3: body\
PUT /v HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n\
POST /w HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nGET";
    let want = b"POST /u HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\n\r\nX-JA3: body\
PUT /v HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 0\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\n\r\n\
POST /w HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\n\r\nGET";
    every_cut(input, want);
}

#[test]
fn chunked_bodies_with_extensions_and_trailers_pass_byte_exact() {
    // Byte-exact but for a client copy of a forwarded field in the trailer section (see
    // forwarded_fields_in_a_chunked_trailer_section_are_removed).
    let body = b"5;name=\"v\";x\r\nhello\r\nA\r\n0123456789\r\n0;last\r\nChecksum: 1\r\n\r\n";
    let mut input = b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n".to_vec();
    input.extend_from_slice(&body[..body.len() - 15]);
    input.extend_from_slice(b"X-Forwarded-For: t\r\n");
    input.extend_from_slice(&body[body.len() - 15..]);
    input.extend_from_slice(
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n",
    );
    let mut want = b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked\r\n".to_vec();
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\n");
    want.extend_from_slice(body);
    want.extend_from_slice(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n");
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\n0\r\n\r\nGET / HTTP/1.1\r\n");
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\n");
    every_cut(&input, &want);
}

#[test]
fn upgrade_and_connect_switch_to_plain_copy() {
    let input = b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\r\n\x81\x05GET / HTTP/1.1\r\nX-JA3: raw\r\n\r\n";
    let mut want =
        b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n".to_vec();
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\n\x81\x05GET / HTTP/1.1\r\nX-JA3: raw\r\n\r\n");
    every_cut(input, &want);
    // `CONNECT`, on a route whose tunnels allow it.
    let input = b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n\x16\x03\x01";
    let mut want = b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n".to_vec();
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\n\x16\x03\x01");
    for cut in 0..=input.len() {
        let rw = Rewriter::new(INSERT.to_vec(), tunnels(&[], true));
        assert_eq!(run_with(rw, input, cut, true).unwrap(), want, "cut {cut}");
    }
    // An upgrade the upstream declined: the next request is rewritten.
    let input = b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\nGET / HTTP/1.1\r\nX-JA3: x\r\n\r\n";
    let mut want = b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n".to_vec();
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\nGET / HTTP/1.1\r\n");
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\n");
    for cut in 0..=input.len() {
        assert_eq!(run_answered(input, cut, false).unwrap(), want, "cut {cut}");
    }
    // `Upgrade` without `Connection: upgrade` is no upgrade: it is removed, and the next
    // request is rewritten.
    let input = b"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\nGET / HTTP/1.1\r\nX-JA3: x\r\n\r\n";
    let mut want = b"GET / HTTP/1.1\r\n".to_vec();
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\nGET / HTTP/1.1\r\n");
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\n");
    every_cut(input, &want);
}

#[test]
fn smuggling_shapes_and_malformed_bytes_are_refused() {
    use Refused::*;
    let cases: &[(&[u8], Refused)] = &[
        (
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            Ambiguous,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            Ambiguous,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            Ambiguous,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n",
            Ambiguous,
        ),
        (b"POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\n", Ambiguous),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            Ambiguous,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            Ambiguous,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n",
            Ambiguous,
        ),
        // obs-fold (a continuation line), a space before the colon, not HTTP at all.
        (b"GET / HTTP/1.1\r\nX-A: 1\r\n  folded\r\n\r\n", Malformed),
        (b"GET / HTTP/1.1\r\nHost : a\r\n\r\n", Malformed),
        (b"\x16\x03\x01\x02\x00", Malformed),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", Malformed),
        // Chunks: not hex, a bare LF, data not followed by CRLF.
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            Malformed,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n",
            Malformed,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n",
            Malformed,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
            Malformed,
        ),
    ];
    for (input, want) in cases {
        assert_eq!(refused(input), *want, "{}", String::from_utf8_lossy(input));
    }
    let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
    big.resize(MAX_HEAD_BYTES + 10, b'a');
    assert_eq!(run(&big, 0), Err(TooLarge));
    assert_eq!(run(&big, 1000), Err(TooLarge));
    let mut many = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..MAX_FIELDS + 1 {
        many.extend(format!("h{i}: v\r\n").bytes());
    }
    many.extend(b"\r\n");
    assert_eq!(run(&many, 0), Err(TooLarge));
    let mut ext = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;".to_vec();
    ext.resize(ext.len() + MAX_CHUNK_LINE, b'x');
    assert_eq!(run(&ext, 0), Err(TooLarge));
}

#[test]
fn names_compare_as_a_cgi_gateway_reads_them() {
    for name in [
        "X-Forwarded-For",
        "x_forwarded_for",
        "X_FORWARDED-FOR",
        "X-Forwarded_Proto",
        "x_ja3",
        "X_JA4",
    ] {
        assert!(is_forwarded(name.as_bytes()), "{name}");
    }
    for name in [
        "X-Forwarded-Forx",
        "X-Forwarded",
        "XForwardedFor",
        "X-JA5",
        "",
    ] {
        assert!(!is_forwarded(name.as_bytes()), "{name}");
    }
    assert!(same_field(b"HTTP2_settings", "http2-settings"));
    assert!(!same_field(b"upgrade", "upgrade-insecure-requests"));
}

#[test]
fn connection_never_lists_rampart_s_headers_and_underscore_variants_are_removed() {
    let input = b"GET /1 HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, X-Forwarded-For, X-JA4\r\nX_Forwarded_For: 6.6.6.6\r\nX_JA4: spoofed\r\nx-forwarded_for: 5.5.5.5\r\n\r\n\
GET /2 HTTP/1.1\nConnection: x_forwarded_proto,X-JA3 ,\nConnection: close\n\n";
    let mut want = b"GET /1 HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n".to_vec();
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\nGET /2 HTTP/1.1\nConnection: close\n");
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\n");
    every_cut(input, &want);
    // A route that only follows removes none of them (it inserts none).
    let plain = b"GET / HTTP/1.1\r\nConnection: X-Forwarded-For\r\nX_JA4: t\r\n\r\n";
    for cut in 0..=plain.len() {
        let rw = Rewriter::follow(Tunnels::default());
        assert_eq!(run_with(rw, plain, cut, true).unwrap(), plain, "cut {cut}");
    }
}

#[test]
fn forwarded_fields_in_a_chunked_trailer_section_are_removed() {
    let input = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTrailer: X-Forwarded-For, X-JA4\r\n\r\n\
3\r\nabc\r\n0\r\nX-Forwarded-For: 6.6.6.6\r\nx_ja4: spoofed\r\nExpires: 0\r\nX-Forwarded-Proto: http\r\n\r\n";
    let mut want =
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTrailer: X-Forwarded-For, X-JA4\r\n"
            .to_vec();
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\n3\r\nabc\r\n0\r\nExpires: 0\r\n\r\n");
    every_cut(input, &want);
    // A route that only follows passes the trailer section as it came.
    for cut in 0..=input.len() {
        let rw = Rewriter::follow(Tunnels::default());
        assert_eq!(run_with(rw, input, cut, true).unwrap(), input, "cut {cut}");
    }
}

#[test]
fn upgrades_the_route_does_not_allow_are_declined_as_plain_requests() {
    // h2c (RFC 9113 §3.1 deprecated it): `Upgrade`, `HTTP2-Settings` and their tokens go,
    // the request is a plain one, and the next request is rewritten without waiting.
    let h2c = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings, keep-alive\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n";
    let input = [&h2c[..], b"GET /next HTTP/1.1\r\nX-JA4: spoofed\r\n\r\n"].concat();
    let declined = [
        &b"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n"[..],
        INSERT,
        b"\r\n",
    ]
    .concat();
    let want = [&declined[..], b"GET /next HTTP/1.1\r\n", INSERT, b"\r\n"].concat();
    every_cut(&input, &want);
    let mut rw = rewriter();
    assert_eq!(rw.next(&input), Ok(Step::Emit(h2c.len())));
    assert_eq!(rw.take_out(), declined);
    assert!(rw.idle(), "a declined upgrade waits for nothing");
    // A list with one protocol the route does not allow is declined whole; an allowed one
    // (any case, a version) is followed; so is a token the route added.
    let both = b"GET / HTTP/1.1\r\nUpgrade: websocket, h2c\r\nConnection: upgrade\r\n\r\n";
    assert_eq!(
        run(both, 0).unwrap(),
        [&b"GET / HTTP/1.1\r\n"[..], INSERT, b"\r\n"].concat()
    );
    let mut rw = rewriter();
    let ws = b"GET / HTTP/1.1\r\nUpgrade: WebSocket/13\r\nConnection: upgrade\r\n\r\nraw";
    assert_eq!(rw.next(ws), Ok(Step::Emit(ws.len() - 3)));
    assert_eq!(rw.next(b"raw"), Ok(Step::Wait));
    let mut rw = Rewriter::follow(tunnels(&["tls"], false));
    let tls = b"GET / HTTP/1.1\r\nUpgrade: TLS/1.2\r\nConnection: Upgrade\r\n\r\n";
    assert_eq!(rw.next(tls), Ok(Step::Emit(tls.len())));
    assert_eq!(rw.take_out(), tls);
    assert_eq!(rw.next(b"x"), Ok(Step::Wait));
    // Without WebSocket in the list, a WebSocket handshake is a plain GET.
    let mut rw = Rewriter::follow(tunnels(&[], false));
    let ws = b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
    assert_eq!(rw.next(ws), Ok(Step::Emit(ws.len())));
    assert_eq!(rw.take_out(), b"GET / HTTP/1.1\r\n\r\n");
    assert!(rw.idle());
    // An upgrade with a body is declined too: the body is forwarded as a body.
    let body = b"POST / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\nContent-Length: 2\r\n\r\nhi";
    let mut want = b"POST / HTTP/1.1\r\nContent-Length: 2\r\n".to_vec();
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\nhi");
    every_cut(body, &want);
}

#[test]
fn connect_and_http2_are_refused_unless_the_route_allows_connect() {
    for rw in [rewriter(), Rewriter::follow(Tunnels::default())] {
        let mut rw = rw;
        let connect = b"CONNECT / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\n\r\n";
        assert_eq!(rw.next(connect), Err(Refused::Connect));
    }
    assert_eq!(refused(b"CONNECT a:443 HTTP/1.1\r\n\r\n"), Refused::Connect);
    // The request before it goes whole.
    let first = b"GET / HTTP/1.1\r\n\r\n";
    let mut rw = Rewriter::follow(Tunnels::default());
    let input = [&first[..], b"CONNECT / HTTP/1.1\r\n\r\n"].concat();
    assert_eq!(rw.next(&input), Ok(Step::Emit(first.len())));
    assert_eq!(rw.next(&input[first.len()..]), Err(Refused::Connect));
    // Prior-knowledge HTTP/2 on a followed HTTP/1.1 connection, first or after a request.
    let mut rw = Rewriter::follow(Tunnels::default());
    let preface = crate::http2::PREFACE;
    assert_eq!(rw.next(preface), Err(Refused::Malformed));
    let mut rw = Rewriter::follow(Tunnels::default());
    let input = [&first[..], preface].concat();
    assert_eq!(rw.next(&input), Ok(Step::Emit(first.len())));
    assert_eq!(rw.next(&input[first.len()..]), Err(Refused::Malformed));
}

#[tokio::test]
async fn a_refused_connect_is_answered_405_after_the_responses_before_it() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (a, mut b) = tokio::io::duplex(4096);
    let mut w = HeaderWriter::new(a, Rewriter::follow(Tunnels::default()));
    let flag = w.refused_flag();
    let get = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    w.write_all(get).await.unwrap();
    w.write_all(b"CONNECT / HTTP/1.1\r\n\r\nGET /x HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(w.refused(), Some(Refused::Connect));
    assert!(flag.load(Ordering::Relaxed));
    // What the client sends after it is dropped.
    w.write_all(b"more").await.unwrap();
    w.flush().await.unwrap();
    // The response to the GET comes first, whole, then the 405, then the end.
    b.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 16];
    let first = w.read(&mut buf).await.unwrap();
    got.extend_from_slice(&buf[..first]);
    let reader = async {
        loop {
            match w.read(&mut buf).await.unwrap() {
                0 => break,
                n => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    b.write_all(b"lo").await.unwrap();
    reader.await;
    let mut want = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec();
    want.extend_from_slice(CONNECT_REFUSED);
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    w.shutdown().await.unwrap();
    let mut up = Vec::new();
    b.read_to_end(&mut up).await.unwrap();
    assert_eq!(up, get);
}

/// Follows `responses` (in pieces of `cut`) as answers to requests of `kinds`: the
/// decisions seen and whether the tracker ended between responses.
fn follow(kinds: &[Kind], responses: &[u8], cut: usize) -> (Vec<bool>, State) {
    let mut r = Rewriter::responses();
    r.kinds.extend(kinds);
    let mut seen = Vec::new();
    for piece in responses.chunks(cut.max(1)) {
        let mut at = 0;
        while at < piece.len() {
            match r.next(&piece[at..]).expect("followed") {
                Step::Pass(n) => {
                    r.passed(n);
                    at += n;
                }
                Step::Held(n) | Step::Emit(n) => at += n,
                Step::Wait => unreachable!(),
            }
            seen.extend(r.decided.take());
        }
    }
    (seen, r.state)
}

#[test]
fn responses_are_followed_to_the_answer_of_an_upgrade() {
    use Kind::*;
    let responses = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello\
HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n\
HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n\
HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nHTT\r\n0\r\n\r\n\
HTTP/1.1 426 Upgrade Required\r\nContent-Length: 2\r\n\r\nno\
HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x02HTTP/1.1 200";
    for cut in 1..=responses.len() {
        let (seen, state) = follow(
            &[Plain, Head, Plain, Plain, Upgrade, Upgrade],
            responses,
            cut,
        );
        assert_eq!(seen, [false, true], "cut {cut}");
        assert_eq!(state, State::Tunnel, "cut {cut}");
    }
    let (seen, state) = follow(
        &[Connect],
        b"HTTP/1.1 200 Connection established\r\n\r\n\x16\x03",
        0,
    );
    assert_eq!((seen, state), (vec![true], State::Tunnel));
    let (seen, state) = follow(
        &[Connect],
        b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n",
        0,
    );
    assert_eq!((seen, state), (vec![false], State::Head));
}

#[tokio::test]
async fn the_writer_holds_the_client_until_the_upgrade_is_answered() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (a, mut b) = tokio::io::duplex(4096);
    let mut w = HeaderWriter::new(a, rewriter());
    let ws = b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
    w.write_all(ws).await.unwrap();
    // Bytes after the upgrade request wait for the answer.
    let later = b"GET / HTTP/1.1\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n";
    let blocked = tokio::time::timeout(std::time::Duration::from_millis(50), w.write(later));
    assert!(blocked.await.is_err(), "the write waits");
    b.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        .await
        .unwrap();
    let mut resp = [0u8; 64];
    let n = w.read(&mut resp).await.unwrap();
    assert_eq!(&resp[..9], b"HTTP/1.1 ");
    assert!(n > 9);
    w.write_all(later).await.unwrap();
    w.shutdown().await.unwrap();
    let mut got = Vec::new();
    b.read_to_end(&mut got).await.unwrap();
    let mut want = ws[..ws.len() - 2].to_vec();
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\nGET / HTTP/1.1\r\n");
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\n");
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
}

#[test]
fn refused_bytes_are_never_forwarded() {
    // The first request goes whole; nothing of the smuggled one does.
    let first = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    let mut rw = rewriter();
    let mut input = first.to_vec();
    input.extend_from_slice(b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab");
    assert_eq!(rw.next(&input), Ok(Step::Emit(first.len())));
    assert!(rw.idle());
    assert_eq!(rw.next(&input[first.len()..]), Err(Refused::Ambiguous));
}

#[tokio::test]
async fn the_writer_rewrites_a_stream_written_in_pieces() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (a, mut b) = tokio::io::duplex(7);
    let input = b"POST / HTTP/1.1\r\nX-Forwarded-For: 1.1.1.1\r\nContent-Length: 20\r\n\r\n01234567890123456789GET / HTTP/1.1\r\n\r\n";
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.map(|_| got)
    });
    let mut w = HeaderWriter::new(a, rewriter());
    for piece in input.chunks(5) {
        w.write_all(piece).await.unwrap();
    }
    w.shutdown().await.unwrap();
    let got = reader.await.unwrap().unwrap();
    let mut want = b"POST / HTTP/1.1\r\nContent-Length: 20\r\n".to_vec();
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\n01234567890123456789GET / HTTP/1.1\r\n");
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\n");
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    assert_eq!(w.refused(), None);
    // A good request before refused bytes is written; the refused bytes never are.
    let (a, mut b) = tokio::io::duplex(1024);
    let mut w = HeaderWriter::new(a, rewriter());
    let e = w
        .write_all(b"GET / HTTP/1.1\r\n\r\nGARBAGE\r\n\r\n")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert_eq!(w.refused(), Some(Refused::Malformed));
    drop(w);
    let mut got = Vec::new();
    b.read_to_end(&mut got).await.unwrap();
    let mut want = b"GET / HTTP/1.1\r\n".to_vec();
    want.extend_from_slice(INSERT);
    want.extend_from_slice(b"\r\n");
    assert_eq!(got, want);
}
