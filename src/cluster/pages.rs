//! A fixed, zero-filled array in its own anonymous mapping, backed by transparent huge pages
//! where the kernel allows it (`madvise(MADV_HUGEPAGE)`, honoured when
//! `/sys/kernel/mm/transparent_hugepage/enabled` is `always` or `madvise`).
//!
//! Why: the lease table is one 16 MiB array read at a random place on every accept. With 4 KiB
//! pages that is 4096 pages, more than the data TLB holds, so a decision pays a page walk on top
//! of the cache miss, and a software prefetch issued early does not hide it; 2 MiB pages make it
//! 8 TLB entries. Without huge pages (THP `never`, or no contiguous memory) the mapping is the
//! same array on 4 KiB pages: only slower, never different.

use std::ops::Deref;
use std::ptr::NonNull;

/// Element types whose all-zero bit pattern is a valid value (the mapping starts zero-filled).
///
/// # Safety
/// Implement only for types for which all-zero bytes are a valid, initialised value, and that
/// need no `Drop` (the mapping is released without dropping its values).
pub unsafe trait Zeroable {}

/// `len` values of `T`, all zero at first, in one private anonymous mapping (unmapped on drop).
pub struct ZeroedPages<T: Zeroable> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: `ZeroedPages` owns its values as a `Box<[T]>` would: sending or sharing it is sending
// or sharing the `T`s.
unsafe impl<T: Zeroable + Send> Send for ZeroedPages<T> {}
// SAFETY: as above; `&ZeroedPages` only gives out `&[T]`.
unsafe impl<T: Zeroable + Sync> Sync for ZeroedPages<T> {}

impl<T: Zeroable> ZeroedPages<T> {
    /// Maps `len` zeroed values (`len ≥ 1`, `T` not zero-sized). Panics when the kernel refuses
    /// the mapping (out of address space), as `Vec` does when allocation fails.
    pub fn new(len: usize) -> ZeroedPages<T> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .filter(|&b| b > 0)
            .expect("a non-empty array");
        assert!(std::mem::align_of::<T>() <= 4096, "page-aligned values");
        // SAFETY: a fresh private anonymous mapping (no file, no fixed address): the kernel picks
        // the address; on success the `bytes` bytes there are ours, readable, writable and zero.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(
            p != libc::MAP_FAILED,
            "mmap of {bytes} bytes: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: `p..p + bytes` is the mapping made above. The advice changes only how pages are
        // backed; refused (THP off, old kernel) it leaves 4 KiB pages, so its result is ignored.
        unsafe { libc::madvise(p, bytes, libc::MADV_HUGEPAGE) };
        ZeroedPages {
            ptr: NonNull::new(p.cast::<T>()).expect("mmap never returns null on success"),
            len,
        }
    }
}

impl<T: Zeroable> Deref for ZeroedPages<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the mapping holds `len` values of `T`, zero-initialised (valid by `Zeroable`),
        // aligned (page-aligned start, `align_of::<T>() ≤ 4096`), alive until `drop`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Zeroable> Drop for ZeroedPages<T> {
    fn drop(&mut self) {
        // SAFETY: the values need no drop (`Zeroable`), and the mapping is ours, made in `new`
        // with this length.
        unsafe {
            libc::munmap(
                self.ptr.as_ptr().cast(),
                self.len * std::mem::size_of::<T>(),
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    // SAFETY: all-zero bytes are `AtomicU64::new(0)`.
    unsafe impl Zeroable for AtomicU64 {}

    #[test]
    fn zeroed_writable_and_unmapped() {
        let a = ZeroedPages::<AtomicU64>::new(1 << 19);
        assert_eq!(a.len(), 1 << 19);
        assert!(a.iter().all(|x| x.load(Ordering::Relaxed) == 0));
        a[12345].store(7, Ordering::Relaxed);
        assert_eq!(a[12345].load(Ordering::Relaxed), 7);
        assert_eq!(a.as_ptr() as usize % 4096, 0);
    }
}
