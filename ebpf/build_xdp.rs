// Build step for the XDP object, included by build.rs (`include!("ebpf/build_xdp.rs");` and a
// call to `build_xdp()` from `main`).
//
// Compiles `ebpf/rampart.c` with `clang -O2 -g -target bpf -mcpu=v3` into
// `$OUT_DIR/rampart_xdp.o`, which `src/xdp/object.rs` embeds with `include_bytes!`. The addon
// must build without clang or the BPF headers, so a failure is not a build error: the object
// is then written empty and `RAMPART_XDP_MISSING` names what is missing (`attachXdp` rejects
// with it). On success `RAMPART_XDP_OBJ` holds the object's path.
//
// Environment: `CLANG` (or `RAMPART_CLANG`) picks the compiler; `RAMPART_XDP_SKIP=1` builds
// without the object (to exercise the missing path); `BPF_EXTRA_CFLAGS` adds flags.

/// Builds the XDP object into `$OUT_DIR/rampart_xdp.o` or records why it could not.
pub fn build_xdp() {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let source = manifest.join("ebpf").join("rampart.c");
    let header = manifest.join("ebpf").join("rampart.h");
    let object = out_dir.join("rampart_xdp.o");
    for path in [&source, &header, &manifest.join("ebpf").join("build_xdp.rs")] {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    for var in ["CLANG", "RAMPART_CLANG", "RAMPART_XDP_SKIP", "BPF_EXTRA_CFLAGS"] {
        println!("cargo:rerun-if-env-changed={var}");
    }

    let missing = |why: String| {
        // An empty object keeps `include_bytes!` compiling; the loader reads the reason.
        std::fs::write(&object, b"").expect("write empty XDP object");
        println!("cargo:warning=XDP object not built: {why}; attachXdp will reject");
        println!("cargo:rustc-env=RAMPART_XDP_MISSING={why}");
    };

    if std::env::var("RAMPART_XDP_SKIP").is_ok_and(|v| v == "1") {
        return missing("XDP build skipped (RAMPART_XDP_SKIP=1)".to_string());
    }

    let runs = |cmd: &str| {
        Command::new(cmd)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let explicit = std::env::var("RAMPART_CLANG")
        .or_else(|_| std::env::var("CLANG"))
        .ok();
    let clang = match &explicit {
        Some(c) if runs(c) => c.clone(),
        Some(c) => return missing(format!("clang not found (CLANG={c} does not run)")),
        None => match ["clang", "clang-20", "clang-19", "clang-18", "clang-17", "clang-16"]
            .into_iter()
            .chain(["clang-15", "clang-14", "clang-13"])
            .find(|c| runs(c))
        {
            Some(c) => c.to_string(),
            None => return missing("clang not found (install clang)".to_string()),
        },
    };

    // Headers: <bpf/bpf_helpers.h> comes from libbpf-dev, <linux/bpf.h> from linux-libc-dev.
    // With -target bpf clang does not search the multiarch directory that holds <asm/types.h>.
    let mut include_dirs: Vec<PathBuf> = Vec::new();
    let multiarch = format!("/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    if Path::new(&multiarch).join("asm").is_dir() {
        include_dirs.push(PathBuf::from(multiarch));
    }
    let mut cmd = Command::new(&clang);
    cmd.args(["-O2", "-g", "-target", "bpf", "-mcpu=v3", "-Wall", "-Werror"])
        .arg("-I")
        .arg(manifest.join("ebpf"));
    for dir in &include_dirs {
        cmd.arg("-idirafter").arg(dir);
    }
    if let Ok(extra) = std::env::var("BPF_EXTRA_CFLAGS") {
        cmd.args(extra.split_whitespace());
    }
    cmd.arg("-c").arg(&source).arg("-o").arg(&object);
    let output = match cmd.output() {
        Ok(o) => o,
        Err(e) => return missing(format!("clang not found ({clang}: {e})")),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let why = if stderr.contains("bpf/bpf_helpers.h") {
            "BPF headers not found: bpf/bpf_helpers.h (install libbpf-dev)".to_string()
        } else if stderr.contains("linux/bpf.h") || stderr.contains("asm/") {
            "kernel headers not found: linux/bpf.h (install linux-libc-dev)".to_string()
        } else {
            let first = stderr
                .lines()
                .find(|l| l.contains("error"))
                .unwrap_or("unknown error");
            format!("clang failed on ebpf/rampart.c: {}", first.trim())
        };
        return missing(why);
    }
    println!("cargo:rustc-env=RAMPART_XDP_OBJ={}", object.display());
}
