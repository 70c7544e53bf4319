//! The XDP object built by build.rs (`ebpf/rampart.c` → `$OUT_DIR/rampart_xdp.o`), embedded in
//! the binary so the addon carries its kernel program.
//!
//! When build.rs could not compile it (no clang, no BPF headers) the embedded object is empty
//! and `RAMPART_XDP_MISSING` names the cause; [`object_available`] reports it and every
//! loader entry point fails with it.

/// 8-byte alignment for the ELF parser.
#[repr(C, align(8))]
struct Aligned<T: ?Sized>(T);

static OBJECT: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/rampart_xdp.o")));

/// The embedded ELF object, or why there is none.
pub fn object() -> Result<&'static [u8], String> {
    if let Some(why) = option_env!("RAMPART_XDP_MISSING") {
        return Err(format!("XDP object not built: {why}"));
    }
    if OBJECT.0.is_empty() {
        return Err("XDP object not built: build.rs produced an empty object".to_string());
    }
    Ok(&OBJECT.0)
}

/// `Ok(())` when the XDP object was built; `Err` names what was missing at build time
/// (e.g. "XDP object not built: clang not found (install clang)").
pub fn object_available() -> Result<(), String> {
    object().map(|_| ())
}
