//! Where the shared reference fixtures live: `../shared/fixtures/` next to the checkout.
//!
//! The path is resolved from `CARGO_MANIFEST_DIR` at compile time, i.e. from the checkout being
//! tested, not from the current directory: `/work/main`, every `/work/wt-*` worktree and a CI
//! clone all find the `shared/` folder that sits beside them (`/work/shared`, or `<dir>/shared`
//! for a clone at `<dir>/rampart`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// `../shared/fixtures/<name>` from the repository root, whether or not it exists.
pub(crate) fn shared_fixture_path(name: &str) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Cargo gives an absolute manifest directory, so it has a parent (`/work` for `/work/main`).
    let beside = repo.parent().unwrap_or(repo);
    beside.join("shared").join("fixtures").join(name)
}

/// The fixture folder `name`, or why it cannot be used (for [`super::prereq::require`]).
pub(crate) fn shared_fixture_dir(name: &str) -> Result<PathBuf, String> {
    let dir = shared_fixture_path(name);
    if dir.is_dir() {
        Ok(dir)
    } else {
        Err(format!(
            "fixture folder {} is absent (the shared/ folder must sit beside the checkout)",
            dir.display()
        ))
    }
}
