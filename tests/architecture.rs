//! `docs/architecture.md` names every top-level module of `src/` (each `pub mod` / `mod` line of
//! `src/lib.rs`, as `src/<name>/` or `src/<name>.rs`), so the one-page map cannot silently fall
//! behind the code; and it names every file of the connection pipeline (`src/conn/`), so the
//! phase table cannot either.

use std::path::PathBuf;

#[test]
fn architecture_page_names_every_top_level_module() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("src/lib.rs");
    let page = std::fs::read_to_string(root.join("docs/architecture.md")).expect("the page");
    let modules: Vec<&str> = lib
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
            l.strip_prefix("mod ")?.strip_suffix(';')
        })
        .collect();
    assert!(modules.len() >= 10, "found only {modules:?} in src/lib.rs");
    let missing: Vec<&&str> = modules
        .iter()
        .filter(|m| {
            !page.contains(&format!("`src/{m}/`")) && !page.contains(&format!("`src/{m}.rs`"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md does not name {missing:?}"
    );
}

#[test]
fn architecture_page_names_every_file_of_the_connection_pipeline() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/architecture.md")).expect("the page");
    let mut files: Vec<String> = std::fs::read_dir(root.join("src/conn"))
        .expect("src/conn/")
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|f| f.ends_with(".rs") && f != "mod.rs" && !f.ends_with("_tests.rs"))
        .collect();
    files.sort();
    assert!(files.len() >= 7, "found only {files:?} in src/conn/");
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !page.contains(&format!("`conn/{f}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md does not name {missing:?} of src/conn/"
    );
}
