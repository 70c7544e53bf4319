//! The frames a closing connection writes to the client.

/// The bytes a closing connection writes to the client: GOAWAY (17 bytes), preceded by an empty
/// SETTINGS (9 bytes) when the upstream had not sent its preface yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Goaway {
    pub(super) bytes: [u8; 26],
    pub(super) len: u8,
}

impl Goaway {
    /// The frame's bytes (9-byte header and payload), to write to the client.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}
