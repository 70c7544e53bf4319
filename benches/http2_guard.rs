//! What the HTTP/2 guard costs per request on the traffic of `npm run bench:h2` (h2load -m 32):
//! one client chunk holding 32 GET HEADERS (END_STREAM), then one upstream chunk holding their 32
//! responses (HEADERS, then a 64-byte DATA with END_STREAM), repeated on one connection; and a
//! 16 KiB chunk holding one whole DATA frame (a download), where the guard reads one header and
//! skips the payload.
//!
//! `cargo bench --bench http2_guard`
#![allow(missing_docs)] // criterion_main! generates an undocumented `main`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rampart::http2::{H2Guard, H2GuardConfig, Inspect, PREFACE};

const HEADERS: u8 = 0x1;
const DATA: u8 = 0x0;
const SETTINGS: u8 = 0x4;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const STREAMS: u32 = 32;

fn frame(out: &mut Vec<u8>, ty: u8, flags: u8, stream: u32, len: usize) {
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[ty, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.resize(out.len() + len, 0x82);
}

/// Round `r`'s client chunk (32 requests) and upstream chunk (32 responses).
fn round(r: u32) -> (Vec<u8>, Vec<u8>) {
    let (mut c, mut u) = (Vec::new(), Vec::new());
    for k in 0..STREAMS {
        let id = 1 + 2 * (r * STREAMS + k);
        frame(&mut c, HEADERS, END_STREAM | END_HEADERS, id, 12);
        frame(&mut u, HEADERS, END_HEADERS, id, 6);
        frame(&mut u, DATA, END_STREAM, id, 64);
    }
    (c, u)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("http2_guard");
    g.throughput(Throughput::Elements(u64::from(STREAMS)));
    // Stream ids grow by 64 per round; 2^30 ids last 16M rounds, far more than criterion runs.
    g.bench_function("32 requests + 32 responses, per request", |b| {
        let mut guard = H2Guard::new(&H2GuardConfig::default());
        let mut start = PREFACE.to_vec();
        frame(&mut start, SETTINGS, 0, 0, 0);
        assert_eq!(guard.inspect_client(&start, 0), Inspect::Forward);
        let mut up = Vec::new();
        frame(&mut up, SETTINGS, 0, 0, 0);
        assert_eq!(guard.inspect_upstream(&mut up, 0), Inspect::Forward);
        let (mut r, mut now) = (0u32, 1u64);
        b.iter_batched(
            || {
                r += 1;
                round(r)
            },
            |(client, mut upstream)| {
                now += 1_000_000;
                let a = guard.inspect_client(black_box(&client), now);
                let b = guard.inspect_upstream(black_box(&mut upstream), now);
                debug_assert_eq!((a, b), (Inspect::Forward, Inspect::Forward));
                black_box((a, b))
            },
            criterion::BatchSize::SmallInput,
        );
    });
    g.finish();

    let mut g = c.benchmark_group("http2_guard");
    g.throughput(Throughput::Bytes(16 * 1024));
    g.bench_function("16 KiB chunk: one whole DATA frame", |b| {
        let mut guard = H2Guard::new(&H2GuardConfig::default());
        let mut up = Vec::new();
        frame(&mut up, SETTINGS, 0, 0, 0);
        assert_eq!(guard.inspect_upstream(&mut up, 0), Inspect::Forward);
        let mut chunk = Vec::new();
        frame(&mut chunk, DATA, 0, 1, 16 * 1024 - 9);
        b.iter(|| black_box(guard.inspect_upstream(black_box(&mut chunk), 0)));
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
