//! XDP layer: the kernel filter in `ebpf/rampart.c` and its userspace side (aya 0.14).
//!
//! The kernel program drops connection attempts (TCP SYN) to protected listener ports from
//! blocklisted CIDRs, dynamic blocks (`blockIp`), banned sources (penalty box, kernel SYN
//! limit) and sources over the per-source SYN limit (GCRA), before an skb exists; everything
//! else passes (see the C file's header for the exact rules). This module loads the object,
//! attaches it (native, else generic XDP), and keeps the pinned maps in step with the
//! configuration:
//!
//! - [`abi`]: `#[repr(C)]` twins of `ebpf/rampart.h` with compile-time layout assertions;
//! - [`policy`]: per-port policy → the exact contents of one policy set;
//! - [`lpm`] / [`dynamic`]: CIDRs as LPM-trie keys, the dynamic-block trie derived from the
//!   engine's `blockIp` set;
//! - [`sync`]: userspace → kernel: policy mapping, the ban queue, the XDP slot;
//! - [`manager`]: [`XdpManager`], which owns the program, the link and the maps; [`load`]
//!   (verifier, attach), [`maps`] (typed map handles, batched writes) and [`sets`] (policy-set
//!   staging and commit, the dynamic trie) are its parts;
//! - [`object`]: the embedded object (or why it was not built);
//! - [`status`] / [`error`]: the status, counters, attach mode and ban reason types; the error;
//! - [`pins`]: the pin directory, its compatibility check and removal;
//! - [`sys`]: an RCU grace period and the bpffs mount check.
//!
//! Config swaps are all-or-nothing: the idle policy set is written, then one `u32` index flips
//! (`rampart_active`); packets read the index once, so none sees half a policy.
//! Time is `CLOCK_MONOTONIC` ns (`bpf_ktime_get_ns`, [`crate::clock::now_ns`]).

pub mod abi;
pub(crate) mod dynamic;
pub(crate) mod error;
pub(crate) mod load;
pub(crate) mod lpm;
pub mod manager;
pub(crate) mod maps;
pub(crate) mod object;
pub(crate) mod pins;
pub(crate) mod policy;
pub(crate) mod sets;
pub(crate) mod status;
pub(crate) mod sync;
pub(crate) mod sys;

pub use error::XdpError;
pub use manager::{XdpBan, XdpManager, DEFAULT_PIN_ROOT};
pub use object::object_available;
pub use policy::{XdpPolicy, XdpPortPolicy};
pub use status::{BanReason, XdpCounters, XdpMapSizes, XdpMode, XdpStatus};
