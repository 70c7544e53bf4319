//! Fuzz targets (proptest) for the streaming state machines a client's bytes pass through after
//! the handshake: the HTTP/2 guard (`http2::H2Guard`, client direction), the first-SETTINGS-ACK
//! rewrite (`http2::FirstSettingsAck`) and the forwarded-header rewriter
//! (`proxy::forward_headers::Rewriter`).
//!
//! On random byte streams built from plausible pieces (valid frame headers with random types,
//! flags, stream ids and lengths; request heads with hostile fields) and on arbitrary bytes:
//! - no panic, and every offset reported lies inside the input;
//! - the verdict and the bytes produced do not depend on how the stream is cut into reads;
//! - the rewriter never lets a client copy of a header Rampart sets reach the upstream.
//!
//! Plus the corpus: `tests/corpus/<target>/*`, replayed on every run with the expected outcome.
//! A longer run: `PROPTEST_CASES=20000 cargo test --release --test fuzz_streams`.

mod common;
use common::corpus::{cases, corpus};
use proptest::prelude::*;
use rampart::config::proxy::Tunnels;
use rampart::http2::{FirstSettingsAck, H2Guard, H2GuardConfig, Inspect, PREFACE};
use rampart::proxy::forward_headers::{is_forwarded, Refused, Rewriter, Step};

fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, ty, flags];
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The client preface then frames: mostly well-formed headers over every type (0..=10 and an
/// unknown one), random flags, small stream ids (odd and even), random payloads.
fn h2_stream() -> impl Strategy<Value = Vec<u8>> {
    let one = (
        prop::sample::select(vec![0u8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0xf0]),
        any::<u8>(),
        0u32..12,
        prop::collection::vec(any::<u8>(), 0..24),
    )
        .prop_map(|(ty, flags, stream, payload)| frame(ty, flags, stream, &payload));
    (prop::collection::vec(one, 0..60), any::<bool>()).prop_map(|(frames, preface)| {
        let mut out = if preface {
            PREFACE.to_vec()
        } else {
            Vec::new()
        };
        for f in frames {
            out.extend_from_slice(&f);
        }
        out
    })
}

fn config() -> H2GuardConfig {
    H2GuardConfig {
        max_concurrent_streams: 4,
        max_streams_per_second: 20.0,
        max_resets_per_second: 5.0,
        max_header_block_bytes: 64,
        max_continuation_frames: 3,
        max_control_frames_per_second: 10.0,
        max_streams_per_connection: 6,
    }
}

/// Feeds `bytes` to a fresh guard in reads cut at `cuts`: the first stop as (absolute offset,
/// debug text of the verdict), or None.
fn guard_verdict(bytes: &[u8], cuts: &[usize]) -> Option<(usize, String)> {
    let mut g = H2Guard::new(&config());
    let mut at = 0;
    let mut sizes = cuts.iter().cycle();
    while at < bytes.len() {
        let n = (*sizes.next().unwrap_or(&1)).max(1).min(bytes.len() - at);
        let chunk = &bytes[at..at + n];
        match g.inspect_client(chunk, 0) {
            Inspect::Forward => at += n,
            Inspect::Violation { at: off, violation } => {
                assert!(off <= n);
                return Some((at + off, format!("{violation:?}")));
            }
            Inspect::ProtocolError { at: off, error } => {
                assert!(off <= n);
                return Some((at + off, format!("{error:?}")));
            }
            Inspect::Shed { at: off, reason } => {
                assert!(off <= n);
                return Some((at + off, format!("{reason:?}")));
            }
            Inspect::Drained { at: off } => {
                assert!(off <= n);
                return Some((at + off, "Drained".to_string()));
            }
            // The no-op hooks never hold a frame.
            Inspect::Hold { .. } => unreachable!("held without hooks"),
        }
    }
    None
}

/// Runs the ACK walker over `bytes` in reads cut at `cuts`, as the connection path does (bytes
/// it holds back are presented again with the next read): the bytes it lets through.
fn ack_filtered(bytes: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut f = FirstSettingsAck::new();
    let mut out = Vec::new();
    let mut held: Vec<u8> = Vec::new();
    let mut at = 0;
    let mut sizes = cuts.iter().cycle();
    while at < bytes.len() {
        let n = (*sizes.next().unwrap_or(&1)).max(1).min(bytes.len() - at);
        held.extend_from_slice(&bytes[at..at + n]);
        at += n;
        let pass = f.filter(&mut held);
        assert!(pass <= held.len() && held.len() - pass <= 8);
        out.extend_from_slice(&held[..pass]);
        held.drain(..pass);
    }
    out.extend_from_slice(&held);
    out
}

/// What the upstream receives from a rewriter fed `bytes` in reads cut at `cuts` (every
/// upgrade or `CONNECT` answered as `granted` says), and the refusal that stopped it, if any.
fn rewritten(
    mut rw: Rewriter,
    bytes: &[u8],
    cuts: &[usize],
    granted: bool,
) -> (Vec<u8>, Option<Refused>) {
    let mut out = Vec::new();
    let mut at = 0;
    let mut sizes = cuts.iter().cycle();
    while at < bytes.len() {
        let n = (*sizes.next().unwrap_or(&1)).max(1).min(bytes.len() - at);
        let chunk = &bytes[at..at + n];
        let mut used = 0;
        while used < chunk.len() {
            match rw.next(&chunk[used..]) {
                Ok(Step::Pass(k)) => {
                    assert!(k > 0 && k <= chunk.len() - used);
                    out.extend_from_slice(&chunk[used..used + k]);
                    rw.passed(k);
                    used += k;
                }
                Ok(Step::Held(k)) => used += k,
                Ok(Step::Emit(k)) => {
                    used += k;
                    out.extend(rw.take_out());
                }
                Ok(Step::Wait) => rw.answered(granted),
                Err(r) => return (out, Some(r)),
            }
        }
        at += n;
    }
    (out, None)
}

/// The header names of every request head in `out` that the rewriter emitted (the heads are
/// whole: the rewriter emits a head only once it is complete), up to the first tunnel.
fn head_field_names(out: &[u8]) -> Vec<Vec<u8>> {
    let mut names = Vec::new();
    let mut rest = out;
    while let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = &rest[..end];
        for line in head.split(|&b| b == b'\n').skip(1) {
            if let Some(colon) = line.iter().position(|&b| b == b':') {
                names.push(line[..colon].to_vec());
            }
        }
        rest = &rest[end + 4..];
    }
    names
}

/// Request streams made of hostile pieces: spoofed forwarded headers in every spelling,
/// Connection lists naming them, upgrades, CONNECT, bodies in both framings, pipelining.
fn http_stream() -> impl Strategy<Value = Vec<u8>> {
    let field = prop::sample::select(vec![
        &b"Host: app.test\r\n"[..],
        b"X-Forwarded-For: 6.6.6.6\r\n",
        b"X_Forwarded_For: 6.6.6.6\r\n",
        b"x-forwarded_proto: http\r\n",
        b"X-JA4: spoofed\r\n",
        b"X_JA3: spoofed\r\n",
        b"Connection: keep-alive, X-Forwarded-For, X-JA4\r\n",
        b"Connection: Upgrade, HTTP2-Settings\r\n",
        b"Upgrade: h2c\r\n",
        b"Upgrade: websocket\r\n",
        b"HTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n",
    ]);
    // The body and the field that frames it, chosen together (and, rarely, a second framing
    // field: a smuggling shape the rewriter refuses).
    let body = prop::sample::select(vec![
        (&b""[..], &b""[..]),
        (b"Content-Length: 3\r\n", b"abc"),
        (b"Transfer-Encoding: chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n"),
        (
            b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n",
            b"abc",
        ),
    ]);
    let method = prop::sample::select(vec![
        &b"GET / HTTP/1.1\r\n"[..],
        b"POST /p HTTP/1.1\r\n",
        b"CONNECT / HTTP/1.1\r\n",
        b"HEAD / HTTP/1.1\r\n",
    ]);
    let request = (method, prop::collection::vec(field, 0..6), body).prop_map(
        |(m, fields, (framing, body))| {
            let mut r = m.to_vec();
            for f in fields {
                r.extend_from_slice(f);
            }
            r.extend_from_slice(framing);
            r.extend_from_slice(b"\r\n");
            r.extend_from_slice(body);
            r
        },
    );
    prop::collection::vec(request, 1..5).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(500)))]

    #[test]
    fn rewriter_output_does_not_depend_on_reads_and_carries_no_client_forwarded_field(
        bytes in prop_oneof![http_stream(), prop::collection::vec(any::<u8>(), 0..120)],
        cuts in prop::collection::vec(1usize..40, 1..12),
        granted in any::<bool>(),
        insert in any::<bool>(),
    ) {
        let make = || match insert {
            true => Rewriter::new(b"X-Forwarded-For: 127.0.0.1\r\nX-JA4: t13d\r\n".to_vec(), Tunnels::default()),
            false => Rewriter::follow(Tunnels::default()),
        };
        let whole = rewritten(make(), &bytes, &[bytes.len().max(1)], granted);
        prop_assert_eq!(&rewritten(make(), &bytes, &cuts, granted), &whole);
        if insert && !granted {
            // No tunnel: every head in the output is one the rewriter wrote, and the only
            // forwarded fields in it are the two it inserted.
            for name in head_field_names(&whole.0) {
                if is_forwarded(&name) {
                    prop_assert!(name == b"X-Forwarded-For" || name == b"X-JA4", "{:?}", String::from_utf8_lossy(&name));
                }
            }
            let heads = whole.0.windows(4).filter(|w| w == b"\r\n\r\n").count();
            let ours = whole.0.windows(17).filter(|w| w == b"X-JA4: t13d\r\n\r\n").count();
            prop_assert!(ours <= heads);
        }
    }

    #[test]
    fn h2_guard_verdict_does_not_depend_on_reads(
        bytes in prop_oneof![h2_stream(), prop::collection::vec(any::<u8>(), 0..200)],
        cuts in prop::collection::vec(1usize..64, 1..16),
    ) {
        // In one read the stop's offset is the violating frame's first byte; cut into reads, the
        // part of that frame already forwarded in earlier reads is gone, so the stop lies
        // inside the same frame, never after it.
        let whole = guard_verdict(&bytes, &[bytes.len().max(1)]);
        let cut = guard_verdict(&bytes, &cuts);
        match (&whole, &cut) {
            (None, None) => {}
            (Some((w, wv)), Some((c, cv))) => {
                prop_assert_eq!(wv, cv);
                prop_assert!(*w <= bytes.len());
                let frame_end = bytes
                    .get(*w..*w + 3)
                    .map_or(bytes.len(), |l| *w + 9 + ((l[0] as usize) << 16 | (l[1] as usize) << 8 | l[2] as usize));
                prop_assert!(*c >= *w && *c <= frame_end.min(bytes.len()), "stop at {} cut, {} whole", c, w);
            }
            _ => prop_assert!(false, "{:?} whole, {:?} cut", whole, cut),
        }
    }

    #[test]
    fn first_ack_rewrite_does_not_depend_on_reads(
        bytes in prop_oneof![h2_stream(), prop::collection::vec(any::<u8>(), 0..200)],
        cuts in prop::collection::vec(1usize..32, 1..16),
    ) {
        let whole = ack_filtered(&bytes, &[bytes.len().max(1)]);
        prop_assert_eq!(whole.len(), bytes.len());
        // At most one byte changed: the first ACK's type.
        let changed = whole.iter().zip(&bytes).filter(|(a, b)| a != b).count();
        prop_assert!(changed <= 1);
        prop_assert_eq!(ack_filtered(&bytes, &cuts), whole);
    }
}

/// Every request stream that once got a client's own forwarded headers, an h2c upgrade or
/// HTTP/2 past the guard: replayed on a rewriting route whose upstream grants every upgrade and
/// CONNECT (the worst case), under every cut into two reads.
#[test]
fn forwarding_corpus() {
    let files = corpus("forwarding");
    assert!(files.len() >= 5);
    for (name, bytes) in files {
        for cut in 1..bytes.len() {
            let rw = Rewriter::new(
                b"X-Forwarded-For: 127.0.0.1\r\nX-JA4: t13d\r\n".to_vec(),
                Tunnels::default(),
            );
            let (out, refused) = rewritten(rw, &bytes, &[cut, bytes.len()], true);
            let text = String::from_utf8_lossy(&out);
            assert!(!text.contains("6.6.6.6"), "{name} cut {cut}: {text}");
            assert!(!text.contains("spoofed"), "{name} cut {cut}: {text}");
            assert!(
                !text.to_ascii_lowercase().contains("upgrade: h2c"),
                "{name} cut {cut}: {text}"
            );
            assert!(!text.contains("PRI * HTTP/2.0"), "{name} cut {cut}: {text}");
            if name.starts_with("connect") {
                assert_eq!(refused, Some(Refused::Connect), "{name} cut {cut}");
            }
            if name.starts_with("h2-preface") {
                assert_eq!(refused, Some(Refused::Malformed), "{name} cut {cut}");
            }
        }
    }
}
