//! The XDP object built by build.rs (`ebpf/rampart.c` → `$OUT_DIR/rampart_xdp.o`), embedded in
//! the binary so the addon carries its kernel program.
//!
//! When build.rs could not compile it (no clang, no BPF headers) the embedded object is empty
//! and `RAMPART_XDP_MISSING` names the cause; [`object_available`] reports it and every
//! loader entry point fails with it.

use super::error::XdpError;

/// 8-byte alignment for the ELF parser.
#[repr(C, align(8))]
struct Aligned<T: ?Sized>(T);

static OBJECT: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/rampart_xdp.o")));

/// The embedded ELF object, or why there is none ([`XdpError::ObjectMissing`]).
pub(crate) fn object() -> Result<&'static [u8], XdpError> {
    if let Some(why) = option_env!("RAMPART_XDP_MISSING") {
        return Err(XdpError::ObjectMissing {
            why: why.to_string(),
        });
    }
    if OBJECT.0.is_empty() {
        return Err(XdpError::ObjectMissing {
            why: "build.rs produced an empty object".to_string(),
        });
    }
    Ok(&OBJECT.0)
}

/// `Ok(())` when the XDP object was built; the error names what was missing at build time
/// (displayed as "XDP object not built: clang not found (install clang)").
pub fn object_available() -> Result<(), XdpError> {
    object().map(|_| ())
}
