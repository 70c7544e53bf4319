//! The HTTP/2 guard (DESIGN §7.3) on byte streams built frame by frame: every limit at its
//! threshold and one past it, the violation offsets, every chunking, the SETTINGS rewrite under
//! every split, an honest session, and rates recovering with injected time.

use proptest::prelude::*;
use rampart::http2::{
    goaway_frame, server_settings, FirstSettingsAck, H2Guard, H2GuardConfig, Inspect,
    ProtocolError, Violation, ACK_STAND_IN, EMPTY_SETTINGS, ENHANCE_YOUR_CALM, PREFACE,
    PROTOCOL_ERROR,
};

/// Counts this thread's allocations, so a test can check that inspecting allocates nothing.
struct CountingAlloc;

thread_local! {
    static ALLOCATIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn count_allocation() {
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

fn allocations() -> u64 {
    ALLOCATIONS.with(|c| c.get())
}

// SAFETY: forwards every call to `System` unchanged; only counts allocations.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: the caller's contract for `alloc`, passed on unchanged.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: `ptr` and `layout` come from this allocator, which is `System`'s.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        count_allocation();
        // SAFETY: as for `dealloc`.
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const MS: u64 = rampart::clock::NS_PER_MS;
const SEC: u64 = 1_000 * MS;

// Frame types and flags (RFC 9113 §6), spelled out here so the tests do not share the guard's
// constants.
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = len.to_be_bytes()[1..].to_vec();
    f.push(ty);
    f.push(flags);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A frame whose payload is `len` filler bytes.
fn sized(ty: u8, flags: u8, stream: u32, len: usize) -> Vec<u8> {
    frame(ty, flags, stream, &vec![0x88; len])
}

/// A request's HEADERS (a few bytes standing for an HPACK block: the guard never decodes it).
fn get(stream: u32) -> Vec<u8> {
    frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        stream,
        &[0x82, 0x86, 0x84, 0x41, 0x01, 0x61],
    )
}

fn rst(stream: u32) -> Vec<u8> {
    frame(RST_STREAM, 0, stream, &8u32.to_be_bytes())
}

fn window_update(stream: u32, increment: u32) -> Vec<u8> {
    frame(WINDOW_UPDATE, 0, stream, &increment.to_be_bytes())
}

fn settings(entries: &[(u16, u32)]) -> Vec<u8> {
    let mut p = Vec::new();
    for (id, v) in entries {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    frame(SETTINGS, 0, 0, &p)
}

fn ping(flags: u8) -> Vec<u8> {
    frame(PING, flags, 0, &[1, 2, 3, 4, 5, 6, 7, 8])
}

/// A response: HEADERS, then `body` bytes of DATA with END_STREAM.
fn response(stream: u32, body: usize) -> Vec<u8> {
    let mut r = frame(HEADERS, END_HEADERS, stream, &[0x88, 0x5f, 0x87]);
    r.extend(sized(DATA, END_STREAM, stream, body));
    r
}

/// Preface only.
fn preface() -> Vec<u8> {
    PREFACE.to_vec()
}

/// What a browser sends first: preface, SETTINGS, a connection WINDOW_UPDATE.
fn client_start() -> Vec<u8> {
    let mut b = preface();
    b.extend(settings(&[(0x2, 0), (0x4, 6_291_456), (0x6, 262_144)]));
    b.extend(window_update(0, 15_663_105));
    b
}

fn cat(parts: impl IntoIterator<Item = Vec<u8>>) -> Vec<u8> {
    parts.into_iter().flatten().collect()
}

/// The defaults with DESIGN §7.3's 200 new streams/s, the rate these tests were written
/// against (the shipped default is 100000/s, see `H2GuardConfig`).
fn table_7_3() -> H2GuardConfig {
    H2GuardConfig {
        max_streams_per_second: 200.0,
        ..H2GuardConfig::default()
    }
}

fn guard() -> H2Guard {
    H2Guard::new(&table_7_3())
}

/// How a fed stream stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    V(Violation),
    P(ProtocolError),
    /// Shed by the hooks, or a stream past `maxStreamsPerConnection`.
    End(Inspect),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Fed {
    /// Bytes the copy loop would have forwarded.
    forwarded: usize,
    stop: Option<Stop>,
}

/// Feeds `bytes` from the client in chunks of `sizes` (cycled) at `now`.
fn feed_client(g: &mut H2Guard, bytes: &[u8], sizes: &[usize], now: u64) -> Fed {
    let mut pos = 0;
    let mut k = 0;
    while pos < bytes.len() {
        let n = sizes[k % sizes.len()].max(1).min(bytes.len() - pos);
        k += 1;
        let chunk = &bytes[pos..pos + n];
        match g.inspect_client(chunk, now) {
            Inspect::Forward => pos += n,
            Inspect::Violation { at, violation } => {
                assert!(at <= n);
                return Fed {
                    forwarded: pos + at,
                    stop: Some(Stop::V(violation)),
                };
            }
            Inspect::ProtocolError { at, error } => {
                assert!(at <= n);
                return Fed {
                    forwarded: pos + at,
                    stop: Some(Stop::P(error)),
                };
            }
            Inspect::Hold { .. } => unreachable!("the no-op hooks never hold a frame"),
            end @ (Inspect::Shed { at, .. } | Inspect::Drained { at }) => {
                assert!(at <= n);
                return Fed {
                    forwarded: pos + at,
                    stop: Some(Stop::End(end)),
                };
            }
        }
    }
    Fed {
        forwarded: pos,
        stop: None,
    }
}

/// The whole stream in one chunk.
fn client_all(g: &mut H2Guard, bytes: &[u8], now: u64) -> Fed {
    feed_client(g, bytes, &[bytes.len().max(1)], now)
}

/// Feeds `bytes` from the upstream in chunks of `sizes` (cycled) at `now`; returns the bytes the
/// client would receive (rewritten) and how it stopped.
fn feed_upstream(
    g: &mut H2Guard,
    bytes: &[u8],
    sizes: &[usize],
    now: u64,
) -> (Vec<u8>, Option<Stop>) {
    let mut out = Vec::with_capacity(bytes.len());
    let mut pos = 0;
    let mut k = 0;
    while pos < bytes.len() {
        let n = sizes[k % sizes.len()].max(1).min(bytes.len() - pos);
        k += 1;
        let mut chunk = bytes[pos..pos + n].to_vec();
        match g.inspect_upstream(&mut chunk, now) {
            Inspect::Forward => {
                out.extend_from_slice(&chunk);
                pos += n;
            }
            Inspect::Violation { at, violation } => {
                out.extend_from_slice(&chunk[..at]);
                return (out, Some(Stop::V(violation)));
            }
            Inspect::ProtocolError { at, error } => {
                out.extend_from_slice(&chunk[..at]);
                return (out, Some(Stop::P(error)));
            }
            Inspect::Hold { .. } => unreachable!("the upstream direction never holds"),
            end @ (Inspect::Shed { at, .. } | Inspect::Drained { at }) => {
                out.extend_from_slice(&chunk[..at]);
                return (out, Some(Stop::End(end)));
            }
        }
    }
    (out, None)
}

fn upstream_all(g: &mut H2Guard, bytes: &[u8], now: u64) -> (Vec<u8>, Option<Stop>) {
    feed_upstream(g, bytes, &[bytes.len().max(1)], now)
}

fn forward(g: &mut H2Guard, bytes: &[u8], now: u64) {
    assert_eq!(
        client_all(g, bytes, now),
        Fed {
            forwarded: bytes.len(),
            stop: None
        }
    );
}

fn forward_upstream(g: &mut H2Guard, bytes: &[u8], now: u64) {
    let (out, stop) = upstream_all(g, bytes, now);
    assert_eq!(stop, None);
    assert_eq!(out.len(), bytes.len());
}

fn violated(forwarded: usize, v: Violation) -> Fed {
    Fed {
        forwarded,
        stop: Some(Stop::V(v)),
    }
}

// ---------------------------------------------------------------------------------------------
// The contract's names and frames.

#[test]
fn violation_details_are_the_six_contract_strings() {
    let names: Vec<&str> = Violation::ALL.iter().map(|v| v.as_str()).collect();
    assert_eq!(
        names,
        [
            "concurrent_streams",
            "stream_rate",
            "rapid_reset",
            "header_block",
            "continuation",
            "control_frames"
        ]
    );
    assert_eq!(Violation::RapidReset.to_string(), "rapid_reset");
}

#[test]
fn default_config_is_the_contract_table() {
    let c = H2GuardConfig::default();
    assert_eq!(c.max_concurrent_streams, 100);
    // §7.3 says 200; honest clients exceed it on one connection (see `H2GuardConfig`).
    assert_eq!(c.max_streams_per_second, 100_000.0);
    assert_eq!(c.max_resets_per_second, 50.0);
    assert_eq!(c.max_header_block_bytes, 65536);
    assert_eq!(c.max_continuation_frames, 16);
    assert_eq!(c.max_control_frames_per_second, 100.0);
}

#[test]
fn goaway_frame_is_a_9_byte_header_and_8_byte_payload() {
    let f = goaway_frame(0x1234_5677, ENHANCE_YOUR_CALM);
    assert_eq!(&f[..9], &[0, 0, 8, GOAWAY, 0, 0, 0, 0, 0]);
    assert_eq!(&f[9..13], &0x1234_5677u32.to_be_bytes());
    assert_eq!(&f[13..], &[0, 0, 0, 0x0b]);
    assert_eq!(ENHANCE_YOUR_CALM, 0xb);
}

// ---------------------------------------------------------------------------------------------
// concurrent_streams

#[test]
fn a_hundred_open_streams_pass_and_the_101st_violates_at_its_header() {
    let mut g = guard();
    let start = client_start();
    let mut b = start.clone();
    for k in 0..100 {
        b.extend(get(1 + 2 * k));
    }
    let before_101st = b.len();
    b.extend(get(201));
    b.extend(get(203));
    assert_eq!(
        client_all(&mut g, &b, 0),
        violated(before_101st, Violation::ConcurrentStreams)
    );
    assert_eq!(g.state().open_streams(), 100);
    assert_eq!(
        g.state().last_stream_id(),
        199,
        "stream 201 was not forwarded"
    );
    assert_eq!(g.state().violation(), Some(Violation::ConcurrentStreams));
    // The upstream never spoke: the GOAWAY goes out behind an empty SETTINGS (server preface).
    let mut expect = EMPTY_SETTINGS.to_vec();
    expect.extend(goaway_frame(199, ENHANCE_YOUR_CALM));
    assert_eq!(g.goaway().unwrap().as_bytes(), &expect[..]);
    // Sticky: nothing more is forwarded either way.
    assert_eq!(
        g.inspect_client(&get(205), 1),
        Inspect::Violation {
            at: 0,
            violation: Violation::ConcurrentStreams
        }
    );
    assert_eq!(
        g.inspect_upstream(&mut response(1, 10), 1),
        Inspect::Violation {
            at: 0,
            violation: Violation::ConcurrentStreams
        }
    );
}

#[test]
fn a_stream_stops_counting_when_both_sides_ended_or_either_reset() {
    let mut g = guard();
    forward_upstream(&mut g, &settings(&[(0x3, 100)]), 0);
    forward(&mut g, &client_start(), 0);
    // Streams 1..=199: 1..=197 ended by the client (GET), 199 still uploading.
    for k in 0..99 {
        forward(&mut g, &get(1 + 2 * k), 0);
    }
    forward(&mut g, &frame(HEADERS, END_HEADERS, 199, &[0x83]), 0);
    assert_eq!(g.state().open_streams(), 100);
    // The server answers stream 1: both sides ended, one slot free (time passes for the rate).
    forward_upstream(&mut g, &response(1, 100), SEC);
    assert_eq!(g.state().open_streams(), 99);
    forward(&mut g, &get(201), SEC);
    assert_eq!(g.state().open_streams(), 100);
    // The server ends 199 first: half-closed, still counted, until the client ends it too.
    forward_upstream(&mut g, &response(199, 10), SEC);
    assert_eq!(g.state().open_streams(), 100);
    assert_eq!(
        client_all(&mut g, &get(203), SEC),
        violated(0, Violation::ConcurrentStreams),
        "the 101st open stream"
    );

    let mut g = guard();
    forward(&mut g, &client_start(), 0);
    for k in 0..100 {
        forward(&mut g, &get(1 + 2 * k), 0);
    }
    forward(&mut g, &frame(DATA, END_STREAM, 199, &[]), SEC); // ignored: 199 already ended
    forward(&mut g, &rst(3), SEC); // the client resets 3
    forward_upstream(&mut g, &rst(5), SEC); // the upstream resets 5
    assert_eq!(g.state().open_streams(), 98);
    forward(&mut g, &cat([get(201), get(203)]), SEC);
    assert_eq!(
        client_all(&mut g, &get(205), SEC),
        violated(0, Violation::ConcurrentStreams)
    );
}

#[test]
fn trailers_and_request_bodies_close_the_stream_on_the_last_end_stream() {
    let mut g = guard();
    forward(&mut g, &client_start(), 0);
    forward(
        &mut g,
        &cat([
            frame(HEADERS, END_HEADERS, 1, &[0x83]),
            sized(DATA, 0, 1, 1000),
            frame(HEADERS, END_STREAM | END_HEADERS, 1, &[0x40]), // trailers
        ]),
        0,
    );
    assert_eq!(g.state().open_streams(), 1);
    assert_eq!(g.state().last_stream_id(), 1);
    forward_upstream(&mut g, &response(1, 10), 0);
    assert_eq!(g.state().open_streams(), 0);
    // An even (server) stream id and stream 0 open nothing.
    forward(&mut g, &frame(HEADERS, END_HEADERS, 2, &[0x82]), 0);
    forward(&mut g, &frame(HEADERS, END_HEADERS, 0, &[0x82]), 0);
    assert_eq!(
        (g.state().open_streams(), g.state().last_stream_id()),
        (0, 1)
    );
}

#[test]
fn max_concurrent_streams_is_enforced_when_the_upstream_advertises_none() {
    let mut g = guard();
    forward_upstream(&mut g, &settings(&[(0x4, 65535)]), 0);
    assert!(g.upstream().server_preface_seen());
    assert!(!g.upstream().saw_max_concurrent_streams());
    let mut b = client_start();
    for k in 0..100 {
        b.extend(get(1 + 2 * k));
    }
    let at = b.len();
    b.extend(get(201));
    assert_eq!(
        client_all(&mut g, &b, 0),
        violated(at, Violation::ConcurrentStreams)
    );
    // The server preface passed, so the GOAWAY goes alone.
    assert_eq!(
        g.goaway().unwrap().as_bytes(),
        &goaway_frame(199, ENHANCE_YOUR_CALM)[..]
    );
}

#[test]
fn after_rampart_s_settings_the_first_ack_is_not_a_control_frame_and_a_goaway_goes_alone() {
    // Rampart's preface: SETTINGS with the one entry MAX_CONCURRENT_STREAMS = the limit.
    assert_eq!(server_settings(100).to_vec(), settings(&[(0x3, 100)]));
    let mut g = guard();
    g.server_preface_sent();
    assert!(g.upstream().server_preface_seen());
    // The client's SETTINGS (1 control frame), its ACK of Rampart's SETTINGS, then 199 PINGs:
    // with the ACK rewritten by the read filter before the guard, 200 control frames, the burst.
    let mut b = cat([client_start(), frame(SETTINGS, ACK, 0, &[])]);
    let mut walk = FirstSettingsAck::new();
    assert_eq!(walk.filter(&mut b), b.len());
    assert!(walk.is_done());
    assert_eq!(b[b.len() - 6], ACK_STAND_IN);
    for _ in 0..199 {
        b.extend(ping(0));
    }
    forward(&mut g, &b, 0);
    assert_eq!(
        client_all(&mut g, &ping(0), 0),
        violated(0, Violation::ControlFrames),
        "the 201st control frame; the stand-in did not count"
    );
    // The client already read a server preface: the GOAWAY needs no empty SETTINGS before it.
    assert_eq!(
        g.goaway().unwrap().as_bytes(),
        &goaway_frame(0, ENHANCE_YOUR_CALM)[..]
    );
}

// ---------------------------------------------------------------------------------------------
// stream_rate

/// Client GET on `stream` and the full response, at `now`.
fn exchange(g: &mut H2Guard, stream: u32, now: u64) -> Fed {
    let fed = client_all(g, &get(stream), now);
    if fed.stop.is_none() {
        forward_upstream(g, &response(stream, 50), now);
    }
    fed
}

#[test]
fn stream_rate_burst_is_max_concurrent_streams_then_one_per_5_ms() {
    let mut g = guard();
    forward(&mut g, &client_start(), 0);
    for k in 0..100 {
        assert_eq!(
            exchange(&mut g, 1 + 2 * k, 0).stop,
            None,
            "stream #{}",
            k + 1
        );
    }
    assert_eq!(g.state().open_streams(), 0);
    assert_eq!(
        exchange(&mut g, 201, 0),
        violated(0, Violation::StreamRate),
        "the 101st new stream at one instant"
    );

    // 200/s: one more each 5 ms after the burst, not sooner.
    let mut g = guard();
    forward(&mut g, &client_start(), 0);
    for k in 0..100 {
        exchange(&mut g, 1 + 2 * k, 0);
    }
    assert_eq!(exchange(&mut g, 201, 5 * MS).stop, None);
    assert_eq!(
        exchange(&mut g, 203, 10 * MS - 1).stop,
        Some(Stop::V(Violation::StreamRate))
    );
}

#[test]
fn stream_rate_recovers_after_time_passes() {
    let mut g = guard();
    forward(&mut g, &client_start(), 0);
    let mut id = 1;
    for round in 0..5 {
        // Half a second refills the whole burst of 100 at 200/s.
        let now = round * SEC / 2;
        for _ in 0..100 {
            assert_eq!(
                exchange(&mut g, id, now).stop,
                None,
                "round {round} stream {id}"
            );
            id += 2;
        }
    }
    assert_eq!(
        exchange(&mut g, id, 2 * SEC).stop,
        Some(Stop::V(Violation::StreamRate))
    );
}

// ---------------------------------------------------------------------------------------------
// rapid_reset

/// A cap of 200 streams (and a stream burst of 200), so that more than 100 streams can be open
/// at one instant and the reset budget is the one that runs out.
fn wide() -> H2Guard {
    H2Guard::new(&H2GuardConfig {
        max_concurrent_streams: 200,
        ..table_7_3()
    })
}

#[test]
fn resets_burst_is_twice_the_rate_the_101st_violates() {
    let mut g = wide();
    let mut b = client_start();
    for k in 0..101 {
        b.extend(get(1 + 2 * k));
    }
    for k in 0..100 {
        b.extend(rst(1 + 2 * k)); // each ends an open stream
    }
    let at = b.len();
    b.extend(rst(201));
    assert_eq!(
        client_all(&mut g, &b, 0),
        violated(at, Violation::RapidReset)
    );
}

#[test]
fn resets_of_streams_that_are_not_open_are_not_counted() {
    // curl 7.88 resets every stream it finished (RST_STREAM STREAM_CLOSED after the response):
    // such a reset ends nothing at the upstream. Nor do resets of a stream already reset, of one
    // never opened, of a pushed stream or of stream 0. (1000 requests in a second: the shipped
    // stream rate allows them.)
    let mut g = H2Guard::new(&H2GuardConfig::default());
    forward(&mut g, &client_start(), 0);
    for k in 0..1000 {
        assert_eq!(exchange(&mut g, 1 + 2 * k, u64::from(k) * MS).stop, None);
        forward(&mut g, &rst(1 + 2 * k), u64::from(k) * MS);
    }
    forward(&mut g, &get(2001), SEC);
    forward(&mut g, &rst(2001), SEC);
    for _ in 0..500 {
        forward(&mut g, &cat([rst(2001), rst(4001), rst(2), rst(0)]), SEC);
        forward_upstream(&mut g, &cat([rst(2001), rst(1), rst(2)]), SEC);
    }
    assert_eq!(g.state().open_streams(), 0);
}

#[test]
fn resets_recover_at_the_configured_rate() {
    let mut g = wide();
    forward(&mut g, &client_start(), 0);
    for k in 0..151 {
        forward(&mut g, &get(1 + 2 * k), 0);
    }
    for k in 0..100 {
        forward(&mut g, &rst(1 + 2 * k), 0);
    }
    // One second refills 50.
    for k in 100..150 {
        forward(&mut g, &rst(1 + 2 * k), SEC);
    }
    assert_eq!(
        client_all(&mut g, &rst(301), SEC),
        violated(0, Violation::RapidReset)
    );
}

#[test]
fn cve_2023_44487_pattern_violates_within_burst_plus_one_resets() {
    // 10,000 HEADERS + RST_STREAM pairs in one flight: both budgets (100 streams, 100 resets)
    // are spent by pair 100; pair 101's HEADERS is refused and named rapid_reset.
    let start = client_start();
    let mut b = start.clone();
    let mut pair_at = Vec::new();
    for k in 0..10_000u32 {
        pair_at.push(b.len());
        b.extend(get(1 + 2 * k));
        b.extend(rst(1 + 2 * k));
    }
    let mut g = guard();
    assert_eq!(
        client_all(&mut g, &b, 0),
        violated(pair_at[100], Violation::RapidReset)
    );
    assert_eq!(g.state().open_streams(), 0);
    assert_eq!(g.state().last_stream_id(), 199);

    // The same flight spread over time, one pair per µs, one pair per chunk.
    let mut g = guard();
    forward(&mut g, &start, 0);
    let mut resets = 0;
    let stop = (0..10_000u32).find_map(|k| {
        let now = u64::from(k) * 1_000;
        let pair = cat([get(1 + 2 * k), rst(1 + 2 * k)]);
        let fed = client_all(&mut g, &pair, now);
        if fed.forwarded == pair.len() {
            resets += 1;
        }
        fed.stop
    });
    assert_eq!(stop, Some(Stop::V(Violation::RapidReset)));
    assert!(resets <= 101, "{resets} resets before the violation");

    // Paced at exactly the stream rate (one pair per 5 ms) only the reset budget runs out:
    // reset k (0-based) arrives at 5k ms with TAT 20k ms; it conforms iff 20k ≤ 5k + 1980, i.e.
    // k ≤ 132, so the 134th reset (k = 133) is the violation, at its own header.
    let mut g = guard();
    forward(&mut g, &start, 0);
    for k in 0..133u32 {
        let now = u64::from(k) * 5 * MS;
        forward(&mut g, &cat([get(1 + 2 * k), rst(1 + 2 * k)]), now);
    }
    let pair = cat([get(267), rst(267)]);
    assert_eq!(
        client_all(&mut g, &pair, 133 * 5 * MS),
        violated(get(267).len(), Violation::RapidReset)
    );
}

#[test]
fn upstream_resets_on_client_streams_count_toward_the_same_budget() {
    // MadeYouReset: the client makes the upstream reset its streams.
    let mut g = wide();
    forward(&mut g, &client_start(), 0);
    for k in 0..101 {
        forward(&mut g, &frame(HEADERS, END_HEADERS, 1 + 2 * k, &[0x83]), 0);
    }
    let mut resets = Vec::new();
    for k in 0..100 {
        resets.extend(rst(1 + 2 * k));
    }
    forward_upstream(&mut g, &resets, 0);
    assert_eq!(g.state().open_streams(), 1);
    // Not counted: a reset of a pushed (even) stream, of a stream never opened, of stream 0, of
    // a stream already reset.
    forward_upstream(&mut g, &cat([rst(2), rst(1001), rst(0), rst(7)]), 0);
    // The 101st reset, after a 17-byte frame: forwarded up to its header, then the GOAWAY.
    let mut b = frame(PING, ACK, 0, &[0; 8]);
    assert_eq!(b.len(), 17);
    b.extend(rst(201));
    b.extend(response(9, 10));
    let (out, stop) = upstream_all(&mut g, &b, 0);
    assert_eq!(stop, Some(Stop::V(Violation::RapidReset)));
    assert_eq!(out.len(), 17);
    assert_eq!(
        g.goaway().unwrap().as_bytes(),
        &goaway_frame(201, ENHANCE_YOUR_CALM)[..]
    );
    assert_eq!(
        g.inspect_client(&get(203), 0),
        Inspect::Violation {
            at: 0,
            violation: Violation::RapidReset
        }
    );
}

#[test]
fn client_and_upstream_resets_share_one_budget() {
    let mut g = wide();
    forward(&mut g, &client_start(), 0);
    for k in 0..101 {
        forward(&mut g, &frame(HEADERS, END_HEADERS, 1 + 2 * k, &[0x83]), 0);
    }
    for k in 0..50 {
        forward(&mut g, &rst(1 + 2 * k), 0);
        forward_upstream(&mut g, &rst(101 + 2 * k), 0);
    }
    assert_eq!(g.state().open_streams(), 1);
    assert_eq!(
        client_all(&mut g, &rst(201), 0),
        violated(0, Violation::RapidReset)
    );
}

// ---------------------------------------------------------------------------------------------
// header_block and continuation

#[test]
fn a_header_block_of_65536_bytes_passes_and_65537_violates() {
    let mut g = guard();
    forward(&mut g, &client_start(), 0);
    forward(
        &mut g,
        &sized(HEADERS, END_STREAM | END_HEADERS, 1, 65536),
        0,
    );

    let mut g = guard();
    let start = client_start();
    let b = cat([
        start.clone(),
        sized(HEADERS, END_STREAM | END_HEADERS, 1, 65537),
    ]);
    assert_eq!(
        client_all(&mut g, &b, 0),
        violated(start.len(), Violation::HeaderBlock)
    );
    assert_eq!(
        g.state().last_stream_id(),
        0,
        "the oversized HEADERS was not forwarded"
    );

    // Across CONTINUATION: 60000 + 5536 passes, 60000 + 5537 violates at the CONTINUATION.
    let mut g = guard();
    forward(
        &mut g,
        &cat([
            start.clone(),
            sized(HEADERS, END_STREAM, 1, 60000),
            sized(CONTINUATION, END_HEADERS, 1, 5536),
        ]),
        0,
    );
    let mut g = guard();
    let head = cat([start.clone(), sized(HEADERS, END_STREAM, 1, 60000)]);
    let b = cat([head.clone(), sized(CONTINUATION, END_HEADERS, 1, 5537)]);
    assert_eq!(
        client_all(&mut g, &b, 0),
        violated(head.len(), Violation::HeaderBlock)
    );
    assert_eq!(
        g.state().last_stream_id(),
        1,
        "stream 1's HEADERS was forwarded"
    );
    assert_eq!(
        g.goaway().unwrap().as_bytes()[9..],
        goaway_frame(1, ENHANCE_YOUR_CALM)
    );
}

#[test]
fn padding_and_priority_fields_count_as_header_block_bytes() {
    // PADDED | PRIORITY HEADERS: pad length (1) + dependency and weight (5) + 65530 bytes of
    // block + 1 byte of padding = 65537 payload bytes.
    let mut payload = vec![1u8, 0, 0, 0, 0, 16];
    payload.extend(vec![0x88; 65530]);
    payload.push(0);
    assert_eq!(payload.len(), 65537);
    let flags = END_STREAM | END_HEADERS | PADDED | PRIORITY_FLAG;
    let mut g = guard();
    let start = client_start();
    let b = cat([start.clone(), frame(HEADERS, flags, 1, &payload)]);
    assert_eq!(
        client_all(&mut g, &b, 0),
        violated(start.len(), Violation::HeaderBlock)
    );
    let mut g = guard();
    forward(
        &mut g,
        &cat([start, frame(HEADERS, flags, 1, &payload[1..])]),
        0,
    );
}

#[test]
fn continuation_flood_violates_at_the_17th_continuation() {
    let start = client_start();
    let mut b = cat([start, sized(HEADERS, END_STREAM, 1, 10)]);
    let mut cont_at = Vec::new();
    for _ in 0..100_000 {
        cont_at.push(b.len());
        b.extend(sized(CONTINUATION, 0, 1, 1));
    }
    let mut g = guard();
    assert_eq!(
        client_all(&mut g, &b, 0),
        violated(cont_at[16], Violation::Continuation)
    );
    assert_eq!(g.state().last_stream_id(), 1);
}

#[test]
fn sixteen_continuations_pass_and_the_count_is_per_block() {
    let mut g = guard();
    forward(&mut g, &client_start(), 0);
    for stream in [1, 3, 5] {
        let mut b = sized(HEADERS, END_STREAM, stream, 10);
        for k in 0..16 {
            let flags = if k == 15 { END_HEADERS } else { 0 };
            b.extend(sized(CONTINUATION, flags, stream, 100));
        }
        forward(&mut g, &b, 0);
    }
    assert_eq!(g.state().open_streams(), 3);
}

#[test]
fn a_header_block_must_be_contiguous() {
    let start = client_start();
    let head = cat([start.clone(), sized(HEADERS, END_STREAM, 1, 10)]);
    for (intruder, error) in [
        (ping(0), ProtocolError::HeaderBlockInterrupted),
        (
            sized(CONTINUATION, END_HEADERS, 3, 5),
            ProtocolError::HeaderBlockInterrupted,
        ),
        (window_update(1, 1), ProtocolError::HeaderBlockInterrupted),
        (sized(0x42, 0, 0, 3), ProtocolError::HeaderBlockInterrupted), // unknown type
    ] {
        let mut g = guard();
        let b = cat([head.clone(), intruder]);
        assert_eq!(
            client_all(&mut g, &b, 0),
            Fed {
                forwarded: head.len(),
                stop: Some(Stop::P(error))
            }
        );
        assert_eq!(g.state().violation(), None);
        assert_eq!(g.state().protocol_error(), Some(error));
        assert_eq!(
            g.goaway().unwrap().as_bytes()[9..],
            goaway_frame(1, PROTOCOL_ERROR)
        );
    }
    // A CONTINUATION with no block open (also after a client PUSH_PROMISE, which opens none).
    for before in [vec![], sized(PUSH_PROMISE, 0, 1, 8)] {
        let mut g = guard();
        let head = cat([start.clone(), before]);
        let b = cat([head.clone(), sized(CONTINUATION, END_HEADERS, 1, 5)]);
        assert_eq!(
            client_all(&mut g, &b, 0),
            Fed {
                forwarded: head.len(),
                stop: Some(Stop::P(ProtocolError::UnexpectedContinuation))
            }
        );
    }
}

// ---------------------------------------------------------------------------------------------
// control_frames

#[test]
fn ten_thousand_zero_window_updates_violate_after_the_burst_of_200() {
    let start = preface();
    let mut b = start.clone();
    let mut at = Vec::new();
    for _ in 0..10_000 {
        at.push(b.len());
        b.extend(window_update(0, 0));
    }
    let mut g = guard();
    assert_eq!(
        client_all(&mut g, &b, 0),
        violated(at[200], Violation::ControlFrames)
    );
}

#[test]
fn each_control_frame_kind_counts_and_the_201st_violates() {
    let kinds: [(&str, Vec<u8>); 7] = [
        ("SETTINGS", settings(&[(0x4, 65535)])),
        ("SETTINGS ACK", frame(SETTINGS, ACK, 0, &[])),
        ("PING", ping(0)),
        ("PING ACK", ping(ACK)),
        ("PRIORITY", frame(PRIORITY, 0, 3, &[0, 0, 0, 1, 16])),
        ("WINDOW_UPDATE 0 on a stream", window_update(1, 0)),
        ("empty DATA", frame(DATA, 0, 1, &[])),
    ];
    for (name, f) in kinds {
        let mut g = guard();
        let mut b = cat([preface(), frame(HEADERS, END_HEADERS, 1, &[0x83])]);
        for _ in 0..200 {
            b.extend_from_slice(&f);
        }
        let at = b.len();
        b.extend_from_slice(&f);
        assert_eq!(
            client_all(&mut g, &b, 0),
            violated(at, Violation::ControlFrames),
            "{name}"
        );
    }
}

#[test]
fn frames_that_are_not_control_frames_never_count() {
    let kinds: [(&str, Vec<u8>); 6] = [
        ("WINDOW_UPDATE with an increment", window_update(0, 1)),
        (
            "WINDOW_UPDATE with only the reserved bit",
            window_update(0, 0x8000_0001),
        ),
        ("DATA with a byte", sized(DATA, 0, 1, 1)),
        (
            "padded DATA (flow-controlled)",
            frame(DATA, PADDED, 1, &[0]),
        ),
        ("GOAWAY", frame(GOAWAY, 0, 0, &[0; 8])),
        ("unknown type", sized(0xfa, 0, 0, 4)),
    ];
    for (name, f) in kinds {
        let mut g = guard();
        let mut b = cat([preface(), frame(HEADERS, END_HEADERS, 1, &[0x83])]);
        for _ in 0..10_000 {
            b.extend_from_slice(&f);
        }
        forward(&mut g, &b, 0);
        assert_eq!(g.state().violation(), None, "{name}");
    }
    // Empty DATA with END_STREAM ends the request: a normal frame, once per stream.
    let mut g = guard();
    let mut b = preface();
    for k in 0..100 {
        b.extend(frame(HEADERS, END_HEADERS, 1 + 2 * k, &[0x83]));
        b.extend(frame(DATA, END_STREAM, 1 + 2 * k, &[]));
    }
    for k in 0..50 {
        b.extend(frame(DATA, END_STREAM, 1 + 2 * k, &[]));
    }
    forward(&mut g, &b, 0);
}

#[test]
fn control_frames_recover_at_the_configured_rate() {
    let mut g = guard();
    forward(&mut g, &preface(), 0);
    for _ in 0..200 {
        forward(&mut g, &ping(0), 0);
    }
    assert_eq!(
        client_all(&mut g, &ping(0), 0).stop,
        Some(Stop::V(Violation::ControlFrames))
    );

    let mut g = guard();
    forward(&mut g, &preface(), 0);
    for _ in 0..200 {
        forward(&mut g, &ping(0), 0);
    }
    for _ in 0..100 {
        forward(&mut g, &ping(0), SEC); // 100/s
    }
    assert_eq!(
        client_all(&mut g, &ping(0), SEC).stop,
        Some(Stop::V(Violation::ControlFrames))
    );
    // A client at 100/s forever is fine.
    let mut g = guard();
    forward(&mut g, &preface(), 0);
    for k in 0..5_000u64 {
        forward(&mut g, &ping(0), k * 10 * MS);
    }
}

// ---------------------------------------------------------------------------------------------
// Offsets

#[test]
fn the_offset_is_the_violating_frames_header_start_in_this_chunk() {
    let mut g = guard();
    let mut b = preface();
    for _ in 0..200 {
        b.extend(ping(0));
    }
    forward(&mut g, &b, 0);
    // A chunk: a harmless 13-byte frame, the violating PING, more frames.
    let chunk = cat([window_update(0, 5), ping(0), ping(0), get(1)]);
    assert_eq!(
        g.inspect_client(&chunk, 0),
        Inspect::Violation {
            at: 13,
            violation: Violation::ControlFrames
        }
    );

    // The violating header split over two chunks: its first 4 bytes are gone, so `at` is 0.
    let mut g = guard();
    forward(&mut g, &b, 0);
    let p = ping(0);
    assert_eq!(g.inspect_client(&p[..4], 0), Inspect::Forward);
    assert_eq!(
        g.inspect_client(&p[4..], 0),
        Inspect::Violation {
            at: 0,
            violation: Violation::ControlFrames
        }
    );

    // A zero WINDOW_UPDATE is known only at its 4th increment byte; `at` is still its header.
    let mut g = guard();
    let mut b = preface();
    for _ in 0..200 {
        b.extend(window_update(0, 0));
    }
    forward(&mut g, &b, 0);
    let wu = window_update(0, 0);
    let mut chunk = sized(DATA, 0, 1, 3);
    chunk.extend_from_slice(&wu[..11]);
    assert_eq!(g.inspect_client(&chunk, 0), Inspect::Forward);
    assert_eq!(
        g.inspect_client(&wu[11..], 0),
        Inspect::Violation {
            at: 0,
            violation: Violation::ControlFrames
        }
    );
}

// ---------------------------------------------------------------------------------------------
// The upstream direction: boundaries, preface, SETTINGS rewrite

#[test]
fn after_a_client_violation_the_upstream_side_stops_at_its_next_frame_boundary() {
    let mut g = guard();
    forward_upstream(&mut g, &settings(&[(0x3, 100)]), 0);
    forward(&mut g, &cat([client_start(), get(1)]), 0);
    // A 1000-byte response body is half through when the client floods.
    let body = response(1, 1000);
    let cut = body.len() - 500;
    let (out, stop) = upstream_all(&mut g, &body[..cut], 0);
    assert_eq!((out.len(), stop), (cut, None));
    assert!(!g.upstream().at_frame_boundary());
    let mut flood = Vec::new();
    for _ in 0..201 {
        flood.extend(ping(0));
    }
    assert_eq!(
        client_all(&mut g, &flood, 0).stop,
        Some(Stop::V(Violation::ControlFrames))
    );
    assert_eq!(g.goaway(), None, "mid-frame: no GOAWAY yet");
    // The rest of the DATA frame passes, nothing after it.
    let mut rest = body[cut..].to_vec();
    rest.extend(response(3, 10));
    assert_eq!(
        g.inspect_upstream(&mut rest, 0),
        Inspect::Violation {
            at: 500,
            violation: Violation::ControlFrames
        }
    );
    assert!(g.upstream().at_frame_boundary());
    assert_eq!(
        g.goaway().unwrap().as_bytes(),
        &goaway_frame(1, ENHANCE_YOUR_CALM)[..]
    );

    // At a boundary already: the GOAWAY can go at once, and the next upstream chunk stops at 0.
    let mut g = guard();
    forward_upstream(&mut g, &settings(&[]), 0);
    assert_eq!(
        client_all(&mut g, &flood_of_pings(201, true), 0).stop,
        Some(Stop::V(Violation::ControlFrames))
    );
    assert!(g.goaway().is_some());
    assert_eq!(
        g.inspect_upstream(&mut response(1, 5), 0),
        Inspect::Violation {
            at: 0,
            violation: Violation::ControlFrames
        }
    );
}

fn flood_of_pings(n: usize, with_preface: bool) -> Vec<u8> {
    let mut b = if with_preface { preface() } else { vec![] };
    for _ in 0..n {
        b.extend(ping(0));
    }
    b
}

#[test]
fn an_upstream_reset_split_over_chunks_is_finished_before_the_goaway() {
    let mut g = wide();
    forward(&mut g, &client_start(), 0);
    for k in 0..101 {
        forward(&mut g, &frame(HEADERS, END_HEADERS, 1 + 2 * k, &[0x83]), 0);
    }
    forward_upstream(&mut g, &settings(&[]), 0);
    for k in 0..100 {
        forward_upstream(&mut g, &rst(1 + 2 * k), 0);
    }
    let r = rst(201);
    let (out, stop) = upstream_all(&mut g, &r[..5], 0);
    assert_eq!((out.len(), stop), (5, None));
    let mut rest = cat([r[5..].to_vec(), response(1, 10)]);
    assert_eq!(
        g.inspect_upstream(&mut rest, 0),
        Inspect::Violation {
            at: 8,
            violation: Violation::RapidReset
        },
        "the rest of the 13-byte RST_STREAM, then stop"
    );
    assert!(g.goaway().is_some());
}

#[test]
fn a_bad_preface_is_a_protocol_error_not_a_violation() {
    let mut g = guard();
    assert_eq!(
        client_all(&mut g, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 0),
        Fed {
            forwarded: 0,
            stop: Some(Stop::P(ProtocolError::BadPreface))
        }
    );
    assert_eq!(g.state().violation(), None);
    assert_eq!(g.goaway(), None, "the client does not speak HTTP/2");
    assert_eq!(
        g.inspect_client(&preface(), 0),
        Inspect::ProtocolError {
            at: 0,
            error: ProtocolError::BadPreface
        }
    );

    // The first differing byte, wherever the chunks fall.
    let mut bad = preface();
    bad[18] = b'X';
    for cut in 1..bad.len() {
        let mut g = guard();
        assert_eq!(
            feed_client(&mut g, &bad, &[cut, 100], 0),
            Fed {
                forwarded: 18,
                stop: Some(Stop::P(ProtocolError::BadPreface))
            },
            "cut at {cut}"
        );
    }
    // A correct preface trickled one byte at a time is fine.
    let mut g = guard();
    assert_eq!(feed_client(&mut g, &client_start(), &[1], 0).stop, None);
}

/// The upstream's SETTINGS with many MAX_CONCURRENT_STREAMS values (the last one wins for the
/// client, every one is capped), other settings around them, and frames that must not change.
fn server_settings_flight() -> (Vec<u8>, Vec<u8>) {
    let values = [
        1000u32,
        50,
        100,
        101,
        99,
        0,
        0x164,
        0x1_0000,
        0x6400,
        u32::MAX,
        0x63ff_ffff,
    ];
    let mut entries = vec![(0x1u16, 4096u32), (0x4, 0x0003_0000)];
    let mut capped = entries.clone();
    for v in values {
        entries.push((0x3, v));
        capped.push((0x3, v.min(100)));
        entries.push((0x5, 0x0000_0003));
        capped.push((0x5, 0x0000_0003));
    }
    let tail = cat([
        frame(SETTINGS, ACK, 0, &[]),
        // Bytes that look like a MAX_CONCURRENT_STREAMS entry outside a SETTINGS payload.
        frame(DATA, 0, 1, &[0, 3, 0, 0, 0x10, 0]),
        frame(HEADERS, END_HEADERS, 1, &[0, 3, 0xff, 0xff, 0xff, 0xff]),
        settings(&[(0x3, 7)]),
    ]);
    (
        cat([settings(&entries), tail.clone(), settings(&[(0x3, 4000)])]),
        cat([settings(&capped), tail, settings(&[(0x3, 100)])]),
    )
}

#[test]
fn settings_max_concurrent_streams_is_capped_under_every_split() {
    let (input, expect) = server_settings_flight();
    assert_ne!(input, expect);
    let check = |cuts: &[usize]| {
        let mut g = guard();
        let mut out = Vec::new();
        let mut last = 0;
        for &c in cuts.iter().chain(std::iter::once(&input.len())) {
            let mut chunk = input[last..c].to_vec();
            assert_eq!(g.inspect_upstream(&mut chunk, 0), Inspect::Forward);
            out.extend(chunk);
            last = c;
        }
        assert_eq!(out, expect, "cuts {cuts:?}");
        assert!(g.upstream().saw_max_concurrent_streams());
    };
    check(&[]);
    for a in 1..input.len() {
        check(&[a]);
    }
    // Every pair of cuts within the first SETTINGS frame's first entries, and one byte at a time.
    for a in 1..40 {
        for b in a..60 {
            check(&[a, b]);
        }
    }
    check(&(1..input.len()).collect::<Vec<_>>());
}

#[test]
fn a_lower_cap_is_written_and_a_server_limit_below_it_stands() {
    let config = H2GuardConfig {
        max_concurrent_streams: 0x0102_0304,
        ..H2GuardConfig::default()
    };
    for (v, want) in [
        (0x0102_0305u32, 0x0102_0304u32),
        (0x0102_0303, 0x0102_0303),
        (0x0103_0000, 0x0102_0304),
        (0x0101_ffff, 0x0101_ffff),
        (0xffff_ffff, 0x0102_0304),
        (0x0102_0304, 0x0102_0304),
    ] {
        for cut in 0..=15 {
            let mut g = H2Guard::new(&config);
            let input = settings(&[(0x3, v)]);
            let (out, _) = feed_upstream(&mut g, &input, &[cut.max(1), 100], 0);
            assert_eq!(out[11..15], want.to_be_bytes(), "{v:#x} cut {cut}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Honest traffic

/// A browser-like session: 1000 requests (GETs, some POSTs with a body, some with a split header
/// block and priority fields) over 10 s, with the server's SETTINGS, ACKs, PINGs and window
/// updates. Returns timed steps.
fn honest_session(requests: u32) -> Vec<(bool, Vec<u8>, u64)> {
    let mut steps = vec![
        (
            false,
            settings(&[(0x3, 250), (0x4, 1 << 20), (0x6, 16384)]),
            0,
        ),
        (true, client_start(), 0),
        (true, frame(SETTINGS, ACK, 0, &[]), 0),
        (false, frame(SETTINGS, ACK, 0, &[]), 0),
    ];
    for k in 0..requests {
        let id = 1 + 2 * k;
        let now = u64::from(k) * 10 * MS; // 100 requests/s, 10 s for 1000
        let request = match k % 5 {
            0 => cat([
                frame(HEADERS, END_HEADERS, id, &[0x83, 0x86]),
                sized(DATA, 0, id, 300),
                sized(DATA, END_STREAM, id, 200),
            ]),
            1 => cat([
                sized(HEADERS, END_STREAM | PRIORITY_FLAG, id, 3000),
                sized(CONTINUATION, 0, id, 3000),
                sized(CONTINUATION, END_HEADERS, id, 100),
            ]),
            _ => get(id),
        };
        steps.push((true, request, now));
        if k % 10 == 0 {
            steps.push((true, window_update(0, 1 << 20), now));
            steps.push((false, ping(0), now));
            steps.push((true, ping(ACK), now));
        }
        steps.push((false, response(id, 1500), now + MS));
        steps.push((false, window_update(id, 500), now + MS));
    }
    steps
}

#[test]
fn an_honest_session_never_violates_and_ends_with_no_open_streams() {
    let mut g = guard();
    for (from_client, bytes, now) in honest_session(1000) {
        if from_client {
            forward(&mut g, &bytes, now);
        } else {
            forward_upstream(&mut g, &bytes, now);
        }
    }
    assert_eq!(g.state().open_streams(), 0);
    assert_eq!(g.state().last_stream_id(), 1999);
    assert!(!g.state().is_closing());
}

#[test]
fn a_client_keeping_100_streams_in_flight_at_the_stream_rate_never_violates() {
    let mut g = guard();
    forward_upstream(&mut g, &settings(&[(0x3, 100)]), 0);
    forward(&mut g, &client_start(), 0);
    for k in 0..100 {
        forward(&mut g, &get(1 + 2 * k), 0);
    }
    // Each 5 ms the oldest response completes and a new request goes out.
    for k in 100..3000u32 {
        let now = u64::from(k - 99) * 5 * MS;
        forward_upstream(&mut g, &response(1 + 2 * (k - 100), 100), now);
        forward(&mut g, &get(1 + 2 * k), now);
        assert_eq!(g.state().open_streams(), 100);
    }
}

// ---------------------------------------------------------------------------------------------
// Every chunking gives the same outcome

/// A client stream that violates (or fails) at a known frame: `frame_at` is the offset of its
/// header, `decided_at` the offset of the byte that decides (last header byte, or last
/// increment byte of a WINDOW_UPDATE).
struct Attack {
    name: &'static str,
    bytes: Vec<u8>,
    stop: Stop,
    frame_at: usize,
    decided_at: usize,
}

fn attacks() -> Vec<Attack> {
    let mut v = Vec::new();
    let mut add = |name, bytes: Vec<u8>, tail: Vec<u8>, stop, decide_offset| {
        let frame_at = bytes.len();
        let mut bytes = bytes;
        bytes.extend(tail);
        v.push(Attack {
            name,
            bytes,
            stop,
            frame_at,
            decided_at: frame_at + decide_offset,
        });
    };
    let start = client_start();

    let mut b = start.clone();
    for k in 0..100 {
        b.extend(get(1 + 2 * k));
    }
    add(
        "concurrent",
        b,
        cat([get(201), get(203)]),
        Stop::V(Violation::ConcurrentStreams),
        8,
    );

    let mut b = start.clone();
    for k in 0..100 {
        b.extend(get(1 + 2 * k));
        b.extend(rst(1 + 2 * k));
    }
    add(
        "rapid reset",
        b,
        cat([get(201), rst(201)]),
        Stop::V(Violation::RapidReset),
        8,
    );

    let mut b = cat([start.clone(), sized(HEADERS, 0, 1, 7)]);
    for _ in 0..16 {
        b.extend(sized(CONTINUATION, 0, 1, 3));
    }
    add(
        "continuation",
        b,
        sized(CONTINUATION, 0, 1, 3),
        Stop::V(Violation::Continuation),
        8,
    );

    let b = cat([start.clone(), sized(HEADERS, 0, 1, 40000)]);
    add(
        "header block",
        b,
        sized(CONTINUATION, END_HEADERS, 1, 30000),
        Stop::V(Violation::HeaderBlock),
        8,
    );

    let mut b = start.clone();
    for _ in 0..198 {
        b.extend(window_update(0, 0)); // + SETTINGS in client_start = 199 control frames
    }
    b.extend(ping(0));
    add(
        "zero window updates",
        b,
        window_update(3, 0),
        Stop::V(Violation::ControlFrames),
        12,
    );

    let mut b = start.clone();
    b.extend(sized(HEADERS, 0, 1, 7));
    add(
        "interrupted block",
        b,
        ping(0),
        Stop::P(ProtocolError::HeaderBlockInterrupted),
        8,
    );

    let mut b = preface();
    b[20] = b'x';
    v.push(Attack {
        name: "bad preface",
        bytes: b,
        stop: Stop::P(ProtocolError::BadPreface),
        frame_at: 20,
        decided_at: 20,
    });
    v
}

/// What a chunking must forward: everything before the frame, or, when the deciding byte's
/// chunk starts later (the frame's first bytes went out with an earlier chunk), up to that
/// chunk's start.
fn expected_forwarded(a: &Attack, sizes: &[usize]) -> usize {
    let mut pos = 0;
    let mut k = 0;
    loop {
        let n = sizes[k % sizes.len()].max(1);
        k += 1;
        if a.decided_at < pos + n {
            return a.frame_at.max(pos);
        }
        pos += n;
    }
}

#[test]
fn attacks_fed_whole_and_one_byte_at_a_time() {
    for a in attacks() {
        for sizes in [vec![a.bytes.len()], vec![1], vec![9], vec![13, 4, 1]] {
            let mut g = guard();
            let fed = feed_client(&mut g, &a.bytes, &sizes, 0);
            assert_eq!(
                fed,
                Fed {
                    forwarded: expected_forwarded(&a, &sizes),
                    stop: Some(a.stop)
                },
                "{} in chunks of {sizes:?}",
                a.name
            );
        }
        let mut g = guard();
        assert_eq!(
            feed_client(&mut g, &a.bytes, &[1], 0).forwarded,
            a.decided_at,
            "{}",
            a.name
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn attacks_under_random_chunking(sizes in prop::collection::vec(1usize..600, 1..40)) {
        for a in attacks() {
            let mut g = guard();
            let fed = feed_client(&mut g, &a.bytes, &sizes, 0);
            prop_assert_eq!(&fed.stop, &Some(a.stop), "{}", a.name);
            prop_assert_eq!(fed.forwarded, expected_forwarded(&a, &sizes), "{}", a.name);
        }
    }

    #[test]
    fn an_honest_session_under_random_chunking_is_forwarded_whole(
        client_sizes in prop::collection::vec(1usize..300, 1..20),
        upstream_sizes in prop::collection::vec(1usize..300, 1..20),
    ) {
        let mut g = guard();
        let mut reference = guard();
        for (from_client, bytes, now) in honest_session(60) {
            if from_client {
                let fed = feed_client(&mut g, &bytes, &client_sizes, now);
                prop_assert_eq!(fed, Fed { forwarded: bytes.len(), stop: None });
                forward(&mut reference, &bytes, now);
            } else {
                let (out, stop) = feed_upstream(&mut g, &bytes, &upstream_sizes, now);
                let (want, _) = upstream_all(&mut reference, &bytes, now);
                prop_assert_eq!(stop, None);
                prop_assert_eq!(out, want);
            }
        }
        prop_assert_eq!(g.state().open_streams(), 0);
    }

    #[test]
    fn the_capped_value_is_min_of_value_and_cap_under_any_split(
        value in any::<u32>(),
        cap in 1u32..,
        before in prop::collection::vec((0u16..8, any::<u32>()), 0..4),
        cuts in prop::collection::vec(1usize..12, 1..10),
    ) {
        let config = H2GuardConfig { max_concurrent_streams: cap, ..H2GuardConfig::default() };
        let mut entries: Vec<(u16, u32)> =
            before.iter().copied().filter(|&(id, _)| id != 3).collect();
        let at = 9 + 6 * entries.len() + 2;
        entries.push((0x3, value));
        let input = settings(&entries);
        let mut g = H2Guard::new(&config);
        let (out, stop) = feed_upstream(&mut g, &input, &cuts, 0);
        prop_assert_eq!(stop, None);
        prop_assert_eq!(&out[..at], &input[..at]);
        prop_assert_eq!(&out[at..], &value.min(cap).to_be_bytes()[..]);
    }

    #[test]
    fn the_same_timed_flood_has_the_same_outcome_in_any_chunking(
        sizes in prop::collection::vec(1usize..40, 1..20),
        gap_us in 0u64..20_000,
    ) {
        // Pairs HEADERS + RST_STREAM every `gap_us`, one pair per step (time passes between
        // steps); each step's bytes fed in `sizes` chunks must match the same step fed whole.
        let start = client_start();
        let (mut g, mut r) = (guard(), guard());
        prop_assert_eq!(feed_client(&mut g, &start, &sizes, 0).stop, None);
        forward(&mut r, &start, 0);
        for k in 0..400u32 {
            let now = u64::from(k) * gap_us * 1_000;
            let pair = cat([get(1 + 2 * k), rst(1 + 2 * k)]);
            let a = feed_client(&mut g, &pair, &sizes, now);
            let b = client_all(&mut r, &pair, now);
            prop_assert_eq!(a.stop, b.stop, "pair {}", k);
            if b.stop.is_some() {
                break;
            }
        }
    }
}

#[test]
fn inspecting_allocates_nothing() {
    // An honest session and then 100 streams kept open, every chunk prepared beforehand.
    let mut steps = honest_session(300);
    for k in 0..100 {
        steps.push((true, get(601 + 2 * k), 5 * SEC));
    }
    for k in 0..100 {
        steps.push((false, response(601 + 2 * k, 10), 5 * SEC));
    }
    let mut g = guard();
    let probe = allocations();
    drop(std::hint::black_box(Box::new(1u8)));
    assert_eq!(allocations(), probe + 1, "the counter counts");
    let before = allocations();
    for (from_client, bytes, now) in steps.iter_mut() {
        for chunk in bytes.chunks_mut(7) {
            let r = if *from_client {
                g.inspect_client(chunk, *now)
            } else {
                g.inspect_upstream(chunk, *now)
            };
            assert_eq!(r, Inspect::Forward);
        }
    }
    let _ = g.goaway();
    assert_eq!(allocations(), before);
    assert_eq!(g.state().open_streams(), 0);
}

#[test]
fn the_clocked_forms_read_the_clock_at_most_once_per_chunk_and_only_when_a_decision_needs_it() {
    let reads = std::cell::Cell::new(0u32);
    let clock = || {
        reads.set(reads.get() + 1);
        7 * SEC
    };
    let mut g = H2Guard::new(&H2GuardConfig::default());
    // The preface and SETTINGS (a control frame): one read for the whole chunk.
    let start = client_start();
    assert_eq!(g.inspect_client_clocked(&start, clock), Inspect::Forward);
    assert_eq!(reads.get(), 1);
    // Ten new streams in one chunk: one read.
    let gets: Vec<u8> = (0..10).flat_map(|k| get(1 + 2 * k)).collect();
    assert_eq!(g.inspect_client_clocked(&gets, clock), Inspect::Forward);
    assert_eq!(reads.get(), 2);
    // Their responses, and the upstream's SETTINGS: no decision needs the time.
    let mut up = settings(&[(0x3, 100)]);
    for k in 0..10 {
        up.extend(response(1 + 2 * k, 100));
    }
    assert_eq!(g.inspect_upstream_clocked(&mut up, clock), Inspect::Forward);
    assert_eq!(reads.get(), 2);
    // DATA with a payload and a RST_STREAM of a finished stream (not counted): none either.
    forward(&mut g, &frame(HEADERS, END_HEADERS, 21, &[0x83]), 7 * SEC);
    let data = cat([sized(DATA, 0, 21, 10), rst(1)]);
    assert_eq!(g.inspect_client_clocked(&data, clock), Inspect::Forward);
    assert_eq!(reads.get(), 2);
    // An upstream reset of an open stream: one read.
    let mut r = rst(21);
    assert_eq!(g.inspect_upstream_clocked(&mut r, clock), Inspect::Forward);
    assert_eq!(reads.get(), 3);
}

/// Rapid reset spread over three connections of one client: the client's budget (the
/// per-connection one × `clientFactor`, 2) is shared, so the third connection's first reset is
/// over it.
#[test]
fn the_client_budget_is_shared_by_its_connections() {
    use rampart::protection::dynamic::DynamicBlocks;
    use rampart::protection::Engine;
    use std::sync::Arc;
    let e = Engine::new(443, Arc::new(DynamicBlocks::default()));
    let ip = "192.0.2.7".parse().expect("ip");
    let config = H2GuardConfig::default();
    // Rapid reset: each connection's own burst is 100 resets, the client's 200.
    let mut a = H2Guard::with(&config, (), e.h2_client_budget(ip));
    let mut b = H2Guard::with(&config, (), e.h2_client_budget(ip));
    let mut third = H2Guard::with(&config, (), e.h2_client_budget(ip));
    let pairs = |g: &mut H2Guard<(), _>, from: u32, n: u32| {
        let mut c = Vec::new();
        for k in 0..n {
            let id = from + 2 * k;
            c.extend(get(id));
            c.extend(rst(id));
        }
        g.inspect_client(&c, MS)
    };
    for g in [&mut a, &mut b, &mut third] {
        assert_eq!(g.inspect_client(&client_start(), MS), Inspect::Forward);
    }
    assert_eq!(pairs(&mut a, 1, 100), Inspect::Forward);
    // The second connection has 100 of its own, but the client's 200 run out at its 100th.
    assert_eq!(pairs(&mut b, 1, 100), Inspect::Forward);
    // The third connection's first reset is over the client's budget.
    let got = pairs(&mut third, 1, 1);
    assert!(
        matches!(
            got,
            Inspect::Violation {
                violation: Violation::RapidReset,
                ..
            }
        ),
        "{got:?}"
    );
}
