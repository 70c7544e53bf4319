//! The fuzz targets' shared parts: the case count and the corpus of hostile inputs kept in
//! `tests/corpus/<target>/`.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report
#![allow(dead_code)]

use std::path::PathBuf;

/// Cases per target: `PROPTEST_CASES`, or `default`.
pub(crate) fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Every file of `tests/corpus/<target>/` as (name, bytes), sorted by name; panics on an empty
/// or missing folder.
pub(crate) fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(target);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.expect("a corpus entry").path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("a corpus file"))
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "{} is empty", dir.display());
    out
}
