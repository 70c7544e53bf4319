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

use proptest::prelude::*;
use rampart::http2::{FirstSettingsAck, H2Guard, H2GuardConfig, Inspect, PREFACE};

/// Cases per target: `PROPTEST_CASES`, or 500.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500)
}

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
        ..H2GuardConfig::default()
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

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
