//! Rampart's own server connection preface and the client's acknowledgement of it.
//!
//! Every terminated connection whose ALPN is `h2` gets [`server_settings`] from Rampart right
//! after the TLS handshake, before Rampart reads a byte of HTTP/2 (RFC 9113 §3.4 lets the server
//! send its preface first). It is the server connection preface the client waits for (h2spec,
//! gRPC clients send no request before it), whether or not an upstream exists yet, and it always
//! carries SETTINGS_MAX_CONCURRENT_STREAMS, so the client knows the guard's stream limit even when
//! the upstream advertises none (§6.5.2: the setting then stays at Rampart's value, SETTINGS
//! values persist until changed). The upstream's own SETTINGS reach the client later, as a second
//! SETTINGS frame (the guard still lowers a larger limit in them).
//!
//! The client acknowledges each SETTINGS it receives, in order (§6.5.3), so its first SETTINGS
//! ACK is for Rampart's frame and the upstream, which never sent it, must not see it (nghttp2 —
//! node, Apache httpd, h2o — closes the connection with PROTOCOL_ERROR on an ACK it did not ask
//! for). [`FirstSettingsAck`] finds that frame in the client's byte stream and rewrites its type
//! byte in place to [`ACK_STAND_IN`], a type from the range RFC 9113 §11.2 reserves for
//! experimental use, which every receiver ignores (§4.1, §5.5): a frame of length 0 on stream 0
//! that means nothing, and the stream keeps its length, so nothing is inserted or removed.

use super::frame::{flag, ty, FRAME_HEADER_LEN, PREFACE};

/// The type byte Rampart writes over the client's first SETTINGS ACK: 0xf0, the first of the
/// frame types RFC 9113 §11.2 reserves for experimental use (0xf0–0xff), which a receiver must
/// ignore (§4.1, §5.5).
pub const ACK_STAND_IN: u8 = 0xf0;

/// Bytes of [`server_settings`]: a frame header and one 6-byte setting.
pub const SERVER_SETTINGS_LEN: usize = FRAME_HEADER_LEN + 6;

/// Rampart's server connection preface (RFC 9113 §3.4, §6.5): a SETTINGS frame on stream 0 with
/// the single entry SETTINGS_MAX_CONCURRENT_STREAMS (0x3) = `max_concurrent_streams`.
pub fn server_settings(max_concurrent_streams: u32) -> [u8; SERVER_SETTINGS_LEN] {
    let mut f = [0u8; SERVER_SETTINGS_LEN];
    f[2] = 6;
    f[3] = ty::SETTINGS;
    f[9..11].copy_from_slice(&super::frame::SETTINGS_MAX_CONCURRENT_STREAMS.to_be_bytes());
    f[11..15].copy_from_slice(&max_concurrent_streams.to_be_bytes());
    f
}

/// Walks the client → upstream byte stream (the client preface, then frame headers, payloads
/// skipped by length) until the client's first SETTINGS ACK — type 0x4, ACK flag, stream 0,
/// length 0 — and rewrites its type to [`ACK_STAND_IN`]; after that it passes every byte.
///
/// A SETTINGS frame with the ACK flag and a payload or a stream id is malformed (§6.5: a
/// FRAME_SIZE_ERROR or PROTOCOL_ERROR for the upstream to answer); it passes unchanged and the
/// walk goes on. A stream that does not begin with the client preface is not walked (whatever
/// reads it next answers the bad preface). State: 8 bytes, no buffer: a frame header split over
/// two chunks is left undecided for the caller to present again ([`FirstSettingsAck::filter`]).
#[derive(Debug, Clone, Default)]
pub struct FirstSettingsAck {
    /// Client preface bytes matched so far (24: done).
    preface: u8,
    /// The ACK was rewritten, or the stream is not HTTP/2: nothing more to do.
    done: bool,
    /// Payload bytes of the current frame still to pass.
    remaining: u32,
}

impl FirstSettingsAck {
    /// A walker at the start of the client's byte stream (its first bytes are the preface).
    pub fn new() -> FirstSettingsAck {
        FirstSettingsAck::default()
    }

    /// Whether the walk is over (the first ACK was rewritten, or the stream is not HTTP/2): every
    /// later byte passes as it is.
    #[inline]
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Walks the next `chunk` of the client's stream, rewriting the first SETTINGS ACK's type
    /// byte in place. Returns how many leading bytes are decided and may be forwarded; the rest
    /// (at most 8 bytes, only while the walk is not done) is the start of a frame header that
    /// could still be the ACK: the caller keeps those bytes and presents them again, followed by
    /// the next bytes read, in its next call.
    pub fn filter(&mut self, chunk: &mut [u8]) -> usize {
        if self.done {
            return chunk.len();
        }
        let mut i = 0;
        while (self.preface as usize) < PREFACE.len() {
            let Some(&b) = chunk.get(i) else {
                return i;
            };
            if b != PREFACE[self.preface as usize] {
                self.done = true;
                return chunk.len();
            }
            self.preface += 1;
            i += 1;
        }
        loop {
            let left = chunk.len() - i;
            if self.remaining > 0 {
                if left == 0 {
                    return i;
                }
                let take = (self.remaining as usize).min(left);
                i += take;
                self.remaining -= take as u32;
                continue;
            }
            let Some(h) = chunk[i..].first_chunk_mut::<FRAME_HEADER_LEN>() else {
                return i;
            };
            let len = u32::from_be_bytes([0, h[0], h[1], h[2]]);
            let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
            if h[3] == ty::SETTINGS && h[4] & flag::ACK != 0 && len == 0 && stream == 0 {
                h[3] = ACK_STAND_IN;
                self.done = true;
                return chunk.len();
            }
            self.remaining = len;
            i += FRAME_HEADER_LEN;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACK: [u8; 9] = [0, 0, 0, 4, 1, 0, 0, 0, 0];

    fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend([ty, flags]);
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    }

    /// Feeds `stream` to a walker in the chunks `cuts` makes, as the read filter does: the
    /// undecided tail of each call comes again at the front of the next. Returns the bytes
    /// forwarded (at the end of the stream the held tail is forwarded as it is).
    fn walk(stream: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut w = FirstSettingsAck::new();
        let mut out = Vec::new();
        let mut held = Vec::new();
        let mut at = 0;
        for &end in cuts.iter().chain([&stream.len()]) {
            let mut chunk = std::mem::take(&mut held);
            chunk.extend_from_slice(&stream[at..end]);
            at = end;
            let n = w.filter(&mut chunk);
            assert!(chunk.len() - n < FRAME_HEADER_LEN, "holds at most 8 bytes");
            out.extend_from_slice(&chunk[..n]);
            held = chunk[n..].to_vec();
        }
        out.extend(held);
        out
    }

    /// A client's opening: preface, SETTINGS, WINDOW_UPDATE, a request, then the ACK of
    /// Rampart's SETTINGS (`first_ack` is its offset), a PING, a second request and the ACK of
    /// the upstream's SETTINGS.
    fn client_stream() -> (Vec<u8>, usize) {
        let mut b = PREFACE.to_vec();
        b.extend(frame(ty::SETTINGS, 0, 0, &[0, 4, 0, 0, 0xff, 0xff]));
        b.extend(frame(ty::WINDOW_UPDATE, 0, 0, &[0, 0xf, 0, 1]));
        // A header block whose bytes look like an ACK: payload is never read.
        b.extend(frame(ty::HEADERS, 0x5, 1, &ACK));
        let first_ack = b.len();
        b.extend(ACK);
        b.extend(frame(ty::PING, 0, 0, &[0; 8]));
        b.extend(frame(ty::HEADERS, 0x5, 3, &[0x82, 0x87, 0x84]));
        b.extend(ACK);
        (b, first_ack)
    }

    #[test]
    fn server_settings_layout() {
        assert_eq!(
            server_settings(100),
            [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100]
        );
        assert_eq!(server_settings(0x0102_0304)[11..], [1, 2, 3, 4]);
        assert_eq!(SERVER_SETTINGS_LEN, 15);
    }

    #[test]
    fn only_the_first_ack_is_rewritten_under_every_split() {
        let (stream, first_ack) = client_stream();
        let mut want = stream.clone();
        want[first_ack + 3] = ACK_STAND_IN;
        assert_eq!(walk(&stream, &[]), want);
        for a in 0..=stream.len() {
            assert_eq!(walk(&stream, &[a]), want, "cut at {a}");
        }
        // Byte by byte.
        let cuts: Vec<usize> = (1..stream.len()).collect();
        assert_eq!(walk(&stream, &cuts), want);
        // Every pair of cuts around the ACK.
        for a in first_ack - 4..first_ack + 9 {
            for b in a..first_ack + 12 {
                assert_eq!(walk(&stream, &[a, b]), want, "cuts at {a}, {b}");
            }
        }
    }

    #[test]
    fn a_partial_header_is_undecided_then_decided() {
        let mut w = FirstSettingsAck::new();
        let mut b = PREFACE.to_vec();
        b.extend_from_slice(&ACK[..5]);
        assert_eq!(
            w.filter(&mut b),
            24,
            "the preface passes, the 5 header bytes wait"
        );
        assert!(!w.is_done());
        let mut rest = ACK.to_vec();
        rest.extend([0, 0, 0, 4, 1]);
        assert_eq!(
            w.filter(&mut rest),
            14,
            "done: the rest passes, even a second ACK's start"
        );
        assert_eq!(rest[3], ACK_STAND_IN);
        assert_eq!(rest[12], ty::SETTINGS);
        assert!(w.is_done());
        let mut later = ACK.to_vec();
        assert_eq!(w.filter(&mut later), 9);
        assert_eq!(later, ACK);
    }

    #[test]
    fn malformed_acks_pass_and_the_walk_goes_on() {
        let mut b = PREFACE.to_vec();
        b.extend(frame(ty::SETTINGS, flag::ACK, 0, &[0, 3, 0, 0, 0, 1])); // with a payload
        b.extend(frame(ty::SETTINGS, flag::ACK, 1, &[])); // on a stream
        b.extend(frame(ty::PING, flag::ACK, 0, &[0; 8])); // another ACK
        let good = b.len();
        b.extend(ACK);
        let mut want = b.clone();
        want[good + 3] = ACK_STAND_IN;
        assert_eq!(walk(&b, &[]), want);
        // The reserved bit of the stream id is ignored (§4.1); other SETTINGS flags too.
        let mut odd = PREFACE.to_vec();
        odd.extend([0, 0, 0, 4, 0xff, 0x80, 0, 0, 0]);
        let mut want = odd.clone();
        want[24 + 3] = ACK_STAND_IN;
        assert_eq!(walk(&odd, &[]), want);
    }

    #[test]
    fn a_stream_without_the_client_preface_is_not_walked() {
        let mut b = b"GET / HTTP/1.1\r\n\r\n".to_vec();
        b.extend(ACK);
        assert_eq!(walk(&b, &[]), b);
        let mut w = FirstSettingsAck::new();
        let mut p = PREFACE[..10].to_vec();
        assert_eq!(w.filter(&mut p), 10);
        let mut q = b"X".to_vec();
        q.extend(ACK);
        assert_eq!(w.filter(&mut q), 10);
        assert!(w.is_done());
        assert_eq!(q[4], 4, "untouched");
    }

    #[test]
    fn a_frame_split_at_any_point_of_its_payload_is_skipped_by_length() {
        let mut b = PREFACE.to_vec();
        b.extend(frame(ty::DATA, 0, 1, &[0; 40000]));
        let ack = b.len();
        b.extend(ACK);
        let mut want = b.clone();
        want[ack + 3] = ACK_STAND_IN;
        for cut in [30, 33, 34, 1000, 40032, 40033, 40034] {
            assert_eq!(walk(&b, &[cut, cut + 7]), want, "cut at {cut}");
        }
    }
}
