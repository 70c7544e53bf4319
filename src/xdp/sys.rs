//! The few raw system calls aya does not wrap: an RCU grace period for the policy double
//! buffer, and the bpffs mount check.
//!
//! Grace period: after the live-set index flips, a packet that read the old index may still be
//! running; the old set must not be rewritten until it finishes. The kernel runs XDP programs
//! inside an RCU read-side section, and an update of an `ARRAY_OF_MAPS` element from the
//! `bpf()` syscall calls `synchronize_rcu()` before returning (so userspace knows no program
//! still sees the old inner map). [`RcuSync`] owns a private one-slot array-of-maps that no
//! program uses; writing its slot is a grace-period barrier. Cost: one syscall, typically a
//! few ms of waiting, paid when the next policy is staged, not on the flip.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use super::error::XdpError;

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_ARRAY_OF_MAPS: u32 = 12;
/// `BPF_FS_MAGIC` from `<linux/magic.h>`.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// `bpf(cmd, attr)`: `attr` is the zero-padded `union bpf_attr` prefix for `cmd`.
fn bpf(cmd: libc::c_long, attr: &mut [u64; 16]) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a valid, writable 128-byte buffer, the size passed; the kernel reads
    // (and for some commands writes) only within it.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_mut_ptr(),
            std::mem::size_of_val(attr) as libc::c_uint,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `BPF_MAP_CREATE` of `{ map_type, key_size 4, value_size 4, max_entries 1, inner_map_fd }`.
fn create_map(map_type: u32, inner_map_fd: Option<i32>) -> io::Result<OwnedFd> {
    let mut attr = [0u64; 16];
    // Layout: u32 map_type, key_size, value_size, max_entries, map_flags, inner_map_fd.
    attr[0] = u64::from(map_type) | (4u64 << 32);
    attr[1] = 4 | (1u64 << 32);
    attr[2] = u64::from(inner_map_fd.unwrap_or(0) as u32) << 32;
    let fd = bpf(BPF_MAP_CREATE, &mut attr)?;
    // SAFETY: a successful BPF_MAP_CREATE returns a new file descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A grace-period barrier: see the module doc.
#[derive(Debug)]
pub(crate) struct RcuSync {
    outer: OwnedFd,
    inner: OwnedFd,
}

impl RcuSync {
    /// Creates the private array-of-maps (two small maps).
    pub(crate) fn new() -> io::Result<Self> {
        let inner = create_map(BPF_MAP_TYPE_ARRAY, None)?;
        let outer = create_map(BPF_MAP_TYPE_ARRAY_OF_MAPS, Some(inner.as_raw_fd()))?;
        Ok(Self { outer, inner })
    }

    /// Returns after an RCU grace period: every XDP run that started before has finished.
    pub(crate) fn wait(&self) -> io::Result<()> {
        let key: u32 = 0;
        let value: u32 = self.inner.as_raw_fd() as u32;
        let mut attr = [0u64; 16];
        // Layout: u32 map_fd, (pad), u64 key ptr, u64 value ptr, u64 flags.
        attr[0] = u64::from(self.outer.as_raw_fd() as u32);
        attr[1] = &key as *const u32 as u64;
        attr[2] = &value as *const u32 as u64;
        bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(|_| ())
    }
}

/// Whether `path` is on a bpffs mount.
pub(crate) fn is_bpffs(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: zeroed statfs is a valid out-parameter; `c` is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type as i64 == BPF_FS_MAGIC
}

/// Makes sure `mount_point` (normally `/sys/fs/bpf`) is a bpffs, mounting one (mode 0700) if
/// nothing is mounted there, as systemd does at boot.
pub(crate) fn ensure_bpffs(mount_point: &Path) -> Result<(), XdpError> {
    if is_bpffs(mount_point) {
        return Ok(());
    }
    use std::os::unix::ffi::OsStrExt;
    let fail = |cause: String| XdpError::BpfFs {
        path: mount_point.to_path_buf(),
        cause,
    };
    let target = std::ffi::CString::new(mount_point.as_os_str().as_bytes())
        .map_err(|_| fail("path contains NUL".to_string()))?;
    // SAFETY: all pointers are valid NUL-terminated strings for the duration of the call.
    let rc = unsafe {
        libc::mount(
            c"bpf".as_ptr(),
            target.as_ptr(),
            c"bpf".as_ptr(),
            0,
            c"mode=0700".as_ptr().cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(fail(format!(
            "bpffs is not mounted there and mounting it failed ({}); run `mount -t bpf bpf {}`",
            io::Error::last_os_error(),
            mount_point.display()
        )))
    }
}

/// The OS error number at the bottom of an error chain, if any.
pub(crate) fn errno_of(err: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            if let Some(code) = io.raw_os_error() {
                return Some(code);
            }
        }
        cur = e.source();
    }
    None
}

/// An error chain as one line: `outer: cause: root cause`.
pub(crate) fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !out.ends_with(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = e.source();
    }
    out
}

const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;
/// Elements per batch syscall.
const BATCH: usize = 8192;

/// Outcome of a batch call the kernel may not support.
#[derive(Debug)]
pub(crate) enum BatchError {
    /// The kernel has no batch operation for this map (EINVAL / ENOTSUPP / EOPNOTSUPP):
    /// fall back to one syscall per element. `done` elements were written before.
    Unsupported {
        /// Elements processed before the refusal.
        done: usize,
    },
    /// A real failure (the elements before it were written).
    Failed {
        /// The error.
        error: io::Error,
    },
}

fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(524 /* ENOTSUPP */)
    )
}

/// `BPF_MAP_UPDATE_BATCH`: writes `keys[i] → values[i]` (flags `BPF_ANY`), in chunks of
/// 8192. `K` and `V` must be the map's exact key and value layouts.
pub(crate) fn update_batch<K: Copy, V: Copy>(
    map_fd: std::os::fd::BorrowedFd<'_>,
    keys: &[K],
    values: &[V],
) -> Result<(), BatchError> {
    assert_eq!(keys.len(), values.len());
    let mut done = 0;
    while done < keys.len() {
        let n = (keys.len() - done).min(BATCH);
        let mut attr = [0u64; 16];
        // struct batch: in_batch, out_batch, keys, values, u32 count, u32 map_fd, elem_flags, flags.
        attr[2] = keys[done..].as_ptr() as u64;
        attr[3] = values[done..].as_ptr() as u64;
        attr[4] = n as u64 | (u64::from(map_fd.as_raw_fd() as u32) << 32);
        match bpf(BPF_MAP_UPDATE_BATCH, &mut attr) {
            Ok(_) => done += n,
            Err(error) => {
                let processed = (attr[4] & 0xffff_ffff) as usize;
                let done = done + processed.min(n);
                return Err(if processed == 0 && unsupported(&error) {
                    BatchError::Unsupported { done }
                } else {
                    BatchError::Failed { error }
                });
            }
        }
    }
    Ok(())
}

/// `BPF_MAP_DELETE_BATCH` of `keys`, in chunks; keys already absent are skipped.
pub(crate) fn delete_batch<K: Copy>(
    map_fd: std::os::fd::BorrowedFd<'_>,
    keys: &[K],
) -> Result<(), BatchError> {
    let mut done = 0;
    while done < keys.len() {
        let n = (keys.len() - done).min(BATCH);
        let mut attr = [0u64; 16];
        attr[2] = keys[done..].as_ptr() as u64;
        attr[4] = n as u64 | (u64::from(map_fd.as_raw_fd() as u32) << 32);
        match bpf(BPF_MAP_DELETE_BATCH, &mut attr) {
            Ok(_) => done += n,
            Err(error) => {
                let processed = ((attr[4] & 0xffff_ffff) as usize).min(n);
                if error.raw_os_error() == Some(libc::ENOENT) {
                    done += processed + 1; // skip the absent key
                    continue;
                }
                let done = done + processed;
                return Err(if processed == 0 && unsupported(&error) {
                    BatchError::Unsupported { done }
                } else {
                    BatchError::Failed { error }
                });
            }
        }
    }
    Ok(())
}
