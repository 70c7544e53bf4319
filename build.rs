//! Build script: napi linkage, plus the XDP object (`ebpf/rampart.c` → `$OUT_DIR/rampart_xdp.o`)
//! with clang. When clang or the BPF headers are missing the addon still builds;
//! `RAMPART_XDP_MISSING` then names what is missing and `attachXdp` rejects with it.

include!("ebpf/build_xdp.rs");

fn main() {
    napi_build::setup();
    build_xdp();
}
