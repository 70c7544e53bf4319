//! Property tests for the ClientHello parser (110 000 cases in all, about 15 s in debug):
//! - arbitrary bytes, mutated real hellos and hellos with inflated length fields: no panic, a `record_bytes` inside the input, and
//!   heap allocation bounded by a constant times `min(input length, MAX_HELLO_BYTES)` (counted by
//!   a global allocator wrapper, per thread);
//! - arbitrary splits: a verdict other than `Incomplete` on a prefix is the verdict on every
//!   longer input, and a `Complete` hello does not depend on any byte after `record_bytes`;
//! - every proper prefix of a valid hello is `Incomplete` and the whole gives the one-shot result;
//! - random hellos encoded in random record framings decode to exactly their fields, and their
//!   JA3 / JA4 pass the blocklist validators.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
use common::hello::{u16_vec, with_u16_len, with_u8_len};
use common::prereq;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fs;
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::sample::select;
use rampart::tls::clienthello::{parse_client_hello, ClientHello, HelloParse, MAX_HELLO_BYTES};
use rampart::tls::ja3::validate_ja3;
use rampart::tls::ja4::validate_ja4;

// ---------------------------------------------------------------------------------------------
// Allocation counting

/// The system allocator, counting the bytes requested by the current thread.
struct Counting;

thread_local! {
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
}

fn count(bytes: usize) {
    let _ = ALLOCATED.try_with(|c| c.set(c.get().saturating_add(bytes)));
}

// SAFETY: forwards every call to `System` unchanged; only adds a thread-local counter.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract for `alloc`, passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: `ptr` and `layout` come from this allocator, which is `System`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap bytes allocated per byte of (capped) input, at most: the worst case is a list of empty
/// ALPN names, one 24-byte `Vec` per input byte.
const ALLOC_PER_INPUT_BYTE: usize = 24;
/// Constant part of the bound (a list counted one item past what the input holds).
const ALLOC_SLACK: usize = 64;

/// Parses `buf`, checks the allocation bound and the `record_bytes` range, returns the verdict.
fn parse_checked(buf: &[u8]) -> HelloParse {
    let before = ALLOCATED.with(Cell::get);
    let verdict = parse_client_hello(buf);
    let allocated = ALLOCATED.with(Cell::get) - before;
    let bound = ALLOC_PER_INPUT_BYTE * buf.len().min(MAX_HELLO_BYTES) + ALLOC_SLACK;
    assert!(
        allocated <= bound,
        "allocated {allocated} bytes for {} input bytes (bound {bound})",
        buf.len()
    );
    if let HelloParse::Complete(h) = &verdict {
        assert!(h.record_bytes <= buf.len() && h.record_bytes <= MAX_HELLO_BYTES);
        assert!(h.record_bytes >= 5 + 4 + 38);
    }
    verdict
}

// ---------------------------------------------------------------------------------------------
// Seed hellos: the reference fixtures plus built ones (so the properties run without fixtures)

/// Frames `payload` into handshake records whose sizes cycle through `sizes` (each >= 1).
fn records(payload: &[u8], sizes: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = payload;
    let mut i = 0;
    while !rest.is_empty() {
        let n = sizes[i % sizes.len()].clamp(1, 1 << 14).min(rest.len());
        i += 1;
        out.extend([0x16, 0x03, 0x01]);
        out.extend((n as u16).to_be_bytes());
        out.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
    out
}

/// Encodes `h` (its lists, SNI and ALPN) as a ClientHello handshake message. Extensions are
/// written in `h.extensions` order; types other than the decoded ones get `filler` bytes.
fn encode(h: &ClientHello, sni_raw: Option<&[u8]>, filler: &[u8]) -> Vec<u8> {
    let mut body = h.legacy_version.to_be_bytes().to_vec();
    body.extend([0x11; 32]);
    body.extend(with_u8_len(&[0x22; 32]));
    body.extend(with_u16_len(&u16_vec(&h.cipher_suites)));
    body.extend([1, 0]);
    let mut block = Vec::new();
    for &ty in &h.extensions {
        let data = match ty {
            0x0000 => {
                let mut entry = vec![0u8];
                entry.extend(with_u16_len(sni_raw.unwrap_or_default()));
                with_u16_len(&entry)
            }
            0x000a => with_u16_len(&u16_vec(&h.supported_groups)),
            0x000b => with_u8_len(&h.ec_point_formats),
            0x000d => with_u16_len(&u16_vec(&h.signature_algorithms)),
            0x0010 => {
                let list: Vec<u8> = h.alpn.iter().flat_map(|n| with_u8_len(n)).collect();
                with_u16_len(&list)
            }
            0x002b => with_u8_len(&u16_vec(&h.supported_versions)),
            _ => filler.to_vec(),
        };
        block.extend(ty.to_be_bytes());
        block.extend(with_u16_len(&data));
    }
    body.extend(with_u16_len(&block));
    let len = body.len() as u32;
    let mut msg = vec![1, (len >> 16) as u8, (len >> 8) as u8, len as u8];
    msg.extend(body);
    msg
}

fn built_seed() -> Vec<u8> {
    let h = ClientHello {
        legacy_version: 0x0303,
        cipher_suites: vec![0x2a2a, 0x1301, 0x1302, 0xc02b],
        extensions: vec![
            0x3a3a, 0x0000, 0x0010, 0x002b, 0x000a, 0x000b, 0x000d, 0x0015,
        ],
        supported_versions: vec![0x4a4a, 0x0304, 0x0303],
        supported_groups: vec![0x001d, 0x0017],
        ec_point_formats: vec![0],
        signature_algorithms: vec![0x0403, 0x0804],
        alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        ..ClientHello::default()
    };
    records(&encode(&h, Some(b"seed.example"), &[0; 20]), &[200, 7])
}

/// Valid hello record streams: every fixture `.bin` (when the folder exists) and a built one.
fn seeds() -> &'static [Vec<u8>] {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let mut out = vec![built_seed()];
        // Without the folder the properties still run on the built hello, but a CI run must
        // not lose the reference captures silently.
        let found = common::fixtures::shared_fixture_dir("clienthello")
            .map_err(|why| format!("no reference seeds, {why}; seeding with a built hello only"));
        if let Some(dir) = prereq::require(found) {
            let mut bins: Vec<_> = fs::read_dir(&dir)
                .expect("fixture dir")
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "bin"))
                .collect();
            bins.sort();
            assert!(!bins.is_empty(), "no .bin in {}", dir.display());
            out.extend(bins.iter().map(|p| fs::read(p).expect("fixture")));
        }
        out
    })
}

fn seed() -> impl Strategy<Value = Vec<u8>> {
    (0..seeds().len()).prop_map(|i| seeds()[i].clone())
}

/// One edit of a byte buffer.
#[derive(Debug, Clone)]
enum Edit {
    Set(usize, u8),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
    Truncate(usize),
}

fn apply(buf: &mut Vec<u8>, edit: &Edit) {
    let at = |i: usize, len: usize| if len == 0 { 0 } else { i % (len + 1) };
    match edit {
        Edit::Set(i, b) => {
            if !buf.is_empty() {
                let n = buf.len();
                buf[i % n] = *b;
            }
        }
        Edit::Insert(i, bytes) => {
            let i = at(*i, buf.len());
            buf.splice(i..i, bytes.iter().copied());
        }
        Edit::Remove(i, n) => {
            let i = at(*i, buf.len());
            let end = (i + n).min(buf.len());
            buf.drain(i..end);
        }
        Edit::Truncate(i) => {
            let i = at(*i, buf.len());
            buf.truncate(i);
        }
    }
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        6 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        2 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..8)).prop_map(|(i, v)| Edit::Insert(i, v)),
        2 => (any::<usize>(), 1usize..8).prop_map(|(i, n)| Edit::Remove(i, n)),
        1 => any::<usize>().prop_map(Edit::Truncate),
    ]
}

/// A real hello with 1–6 random edits (so most inputs get deep into the parser).
fn mutated_seed() -> impl Strategy<Value = Vec<u8>> {
    (seed(), prop::collection::vec(edit(), 1..6)).prop_map(|(mut buf, edits)| {
        for e in &edits {
            apply(&mut buf, e);
        }
        buf
    })
}

/// A real hello whose message length is raised (up to what one record can carry) and 1–4 random
/// 16-bit fields are set to large values, cut short: inputs whose length fields promise far more
/// than the input holds, to check that allocation follows the input, not the promises.
fn inflated_stream() -> impl Strategy<Value = Vec<u8>> {
    (
        seed(),
        0usize..=16_000,
        prop::collection::vec((any::<prop::sample::Index>(), 0x0100u16..=0x3fff), 1..4),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(buf, declared, fields, keep)| {
            let mut msg = unframe(&buf);
            for (at, value) in fields {
                let i = 4 + at.index(msg.len() - 5);
                msg[i..i + 2].copy_from_slice(&value.to_be_bytes());
            }
            let body = (msg.len() - 4).max(declared).min((1 << 14) - 4);
            msg[1..4].copy_from_slice(&(body as u32).to_be_bytes()[1..]);
            let mut stream = vec![0x16, 0x03, 0x01];
            stream.extend(((body + 4) as u16).to_be_bytes());
            stream.extend(msg);
            stream.truncate(keep.index(stream.len() + 1));
            stream
        })
}

/// Arbitrary bytes, half of them behind a plausible record header.
fn arbitrary_stream() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..400),
        (
            any::<u8>(),
            any::<u16>(),
            any::<u8>(),
            prop::collection::vec(any::<u8>(), 0..400)
        )
            .prop_map(|(minor, len, hs_type, rest)| {
                let mut v = vec![0x16, 0x03, minor % 5];
                v.extend((len % 600).to_be_bytes());
                v.push(if hs_type < 200 { 1 } else { hs_type });
                v.extend(rest);
                v
            }),
    ]
}

/// Checks that the verdict on `buf[..k]` is consistent with the verdict on `buf`.
fn check_split(buf: &[u8], k: usize) {
    let k = k.min(buf.len());
    let whole = parse_checked(buf);
    let prefix = parse_checked(&buf[..k]);
    if prefix != HelloParse::Incomplete {
        assert_eq!(
            prefix, whole,
            "verdict on {k} bytes changed when more arrived"
        );
    }
    if let HelloParse::Complete(h) = &whole {
        assert_eq!(parse_checked(&buf[..h.record_bytes]), whole);
        if k < h.record_bytes {
            assert_eq!(prefix, HelloParse::Incomplete);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Properties

proptest! {
    #![proptest_config(ProptestConfig::with_cases(25_000))]

    #[test]
    fn arbitrary_bytes_never_panic_and_allocate_little(buf in arbitrary_stream(), k in any::<usize>()) {
        check_split(&buf, k % (buf.len() + 1));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(25_000))]

    #[test]
    fn mutated_hellos_never_panic_and_split_consistently(buf in mutated_seed(), k in any::<usize>()) {
        check_split(&buf, k % (buf.len() + 1));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn inflated_lengths_allocate_in_proportion_to_the_input(buf in inflated_stream(), k in any::<usize>()) {
        check_split(&buf, k % (buf.len() + 1));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(15_000))]

    #[test]
    fn prefixes_of_valid_hellos_are_incomplete(
        buf in seed(),
        sizes in prop::collection::vec(1usize..300, 1..5),
        cut in any::<usize>(),
        tail in prop::collection::vec(any::<u8>(), 0..16),
    ) {
        // The same hello, re-framed in random record sizes.
        let stream = records(&unframe(&buf), &sizes);
        prop_assume!(stream.len() <= MAX_HELLO_BYTES);
        let whole = parse_checked(&stream);
        let HelloParse::Complete(hello) = &whole else {
            panic!("valid hello not Complete: {whole:?}");
        };
        prop_assert_eq!(hello.record_bytes, stream.len());
        let n = cut % stream.len();
        prop_assert_eq!(parse_checked(&stream[..n]), HelloParse::Incomplete);
        let mut longer = stream.clone();
        longer.extend(&tail);
        prop_assert_eq!(&parse_checked(&longer), &whole);
        // Same fields as the original framing, but for record_bytes.
        let HelloParse::Complete(mut original) = parse_checked(&buf) else { panic!() };
        original.record_bytes = hello.record_bytes;
        prop_assert_eq!(&original, hello);
    }
}

fn hello_fields() -> impl Strategy<Value = (ClientHello, Option<Vec<u8>>, Vec<u8>)> {
    let u16s = |max| prop::collection::vec(any::<u16>(), 0..max);
    let host_char = select(
        b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._ \x00\xff".to_vec(),
    );
    (
        any::<u16>(),
        u16s(120),
        prop::collection::hash_set(any::<u16>(), 0..30),
        (
            u16s(20),
            u16s(20),
            u16s(30),
            prop::collection::vec(any::<u8>(), 0..6),
        ),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 0..5),
        prop::option::of(prop::collection::vec(host_char, 0..70)),
        prop::collection::vec(any::<u8>(), 0..10),
        any::<u8>(),
        any::<prop::sample::Index>(),
    )
        .prop_map(
            |(
                version,
                ciphers,
                types,
                (versions, groups, sigs, formats),
                alpn,
                sni,
                filler,
                mask,
                rotate,
            )| {
                let mut extensions: Vec<u16> = types.into_iter().collect();
                // Each decoded extension present with probability one half, at a random place.
                for (bit, ty) in [0x0000u16, 0x000a, 0x000b, 0x000d, 0x0010, 0x002b]
                    .into_iter()
                    .enumerate()
                {
                    if mask & (1 << bit) != 0 && !extensions.contains(&ty) {
                        extensions.push(ty);
                    }
                }
                let mid = rotate.index(extensions.len().max(1));
                extensions.rotate_left(mid);
                let has = |ty: u16| extensions.contains(&ty);
                let sni_raw = if has(0) {
                    Some(sni.unwrap_or_default())
                } else {
                    None
                };
                let sni = sni_raw.as_ref().and_then(|n| {
                    let ok = !n.is_empty()
                        && n.len() <= 254
                        && n.iter()
                            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(b));
                    ok.then(|| String::from_utf8(n.clone()).unwrap())
                });
                let h = ClientHello {
                    record_bytes: 0,
                    legacy_version: version,
                    supported_versions: if has(0x002b) { versions } else { vec![] },
                    cipher_suites: ciphers,
                    supported_groups: if has(0x000a) { groups } else { vec![] },
                    ec_point_formats: if has(0x000b) { formats } else { vec![] },
                    signature_algorithms: if has(0x000d) { sigs } else { vec![] },
                    alpn: if has(0x0010) { alpn } else { vec![] },
                    sni,
                    extensions,
                };
                (h, sni_raw, filler)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(25_000))]

    #[test]
    fn random_hellos_round_trip_in_any_framing(
        (expected, sni_raw, filler) in hello_fields(),
        sizes in prop::collection::vec(1usize..400, 1..4),
        cut in any::<usize>(),
    ) {
        let message = encode(&expected, sni_raw.as_deref(), &filler);
        let stream = records(&message, &sizes);
        let verdict = parse_checked(&stream);
        if stream.len() > MAX_HELLO_BYTES {
            prop_assert!(matches!(verdict, HelloParse::Malformed(_)));
            return Ok(());
        }
        let HelloParse::Complete(hello) = verdict else {
            panic!("encoded hello not Complete: {verdict:?}");
        };
        prop_assert_eq!(hello.record_bytes, stream.len());
        let mut expected = expected;
        expected.record_bytes = stream.len();
        prop_assert_eq!(&hello, &expected);
        prop_assert_eq!(parse_checked(&stream[..cut % stream.len()]), HelloParse::Incomplete);
        // Whatever the hello, its fingerprints are well-formed blocklist entries.
        prop_assert_eq!(validate_ja3(&hello.ja3()), Ok(hello.ja3()));
        let ja4 = hello.ja4();
        prop_assert_eq!(validate_ja4(&ja4), Ok(ja4.to_ascii_lowercase()));
        prop_assert!(hello.ja4_r().starts_with(&ja4[..11]));
    }
}

#[test]
fn worst_case_allocation_is_within_the_bound() {
    // A 16 KiB hello whose ALPN list is all empty names.
    let base = ClientHello {
        legacy_version: 0x0303,
        cipher_suites: vec![0x1301],
        extensions: vec![0x0010],
        ..ClientHello::default()
    };
    let room = MAX_HELLO_BYTES - 5 - encode(&base, None, &[]).len();
    let hello = ClientHello {
        alpn: vec![Vec::new(); room],
        ..base
    };
    let stream = records(&encode(&hello, None, &[]), &[1 << 14]);
    assert_eq!(stream.len(), MAX_HELLO_BYTES);
    let before = ALLOCATED.with(Cell::get);
    let verdict = parse_client_hello(&stream);
    let allocated = ALLOCATED.with(Cell::get) - before;
    let HelloParse::Complete(parsed) = &verdict else {
        panic!("{verdict:?}");
    };
    assert_eq!(parsed.alpn.len(), room);
    // Dropping the hello is not counted; only what parsing asked for.
    assert_eq!(
        allocated,
        24 * room + 2 + 2,
        "one Vec per name, 1 cipher, 1 extension"
    );
    assert!(allocated <= ALLOC_PER_INPUT_BYTE * stream.len() + ALLOC_SLACK);
    // Split in 1000-byte records, mid-list: still one allocation per list.
    let stream = records(&encode(&hello, None, &[]), &[1000]);
    assert!(matches!(parse_checked(&stream), HelloParse::Malformed(_)));
    let small = ClientHello {
        alpn: vec![Vec::new(); 5000],
        ..hello
    };
    let stream = records(&encode(&small, None, &[]), &[1000]);
    let before = ALLOCATED.with(Cell::get);
    let verdict = parse_client_hello(&stream);
    let allocated = ALLOCATED.with(Cell::get) - before;
    assert!(matches!(verdict, HelloParse::Complete(_)));
    assert_eq!(allocated, 24 * 5000 + 2 + 2);
}

/// The handshake bytes carried by a valid record stream.
fn unframe(stream: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 5 <= stream.len() {
        let len = usize::from(u16::from_be_bytes([stream[i + 3], stream[i + 4]]));
        out.extend_from_slice(&stream[i + 5..i + 5 + len]);
        i += 5 + len;
    }
    out
}
