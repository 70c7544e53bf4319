//! ClientHello peek: reassembles and decodes the first TLS handshake message of a connection from
//! the raw bytes peeked off the socket, before any TLS library sees them.
//!
//! # What it reads
//! The input is a prefix of the client's byte stream, starting at the first TLS record header
//! (RFC 8446 §5.1, RFC 5246 §6.2.1): `type(1) = 22 handshake, version(2) = 3.x, length(2)`, then
//! the fragment. The ClientHello handshake message (`msg_type(1) = 1, length(3)`, RFC 8446 §4.1.2)
//! may be cut into any number of records at any byte (even 1-byte records), and the records may
//! arrive cut into any number of TCP segments. The parser walks the records lazily with a cursor
//! that steps over record headers, so the message is decoded in place, never copied into a
//! reassembly buffer.
//!
//! # Verdicts
//! [`parse_client_hello`] is a pure function of the bytes seen so far and is meant to be called
//! again with a longer prefix each time more bytes arrive:
//! - [`HelloParse::Incomplete`] only when every byte seen so far is a valid beginning of a
//!   ClientHello record stream (each length field is checked as soon as it is read);
//! - [`HelloParse::NotTls`] when the first record header is not a TLS handshake record (plain
//!   HTTP, an SSLv2-style hello, another record type);
//! - [`HelloParse::Malformed`] when the stream breaks TLS framing: a length that overruns its
//!   container, a container not exactly filled, an odd length for a vector of 16-bit values, a
//!   `session_id` over 32 bytes, a duplicate extension type (RFC 8446 §4.2), a handshake message
//!   that is not a ClientHello, an empty or over-2^14 record, a non-handshake record before the
//!   hello ends, a record that carries bytes after the hello (RFC 8446 §5.1: the hello must end on
//!   a record boundary), or a hello whose records exceed [`MAX_HELLO_BYTES`];
//! - [`HelloParse::Complete`] once the last record carrying the hello is in. Bytes after it
//!   (early data, garbage) are never read.
//!
//! A verdict other than `Incomplete` never changes when more bytes are appended.
//! Vectors below their RFC minimum (an empty cipher list, an empty ALPN name, an empty
//! `server_name` list) are accepted: they are decodable, the fingerprints define a value for them
//! (JA4 `00` and `000000000000`), and refusing them is the TLS library's job.
//!
//! # Cost and bounds
//! One pass over at most [`MAX_HELLO_BYTES`] of input, with a fixed 8 KiB bitmap on the stack for
//! duplicate extension detection. No reassembly copy; the only heap allocations are the output
//! vectors, each allocated once at the size of what the input holds (a read-only pre-pass counts
//! list items), so a parse allocates at most 24 bytes per input byte of
//! `min(input length, MAX_HELLO_BYTES)` plus a few dozen bytes (the worst case is a list of empty
//! ALPN names: one 24-byte `Vec` per byte). Every access is checked; the parser never panics and
//! never looks past the record that ends the hello.

/// Hard cap on the bytes of record stream we accept for one ClientHello: 16 KiB, record headers
/// included. A hello whose records would reach past this offset is [`HelloParse::Malformed`]
/// (real clients send 0.2–2 KiB, post-quantum key shares included).
pub const MAX_HELLO_BYTES: usize = 16 * 1024;

/// TLS record content type `handshake` (RFC 8446 §5.1).
const CONTENT_HANDSHAKE: u8 = 22;
/// Handshake message type `client_hello` (RFC 8446 §4).
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
/// Maximum plaintext record fragment length, 2^14 bytes (RFC 8446 §5.1).
const MAX_FRAGMENT: usize = 1 << 14;
/// Record header length in bytes: type, version, length.
const RECORD_HEADER: usize = 5;

/// Extension type codes this parser decodes (IANA "TLS ExtensionType Values").
pub(crate) mod ext {
    /// `server_name` (SNI), RFC 6066 §3.
    pub(crate) const SERVER_NAME: u16 = 0x0000;
    /// `supported_groups` (formerly `elliptic_curves`), RFC 8422 §5.1.1 / RFC 8446 §4.2.7.
    pub(crate) const SUPPORTED_GROUPS: u16 = 0x000a;
    /// `ec_point_formats`, RFC 8422 §5.1.2.
    pub(crate) const EC_POINT_FORMATS: u16 = 0x000b;
    /// `signature_algorithms`, RFC 8446 §4.2.3.
    pub(crate) const SIGNATURE_ALGORITHMS: u16 = 0x000d;
    /// `application_layer_protocol_negotiation` (ALPN), RFC 7301 §3.1.
    pub(crate) const ALPN: u16 = 0x0010;
    /// `supported_versions`, RFC 8446 §4.2.1.
    pub(crate) const SUPPORTED_VERSIONS: u16 = 0x002b;
}

/// Result of [`parse_client_hello`] on the bytes peeked so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelloParse {
    /// Need more bytes; the whole prefix seen so far is a valid beginning of a TLS handshake record stream.
    Incomplete,
    /// A full ClientHello was read; `record_bytes` = how many bytes of the input (TLS records) carry it.
    Complete(ClientHello),
    /// The first bytes are not a TLS handshake record (e.g. plain HTTP); carries a short reason.
    NotTls(&'static str),
    /// Structurally invalid (bad lengths, wrong handshake type, record too large, > MAX_HELLO_BYTES...).
    Malformed(&'static str),
}

/// The fields of a ClientHello that routing and fingerprinting use, decoded from the wire.
///
/// All lists keep the client's wire order and every value it sent, GREASE (RFC 8701) included;
/// the fingerprint methods ([`ClientHello::ja3`], [`ClientHello::ja4`], ...) drop GREASE
/// themselves. A list whose extension is absent is empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientHello {
    /// Bytes of the input, from the first record header to the end of the last record carrying
    /// the hello (record headers included); at most [`MAX_HELLO_BYTES`].
    pub record_bytes: usize,
    /// `legacy_version` of the ClientHello body (0x0303 for TLS 1.2 and 1.3 clients).
    pub legacy_version: u16,
    /// `supported_versions` extension (0x002b) values; GREASE kept, raw wire order.
    pub supported_versions: Vec<u16>,
    /// Cipher suite codes, wire order, raw (GREASE and SCSVs kept).
    pub cipher_suites: Vec<u16>,
    /// Extension type codes, wire order, raw (GREASE kept).
    pub extensions: Vec<u16>,
    /// `supported_groups` extension (0x000a) values, wire order, raw.
    pub supported_groups: Vec<u16>,
    /// `ec_point_formats` extension (0x000b) values, wire order.
    pub ec_point_formats: Vec<u8>,
    /// `signature_algorithms` extension (0x000d) values, wire order, raw.
    pub signature_algorithms: Vec<u16>,
    /// The `host_name` entry of the `server_name` extension, exactly as sent (not lower-cased).
    /// `None` when the extension is absent, has no `host_name` entry, or the name is not a DNS
    /// host name: 1–254 bytes of ASCII letters, digits, `-`, `_` and `.` (so a trailing dot is
    /// kept). Whether the extension was present at all is `extensions.contains(&0)`.
    pub sni: Option<String>,
    /// ALPN protocol names (extension 0x0010), wire order, raw bytes.
    pub alpn: Vec<Vec<u8>>,
}

/// True for the 16 GREASE values of RFC 8701 §2 (`0x0A0A`, `0x1A1A`, ..., `0xFAFA`), which
/// clients sprinkle into cipher, extension, group, version and signature-algorithm lists and
/// which every fingerprint ignores.
pub const fn is_grease(v: u16) -> bool {
    (v & 0x0f0f) == 0x0a0a && (v >> 8) == (v & 0x00ff)
}

/// Parses a TLS record stream prefix (starting at the first record header, as peeked from the socket):
/// reassembles the handshake message across any number of TLS records and any split.
///
/// Returns [`HelloParse::Incomplete`] while more bytes are needed; see the module doc for the
/// exact rules of each verdict. Costs one pass over at most [`MAX_HELLO_BYTES`] bytes of `buf`;
/// never panics and never reads past the hello's last record.
pub fn parse_client_hello(buf: &[u8]) -> HelloParse {
    match parse(buf) {
        Ok(hello) => HelloParse::Complete(hello),
        Err(Stop::Short) => HelloParse::Incomplete,
        Err(Stop::NotTls(why)) => HelloParse::NotTls(why),
        Err(Stop::Bad(why)) => HelloParse::Malformed(why),
    }
}

/// Why decoding stopped before a whole ClientHello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The input ends before the hello does; everything read so far was valid.
    Short,
    /// The first record header is not a TLS handshake record.
    NotTls(&'static str),
    /// Framing error.
    Bad(&'static str),
}

type Res<T> = Result<T, Stop>;

const TRUNCATED: &str = "a field runs past the end of its enclosing structure";

/// Reason for a first byte that cannot start a TLS handshake record.
fn not_tls_reason(first: u8) -> &'static str {
    match first {
        0x14 | 0x15 | 0x17 | 0x18 => "TLS record that is not a handshake record",
        b if b & 0x80 != 0 => "SSLv2-style record header (not supported)",
        b if b.is_ascii_alphabetic() => "plain text (e.g. HTTP) instead of a TLS handshake record",
        _ => "first byte is not a TLS handshake record type (22)",
    }
}

/// Cursor over the handshake message bytes carried by a run of records.
///
/// `pos` is the physical offset in `buf`; `off` the logical offset in the handshake byte stream
/// (record headers removed). Structure bounds (`limit`, `msg_end`) are logical offsets.
#[derive(Clone)]
struct Cursor<'a> {
    buf: &'a [u8],
    /// Physical offset of the next byte to read.
    pos: usize,
    /// Physical end of the current record's fragment; `pos == rec_end` means a header comes next.
    rec_end: usize,
    /// Number of records opened so far.
    records: usize,
    /// Logical offset of the next byte to read.
    off: usize,
    /// Logical end of the ClientHello message (`usize::MAX` until its header is read).
    msg_end: usize,
    /// Logical end of the innermost structure being decoded.
    limit: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Cursor {
            buf,
            pos: 0,
            rec_end: 0,
            records: 0,
            off: 0,
            msg_end: usize::MAX,
            limit: usize::MAX,
        }
    }

    /// Byte at physical offset `i`, or `Short` when the input ends before it.
    fn at(&self, i: usize) -> Res<u8> {
        self.buf.get(i).copied().ok_or(Stop::Short)
    }

    /// Lowest physical offset at which the hello's last record can end, given what is known.
    fn min_stream_end(&self) -> usize {
        let remaining = self.msg_end.saturating_sub(self.off);
        let in_record = self.rec_end - self.pos;
        if remaining <= in_record {
            self.pos + remaining
        } else {
            // Every further record adds a header.
            (self.rec_end + RECORD_HEADER).saturating_add(remaining - in_record)
        }
    }

    /// Checks the hello against the record rules that need its length: it must fit in
    /// `MAX_HELLO_BYTES` and the current record must not carry bytes past it.
    fn check_bounds(&self) -> Res<()> {
        if self.msg_end == usize::MAX {
            return Ok(());
        }
        if self.off + (self.rec_end - self.pos) > self.msg_end {
            return Err(Stop::Bad(
                "a handshake record carries bytes after the ClientHello",
            ));
        }
        if self.min_stream_end() > MAX_HELLO_BYTES {
            return Err(Stop::Bad(
                "ClientHello records exceed MAX_HELLO_BYTES (16 KiB)",
            ));
        }
        Ok(())
    }

    /// Reads and validates the record header at `pos` and enters its fragment.
    fn open_record(&mut self) -> Res<()> {
        let h = self.pos;
        let first = self.records == 0;
        let content_type = self.at(h)?;
        if content_type != CONTENT_HANDSHAKE {
            return Err(if first {
                Stop::NotTls(not_tls_reason(content_type))
            } else {
                Stop::Bad("a non-handshake record arrived before the ClientHello ended")
            });
        }
        if self.at(h + 1)? != 3 {
            return Err(if first {
                Stop::NotTls("record version is not 3.x")
            } else {
                Stop::Bad("record version is not 3.x")
            });
        }
        self.at(h + 2)?; // minor version: any (RFC 8446 §5.1: legacy_record_version is ignored)
        let len = usize::from(self.at(h + 3)?) << 8 | usize::from(self.at(h + 4)?);
        if len == 0 {
            return Err(Stop::Bad("empty handshake record"));
        }
        if len > MAX_FRAGMENT {
            return Err(Stop::Bad("record longer than 2^14 bytes"));
        }
        if h + RECORD_HEADER + len > MAX_HELLO_BYTES {
            return Err(Stop::Bad(
                "ClientHello records exceed MAX_HELLO_BYTES (16 KiB)",
            ));
        }
        self.pos = h + RECORD_HEADER;
        self.rec_end = self.pos + len;
        self.records += 1;
        self.check_bounds()
    }

    /// Bytes left in the innermost structure.
    fn remaining(&self) -> usize {
        self.limit - self.off
    }

    /// Physical input bytes present after the cursor (an upper bound on what can still be read).
    fn available(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Reserves room to read `count` items of `width` bytes each: errors when they overrun the
    /// innermost structure, returns how many of them the input can hold (for `with_capacity`,
    /// so no allocation is larger than the input that justifies it).
    fn expect(&self, count: usize, width: usize) -> Res<usize> {
        if count.saturating_mul(width) > self.remaining() {
            return Err(Stop::Bad(TRUNCATED));
        }
        Ok(count.min(self.available() / width))
    }

    fn u8(&mut self) -> Res<u8> {
        if self.off >= self.limit {
            return Err(Stop::Bad(TRUNCATED));
        }
        if self.pos == self.rec_end {
            self.open_record()?;
        }
        let b = self.at(self.pos)?;
        self.pos += 1;
        self.off += 1;
        Ok(b)
    }

    fn u16(&mut self) -> Res<u16> {
        Ok(u16::from(self.u8()?) << 8 | u16::from(self.u8()?))
    }

    fn u24(&mut self) -> Res<usize> {
        Ok(usize::from(self.u8()?) << 16 | usize::from(self.u16()?))
    }

    /// Passes over `n` bytes, or copies them into `out` when given.
    fn take(&mut self, mut n: usize, mut out: Option<&mut Vec<u8>>) -> Res<()> {
        if n > self.remaining() {
            return Err(Stop::Bad(TRUNCATED));
        }
        while n > 0 {
            if self.pos == self.rec_end {
                self.open_record()?;
            }
            let chunk = n.min(self.rec_end - self.pos);
            let end = self.pos + chunk;
            let bytes = self.buf.get(self.pos..end).ok_or(Stop::Short)?;
            if let Some(out) = out.as_deref_mut() {
                out.extend_from_slice(bytes);
            }
            self.pos = end;
            self.off += chunk;
            n -= chunk;
        }
        Ok(())
    }

    /// Decodes a structure of `len` bytes with `f`, which must consume it exactly.
    fn within<T>(&mut self, len: usize, f: impl FnOnce(&mut Self) -> Res<T>) -> Res<T> {
        if len > self.remaining() {
            return Err(Stop::Bad(TRUNCATED));
        }
        let outer = self.limit;
        self.limit = self.off + len;
        let value = f(self)?;
        if self.off != self.limit {
            return Err(Stop::Bad("a length field does not match its contents"));
        }
        self.limit = outer;
        Ok(value)
    }

    /// A vector of 16-bit values of `len` bytes (`len` must be even).
    fn u16_list(&mut self, len: usize) -> Res<Vec<u16>> {
        if !len.is_multiple_of(2) {
            return Err(Stop::Bad("odd length for a list of 16-bit values"));
        }
        let mut out = Vec::with_capacity(self.expect(len / 2, 2)?);
        self.within(len, |c| {
            while c.remaining() > 0 {
                out.push(c.u16()?);
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// `opaque name<0..n>` of `len` bytes, copied.
    fn bytes(&mut self, len: usize) -> Res<Vec<u8>> {
        let mut out = Vec::with_capacity(self.expect(len, 1)?);
        self.take(len, Some(&mut out))?;
        Ok(out)
    }
}

fn parse(buf: &[u8]) -> Res<ClientHello> {
    let mut c = Cursor::new(buf);
    let msg_type = c.u8()?;
    if msg_type != HANDSHAKE_CLIENT_HELLO {
        return Err(Stop::Bad("first handshake message is not a ClientHello"));
    }
    let len = c.u24()?;
    c.msg_end = c.off + len;
    c.check_bounds()?;
    let mut hello = c.within(len, client_hello_body)?;
    // `check_bounds` guarantees the last record ends with the message.
    hello.record_bytes = c.pos;
    Ok(hello)
}

/// Decodes `ClientHello` (RFC 8446 §4.1.2; RFC 5246 §7.4.1.2 for pre-1.3 hellos, whose
/// extensions block is optional).
fn client_hello_body(c: &mut Cursor<'_>) -> Res<ClientHello> {
    let mut hello = ClientHello {
        legacy_version: c.u16()?,
        ..ClientHello::default()
    };
    c.take(32, None)?; // random
    let session_id = usize::from(c.u8()?);
    if session_id > 32 {
        return Err(Stop::Bad("legacy_session_id longer than 32 bytes"));
    }
    c.take(session_id, None)?;
    let suites = usize::from(c.u16()?);
    hello.cipher_suites = c.u16_list(suites)?;
    let compression = usize::from(c.u8()?);
    c.take(compression, None)?;
    if c.remaining() == 0 {
        return Ok(hello); // no extensions block (SSL 3.0 / TLS 1.0 style)
    }
    let block = usize::from(c.u16()?);
    c.within(block, |c| extensions(c, &mut hello))?;
    Ok(hello)
}

/// Decodes the extensions block, recording every type and decoding the ones fingerprints use.
fn extensions(c: &mut Cursor<'_>, hello: &mut ClientHello) -> Res<()> {
    // One bit per extension type: duplicates are a framing error (RFC 8446 §4.2).
    let mut seen = [0u64; 1024];
    hello.extensions = Vec::with_capacity(count_items(c, |c| {
        c.u16()?;
        let n = usize::from(c.u16()?);
        c.take(n, None)
    }));
    while c.remaining() > 0 {
        let ty = c.u16()?;
        let len = usize::from(c.u16()?);
        let (word, bit) = (usize::from(ty >> 6), 1u64 << (ty & 63));
        if let Some(w) = seen.get_mut(word) {
            if *w & bit != 0 {
                return Err(Stop::Bad("duplicate extension type"));
            }
            *w |= bit;
        }
        hello.extensions.push(ty);
        c.within(len, |c| extension_body(c, ty, len, hello))?;
    }
    Ok(())
}

fn extension_body(c: &mut Cursor<'_>, ty: u16, len: usize, hello: &mut ClientHello) -> Res<()> {
    match ty {
        ext::SERVER_NAME => {
            let list = usize::from(c.u16()?);
            hello.sni = c.within(list, server_name_list)?;
        }
        ext::SUPPORTED_GROUPS => {
            let n = usize::from(c.u16()?);
            hello.supported_groups = c.u16_list(n)?;
        }
        ext::EC_POINT_FORMATS => {
            let n = usize::from(c.u8()?);
            hello.ec_point_formats = c.bytes(n)?;
        }
        ext::SIGNATURE_ALGORITHMS => {
            let n = usize::from(c.u16()?);
            hello.signature_algorithms = c.u16_list(n)?;
        }
        ext::ALPN => {
            let list = usize::from(c.u16()?);
            hello.alpn = c.within(list, protocol_name_list)?;
        }
        ext::SUPPORTED_VERSIONS => {
            let n = usize::from(c.u8()?);
            hello.supported_versions = c.u16_list(n)?;
        }
        _ => c.take(len, None)?,
    }
    Ok(())
}

/// Counts the items of the list at `c` that have begun in the input, in a read-only pass, so the
/// list's `Vec` is allocated once and never larger than the input justifies.
fn count_items(c: &Cursor<'_>, mut item: impl FnMut(&mut Cursor<'_>) -> Res<()>) -> usize {
    let mut probe = c.clone();
    let mut n = 0;
    while probe.remaining() > 0 {
        n += 1;
        if item(&mut probe).is_err() {
            break;
        }
    }
    n
}

/// `ServerNameList` (RFC 6066 §3): entries `name_type(1) opaque<2-byte length>`; returns the first
/// `host_name` (type 0) if it is a valid DNS host name. Every entry is length-prefixed the same
/// way, so unknown name types are skipped.
fn server_name_list(c: &mut Cursor<'_>) -> Res<Option<String>> {
    let mut sni = None;
    let mut seen_host = false;
    while c.remaining() > 0 {
        let name_type = c.u8()?;
        let len = usize::from(c.u16()?);
        if name_type == 0 && !seen_host {
            seen_host = true;
            let name = c.bytes(len)?;
            if is_host_name(&name) {
                // Every byte is ASCII, so this conversion cannot fail.
                sni = String::from_utf8(name).ok();
            }
        } else {
            c.take(len, None)?;
        }
    }
    Ok(sni)
}

/// DNS host name as SNI carries it: 1–254 bytes (253 plus an optional trailing dot) of ASCII
/// letters, digits, `-`, `_`, `.`.
fn is_host_name(name: &[u8]) -> bool {
    (1..=254).contains(&name.len())
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `ProtocolNameList` (RFC 7301 §3.1): entries `opaque ProtocolName<1-byte length>`.
fn protocol_name_list(c: &mut Cursor<'_>) -> Res<Vec<Vec<u8>>> {
    let mut names = Vec::with_capacity(count_items(c, |c| {
        let n = usize::from(c.u8()?);
        c.take(n, None)
    }));
    while c.remaining() > 0 {
        let n = usize::from(c.u8()?);
        names.push(c.bytes(n)?);
    }
    Ok(names)
}
