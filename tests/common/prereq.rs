//! Missing prerequisites (the shared fixture folder, root, the XDP object, a kernel that lets us
//! load BPF): a visible skip on a developer machine, a failure under CI.
//!
//! Why this mechanism. Stable libtest has no "skipped" outcome decided at run time (`#[ignore]`
//! is fixed at compile time, and a build-time check would need build.rs to probe the test
//! environment), and it captures what `println!`/`eprintln!` print, showing it only for a failed
//! test, so a test that returns early reads `ok` and says nothing. [`skip_or_fail`] records the
//! skip instead, and a handler registered with `atexit(3)` writes the list to stderr when the test
//! binary exits, right under libtest's own summary (stderr is not captured, and `cargo test` and
//! `npm test` pass it through):
//!
//! ```text
//! test result: ok. 16 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
//!
//! xdp_test_run: 15 tests SKIPPED (missing prerequisites; CI=true makes this a failure):
//!   SKIPPED bans_drop_until_their_deadline: XDP object not built: clang not found (install clang)
//!   …
//! ```
//!
//! Printing at the moment of the skip would also bypass the capture (a write to the
//! `std::io::stderr()` handle goes straight to file descriptor 2), but it lands in the middle of
//! libtest's `test … ok` lines, which other threads write at the same time. The test then
//! returns. Under CI (`CI` set to anything but `""`, `0` or `false`; CI services and our runner
//! set `CI=true`) the same call panics with the reason instead, so a CI run can never pass over
//! zero fixtures or without the kernel side.

#![allow(dead_code)]

use std::fmt::Display;
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, Once};

/// Whether we run under CI: `CI` is set to anything but `""`, `0` or `false` (any case).
pub(crate) fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| {
        let v = v.trim();
        !(v.is_empty() || v == "0" || v.eq_ignore_ascii_case("false"))
    })
}

/// The running test's name (libtest names each test's thread after it).
fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("<unnamed test>")
        .to_string()
}

/// Skips recorded so far in this test binary, as `(test, why)`.
static SKIPPED: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Writes the recorded skips to stderr; runs at exit, after libtest's summary.
extern "C" fn report_skips() {
    let mut skipped = std::mem::take(&mut *SKIPPED.lock().unwrap_or_else(|e| e.into_inner()));
    if skipped.is_empty() {
        return;
    }
    skipped.sort();
    let binary = std::env::args()
        .next()
        .and_then(|a| {
            let stem = Path::new(&a).file_stem()?.to_string_lossy().into_owned();
            // Cargo names test binaries `<target>-<hash>`.
            Some(match stem.rsplit_once('-') {
                Some((name, hash)) if hash.bytes().all(|b| b.is_ascii_hexdigit()) => name.into(),
                _ => stem,
            })
        })
        .unwrap_or_else(|| "this test binary".into());
    let n = skipped.len();
    let mut out = format!(
        "{binary}: {n} test{} SKIPPED (missing prerequisites; CI=true makes this a failure):\n",
        if n == 1 { "" } else { "s" }
    );
    for (test, why) in skipped {
        out.push_str(&format!("  SKIPPED {test}: {why}\n"));
    }
    out.push('\n');
    let _ = std::io::stderr().lock().write_all(out.as_bytes());
}

/// The calling test cannot run because of `why`: under CI this panics (the test fails);
/// otherwise it records the skip, reported when the test binary exits, and the caller returns.
#[track_caller]
pub(crate) fn skip_or_fail(why: impl Display) {
    let test = test_name();
    if under_ci() {
        panic!("{test} cannot run under CI: {why} (outside CI this is a visible skip)");
    }
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers a plain `extern "C" fn()` that takes no arguments and does not
        // unwind (it only locks a mutex and writes to stderr, ignoring errors).
        let rc = unsafe { libc::atexit(report_skips) };
        assert_eq!(rc, 0, "atexit failed");
    });
    SKIPPED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((test, why.to_string()));
}

/// `Some(v)` for `Ok(v)`; for `Err(why)`, [`skip_or_fail`] with `why` and `None` (the caller
/// returns): `let Some(x) = prereq::require(get()) else { return };`.
#[track_caller]
pub(crate) fn require<T, E: Display>(r: Result<T, E>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(why) => {
            skip_or_fail(why);
            None
        }
    }
}
