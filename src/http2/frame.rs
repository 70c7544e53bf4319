//! The HTTP/2 wire layout the guard reads (RFC 9113 §4.1, §6, §7) and the two frames it writes.
//!
//! Every frame is a 9-byte header — length (24 bits), type (8), flags (8), a reserved bit and the
//! stream identifier (31 bits), all big-endian — followed by `length` payload bytes. The guard
//! reads headers only, plus two payload fields it needs to classify a frame: the 4-byte
//! WINDOW_UPDATE increment (§6.9) and the 6-byte SETTINGS entries of the upstream (§6.5.1).

/// The client connection preface (RFC 9113 §3.4), the first 24 bytes a client sends.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Bytes of a frame header (RFC 9113 §4.1).
pub const FRAME_HEADER_LEN: usize = 9;

/// GOAWAY / RST_STREAM error code NO_ERROR (RFC 9113 §7).
pub const NO_ERROR: u32 = 0x0;
/// Error code PROTOCOL_ERROR (RFC 9113 §7).
pub const PROTOCOL_ERROR: u32 = 0x1;
/// Error code ENHANCE_YOUR_CALM (RFC 9113 §7): "the peer might be generating excessive load",
/// what the guard's GOAWAY carries after a violation.
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// An empty SETTINGS frame (RFC 9113 §6.5): a valid server connection preface (§3.4), written
/// before a GOAWAY when the upstream's own preface has not reached the client yet.
pub const EMPTY_SETTINGS: [u8; FRAME_HEADER_LEN] = [0, 0, 0, ty::SETTINGS, 0, 0, 0, 0, 0];

/// Frame types (RFC 9113 §6).
pub(crate) mod ty {
    /// DATA (§6.1): a stream's body bytes, counted against flow control.
    pub(crate) const DATA: u8 = 0x0;
    /// HEADERS (§6.2): opens a stream (a request) or carries trailers; starts a field block.
    pub(crate) const HEADERS: u8 = 0x1;
    /// PRIORITY (§6.3, deprecated): a stream's priority; may be sent for a stream in any state.
    pub(crate) const PRIORITY: u8 = 0x2;
    /// RST_STREAM (§6.4): ends a stream at once, with an error code.
    pub(crate) const RST_STREAM: u8 = 0x3;
    /// SETTINGS (§6.5): the sender's connection parameters, or an ACK of the peer's.
    pub(crate) const SETTINGS: u8 = 0x4;
    /// PING (§6.7): a round-trip probe the peer answers with an ACK.
    pub(crate) const PING: u8 = 0x6;
    /// GOAWAY (§6.8): the connection is closing; the last stream the sender may have processed.
    pub(crate) const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE (§6.9): a flow-control window increment (stream 0: the connection's).
    pub(crate) const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION (§6.10): the next fragment of a field block (HEADERS, PUSH_PROMISE).
    pub(crate) const CONTINUATION: u8 = 0x9;
}

/// Frame flags (RFC 9113 §6).
pub(crate) mod flag {
    /// DATA, HEADERS: the sender's last frame on the stream.
    pub(crate) const END_STREAM: u8 = 0x1;
    /// SETTINGS, PING: an acknowledgement.
    pub(crate) const ACK: u8 = 0x1;
    /// HEADERS, PUSH_PROMISE, CONTINUATION: the last frame of the field block.
    pub(crate) const END_HEADERS: u8 = 0x4;
}

/// SETTINGS_MAX_CONCURRENT_STREAMS (RFC 9113 §6.5.2).
pub(crate) const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;

/// Bytes of one SETTINGS entry: identifier (16 bits) and value (32 bits) (RFC 9113 §6.5.1).
pub(crate) const SETTING_LEN: u8 = 6;

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    /// Payload bytes (24 bits).
    pub len: u32,
    /// Frame type ([`ty`]).
    pub ty: u8,
    /// Flags ([`flag`]; their meaning depends on the type).
    pub flags: u8,
    /// Stream identifier, reserved bit cleared.
    pub stream: u32,
}

impl FrameHeader {
    /// The header in `b` (RFC 9113 §4.1: length 24 bits, type, flags, reserved bit and a
    /// 31-bit stream identifier, all big-endian).
    #[inline]
    pub(super) fn parse(b: &[u8; FRAME_HEADER_LEN]) -> FrameHeader {
        FrameHeader {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            ty: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }

    /// Whether `flag` (one of [`flag`]) is set.
    #[inline]
    pub(super) fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// A GOAWAY frame (RFC 9113 §6.8) on stream 0 without debug data: the 9-byte header (length 8,
/// type 0x7, no flags) and the payload `last_stream_id` (reserved bit cleared) and `error_code`.
pub fn goaway_frame(last_stream_id: u32, error_code: u32) -> [u8; 17] {
    let mut f = [0u8; 17];
    f[2] = 8;
    f[3] = ty::GOAWAY;
    f[9..13].copy_from_slice(&(last_stream_id & 0x7fff_ffff).to_be_bytes());
    f[13..17].copy_from_slice(&error_code.to_be_bytes());
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goaway_layout() {
        assert_eq!(
            goaway_frame(7, ENHANCE_YOUR_CALM),
            [0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0xb]
        );
        // The reserved bit is never set.
        assert_eq!(goaway_frame(u32::MAX, 1)[9], 0x7f);
    }

    #[test]
    fn header_parse_clears_reserved_bit() {
        let h = FrameHeader::parse(&[0x01, 0x00, 0x02, 0x1, 0x5, 0x80, 0, 0, 3]);
        assert_eq!(
            h,
            FrameHeader {
                len: 0x010002,
                ty: ty::HEADERS,
                flags: 0x5,
                stream: 3
            }
        );
        assert!(h.has(flag::END_STREAM) && h.has(flag::END_HEADERS));
    }

    #[test]
    fn empty_settings_is_a_frame_header() {
        let h = FrameHeader::parse(&EMPTY_SETTINGS);
        assert_eq!((h.len, h.ty, h.flags, h.stream), (0, ty::SETTINGS, 0, 0));
    }
}
