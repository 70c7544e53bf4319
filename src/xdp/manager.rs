//! [`XdpManager`]: loads the embedded XDP object, attaches it, and keeps its pinned maps in step
//! with the configuration.
//!
//! Pins: maps are pinned by name under `<pin root>/v<ABI>/<interface>/` (default root
//! `/sys/fs/bpf/rampart`). The ABI version in the path means a pin left by an older build is
//! never opened; a pin in our directory whose type, key size, value size, max entries or flags
//! differ from this build's, or whose `rampart_meta` holds another ABI/layout, is refused with
//! [`XdpError::StalePins`] rather than misread. The program itself is attached through a BPF
//! link owned by this process: if the process dies the link closes and the filter is gone
//! (fail-open), while bans and SYN state stay pinned for the next attach.
//!
//! Attach resets both policy sets and the dynamic-block trie (the new process's config is the
//! truth; call [`XdpManager::apply`] right after), and keeps bans, SYN states and counters.
//!
//! Policy swap: [`XdpManager::stage`] writes the idle set (only the differences from what it
//! holds), [`XdpManager::commit`] flips the one-`u32` index `rampart_active`; [`XdpManager::apply`]
//! does both. A failed stage leaves the live set untouched. Before the idle set is rewritten
//! the next time, an RCU grace period ([`super::sys::RcuSync`]) guarantees no packet still
//! reads it.
//!
//! Sizes: the bans, prefix-ban, SYN-state and known-good maps are created with the
//! [`XdpMapSizes`] given to [`XdpManager::attach`] (the server passes the largest `maxTrackedIps`
//! of the protected listeners, or `xdp.maxBans`); [`XdpManager::sizes`] and the status say what
//! was allocated. A pinned map of another size is replaced (see [`super::pins`]).
//!
//! All map writes go through one mutex; `status` and `sweep` walk the ban maps (O(bans)).

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use aya::programs::{ProgramError, TestRun, TestRunOptions, Xdp};
use aya::{Ebpf, EbpfLoader};

use super::abi::{self, map_name, RampartBan, RampartDynValue, RampartIp, RampartSynKey};
use super::dynamic::kernel_entries;
use super::error::XdpError;
use super::load::{attach_program, classify, interface_exists, load_error, xdp_program};
use super::lpm::LpmKey;
use super::maps::{is_not_found, map_err, take_maps, Maps};
use super::object;
use super::pins::{check_pins, remove_pins};
use super::policy::{self, SetContents, XdpPolicy, XdpPortPolicy};
use super::status::{BanReason, XdpCounters, XdpMapSizes, XdpMode, XdpStatus};
use super::sys::{self, RcuSync};
use crate::protection::key::DEFAULT_IPV6_PREFIX;
use crate::protection::DynamicRule;

/// Default pin root; the maps live in `<root>/v<ABI>/<interface>/`.
pub const DEFAULT_PIN_ROOT: &str = "/sys/fs/bpf/rampart";

/// `XDP_DROP`, as returned by [`XdpManager::test_run`].
pub const XDP_DROP: u32 = 1;
/// `XDP_PASS`, as returned by [`XdpManager::test_run`].
pub const XDP_PASS: u32 = 2;

/// One kernel ban.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdpBan {
    /// Banned source (IPv6: the network address of its prefix; a boxed prefix: its network).
    pub ip: IpAddr,
    /// 32 for IPv4; the IPv6 prefix length sources are banned by; for a boxed prefix
    /// (`prefix`) its length in its own family (IPv4 /24 = 24).
    pub prefix_len: u8,
    /// A boxed prefix of the prefix tier (the prefix-ban trie), not one source.
    pub prefix: bool,
    /// The listener port the ban was made for.
    pub port: u16,
    /// CLOCK_MONOTONIC deadline in ns (the kernel may have extended it).
    pub deadline_ns: u64,
    /// GCRA TAT (ns) of the banned source's SYNs against the port's ban rate.
    pub tat_ns: u64,
    /// Why.
    pub reason: BanReason,
}

impl XdpBan {
    /// `blockedIps()` form: bare IPv4 / IPv6 address at /128, else `addr/len`; a boxed prefix
    /// always as a CIDR (`203.0.113.0/24`).
    pub fn display(&self) -> String {
        match self.ip {
            ip if self.prefix => format!("{ip}/{}", self.prefix_len),
            IpAddr::V6(v6) if self.prefix_len < 128 => format!("{v6}/{}", self.prefix_len),
            ip => ip.to_string(),
        }
    }
}

pub(super) struct State {
    pub(super) ebpf: Ebpf,
    pub(super) link: Option<aya::programs::xdp::XdpLinkId>,
    pub(super) maps: Maps,
    /// The live set (what `rampart_active` holds).
    pub(super) live: u32,
    /// What each set holds in the kernel.
    pub(super) sets: [SetContents; 2],
    /// A write to this set failed: its mirror is re-read from the kernel before the next use.
    pub(super) dirty: [bool; 2],
    /// The idle set holds a staged policy not yet committed.
    pub(super) staged: bool,
    /// The idle set was live until the last flip: wait a grace period before writing it.
    pub(super) needs_grace: bool,
    /// That grace period, started in the background at the flip.
    pub(super) grace: Option<JoinHandle<std::io::Result<()>>>,
    pub(super) rcu: Option<Arc<RcuSync>>,
    /// What the dynamic trie holds in the kernel.
    pub(super) dyn_kernel: BTreeMap<LpmKey, RampartDynValue>,
}

/// What a userspace write to a ban map stores: the later of the old and the new deadline, and
/// (for a new or expired ban) a TAT at `now + tau + T` of the port's ban rate, as if the burst
/// had just been exceeded (what boxed the client), so that a flood that goes on extends the ban
/// at once while one SYN per T or slower never does.
fn merged_ban(old: Option<RampartBan>, fresh: RampartBan, now: u64) -> RampartBan {
    match old {
        Some(old) if old.deadline_ns > now => RampartBan {
            deadline_ns: old.deadline_ns.max(fresh.deadline_ns),
            tat_ns: old.tat_ns,
            ..fresh
        },
        _ => fresh,
    }
}

// The napi layer shares one manager between threads.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<XdpManager>();
};

/// Owns the loaded XDP program, its link to the interface and its maps.
pub struct XdpManager {
    state: Mutex<State>,
    interface: String,
    mode: &'static str,
    attached: bool,
    pin_dir: PathBuf,
    pin_root: PathBuf,
    sizes: XdpMapSizes,
}

impl std::fmt::Debug for XdpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpManager")
            .field("interface", &self.interface)
            .field("mode", &self.mode)
            .field("attached", &self.attached)
            .field("pin_dir", &self.pin_dir)
            .finish()
    }
}

impl XdpManager {
    /// Attaches to `interface` with pins under [`DEFAULT_PIN_ROOT`]. `Auto` tries native (driver)
    /// XDP, then generic. Errors name the cause: object not built (clang missing), no
    /// CAP_BPF/CAP_NET_ADMIN, interface missing, bpffs unavailable, stale pins, busy interface.
    /// The sized maps are created with `sizes`.
    pub fn attach(
        interface: &str,
        mode: XdpMode,
        sizes: XdpMapSizes,
    ) -> Result<XdpManager, XdpError> {
        Self::attach_with(interface, mode, Path::new(DEFAULT_PIN_ROOT), sizes)
    }

    /// [`attach`](Self::attach) with another pin root (a directory on a bpffs).
    pub fn attach_with(
        interface: &str,
        mode: XdpMode,
        pin_root: &Path,
        sizes: XdpMapSizes,
    ) -> Result<XdpManager, XdpError> {
        object::object()?;
        if interface.is_empty() || interface.contains('/') || !interface_exists(interface) {
            return Err(XdpError::InterfaceMissing {
                interface: interface.to_string(),
            });
        }
        Self::open(pin_root, interface, Some(mode), sizes)
    }

    /// Loads the program and maps without attaching them to an interface, pinned under
    /// `<pin_root>/v<ABI>/<label>/`: for [`test_run`](Self::test_run) (`BPF_PROG_TEST_RUN`)
    /// and tooling. Same errors as [`attach`](Self::attach) minus the interface ones.
    /// The sized maps get the object's sizes ([`XdpMapSizes::DEFAULT`]).
    pub fn load_unattached(pin_root: &Path, label: &str) -> Result<XdpManager, XdpError> {
        Self::load_unattached_sized(pin_root, label, XdpMapSizes::DEFAULT)
    }

    /// [`load_unattached`](Self::load_unattached) with the sized maps at `sizes`.
    pub fn load_unattached_sized(
        pin_root: &Path,
        label: &str,
        sizes: XdpMapSizes,
    ) -> Result<XdpManager, XdpError> {
        object::object()?;
        if label.is_empty() || label.contains('/') {
            return Err(XdpError::Load {
                op: "loading unattached".to_string(),
                cause: format!("invalid pin label {label:?}"),
            });
        }
        Self::open(pin_root, label, None, sizes)
    }

    fn open(
        pin_root: &Path,
        name: &str,
        attach: Option<XdpMode>,
        sizes: XdpMapSizes,
    ) -> Result<XdpManager, XdpError> {
        let obj = object::object()?;
        if pin_root.starts_with("/sys/fs/bpf") {
            sys::ensure_bpffs(Path::new("/sys/fs/bpf"))?;
        }
        let pin_dir = pin_root.join(format!("v{}", abi::ABI_VERSION)).join(name);
        let existed = pin_dir.exists();
        let result = Self::open_in(obj, pin_root, &pin_dir, name, attach, sizes);
        if result.is_err() && !existed {
            // Leave no trace of a failed first attach (pins of an earlier run are kept).
            let _ = remove_pins(&pin_dir, pin_root);
        }
        result
    }

    fn open_in(
        obj: &[u8],
        pin_root: &Path,
        pin_dir: &Path,
        name: &str,
        attach: Option<XdpMode>,
        sizes: XdpMapSizes,
    ) -> Result<XdpManager, XdpError> {
        std::fs::create_dir_all(pin_dir).map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => XdpError::PermissionDenied {
                op: format!("creating pin directory {}", pin_dir.display()),
                cause: e.to_string(),
            },
            _ => XdpError::BpfFs {
                path: pin_dir.to_path_buf(),
                cause: format!("creating the pin directory: {e}"),
            },
        })?;
        if !sys::is_bpffs(pin_dir) {
            return Err(XdpError::BpfFs {
                path: pin_dir.to_path_buf(),
                cause: "not on a bpffs (mount -t bpf bpf /sys/fs/bpf)".to_string(),
            });
        }
        check_pins(pin_dir, &sizes)?;

        let mut ebpf = EbpfLoader::new()
            .default_map_pin_directory(pin_dir)
            .map_max_entries(map_name::BANS, sizes.bans)
            .map_max_entries(map_name::PREFIX_BANS, sizes.prefix_bans)
            .map_max_entries(map_name::SYN, sizes.syn_states)
            .map_max_entries(map_name::KNOWN_GOOD, sizes.known_good)
            .load(obj)
            .map_err(|e| classify("loading the XDP object", &e))?;
        let program: &mut Xdp = ebpf
            .program_mut(abi::PROGRAM_NAME)
            .ok_or_else(|| XdpError::Load {
                op: format!("finding program {}", abi::PROGRAM_NAME),
                cause: "missing from the object".to_string(),
            })?
            .try_into()
            .map_err(|e: ProgramError| classify("program type", &e))?;
        program.load().map_err(|e| load_error(&e))?;

        let maps = take_maps(&mut ebpf)?;
        let mut state = State {
            ebpf,
            link: None,
            maps,
            live: 0,
            sets: [SetContents::default(), SetContents::default()],
            dirty: [false; 2],
            staged: false,
            needs_grace: false,
            grace: None,
            rcu: None,
            dyn_kernel: BTreeMap::new(),
        };
        state.check_meta()?;
        let mode = match attach {
            None => "none",
            Some(mode) => {
                let (link, mode) = attach_program(xdp_program(&mut state.ebpf)?, name, mode)?;
                state.link = Some(link);
                mode
            }
        };
        state.reset()?;
        Ok(XdpManager {
            state: Mutex::new(state),
            interface: name.to_string(),
            mode,
            attached: attach.is_some(),
            pin_dir: pin_dir.to_path_buf(),
            pin_root: pin_root.to_path_buf(),
            sizes,
        })
    }

    /// What the sized maps were created with.
    pub fn sizes(&self) -> XdpMapSizes {
        self.sizes
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Detaches the program and removes the pins (the maps go when their last user closes).
    pub fn detach(self) -> Result<(), XdpError> {
        let XdpManager {
            state,
            pin_dir,
            pin_root,
            ..
        } = self;
        let mut state = state.into_inner().unwrap_or_else(|p| p.into_inner());
        if let Some(link) = state.link.take() {
            xdp_program(&mut state.ebpf)?
                .detach(link)
                .map_err(|e| classify("detaching the XDP link", &e))?;
        }
        drop(state);
        remove_pins(&pin_dir, &pin_root)
    }

    /// Where the maps are pinned.
    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }

    /// Replaces the kernel policy with `ports` (no unprotected listener ports, IPv6 prefix
    /// 64), all-or-nothing: see [`apply`](Self::apply).
    pub fn apply_policy(&self, ports: &[XdpPortPolicy]) -> Result<(), XdpError> {
        self.apply(&XdpPolicy::from_ports(ports))
    }

    /// [`stage`](Self::stage) then [`commit`](Self::commit): on error the live policy is
    /// unchanged; on success every packet from the flip on is judged by `policy`.
    pub fn apply(&self, policy: &XdpPolicy) -> Result<(), XdpError> {
        let contents = policy::build(policy)?;
        let mut state = self.lock();
        state.stage(contents)?;
        state.commit()
    }

    /// Validates `policy` and writes it into the idle set, leaving the live set untouched
    /// (a later stage replaces it). Cost: an RCU grace period if the idle set was live until
    /// the last commit, then one map write per difference from what the idle set holds.
    pub fn stage(&self, policy: &XdpPolicy) -> Result<(), XdpError> {
        let contents = policy::build(policy)?;
        self.lock().stage(contents)
    }

    /// Makes the staged set live with one `u32` write; no-op when nothing is staged.
    pub fn commit(&self) -> Result<(), XdpError> {
        self.lock().commit()
    }

    /// The live policy set (0 or 1), as `rampart_active` holds it.
    pub fn live_set(&self) -> Result<u32, XdpError> {
        let state = self.lock();
        state
            .maps
            .active
            .get(&0, 0)
            .map_err(|e| map_err(map_name::ACTIVE, "read", e))
    }

    /// Bans `ip` until `deadline_ns` (CLOCK_MONOTONIC) on behalf of listener `port`. IPv6
    /// sources are banned by that port's `ipv6PrefixLength` in the live policy. A live ban with
    /// a later deadline keeps it (bans never shorten; [`unban`](Self::unban) first to shorten).
    pub fn ban(
        &self,
        ip: IpAddr,
        port: u16,
        deadline_ns: u64,
        reason: BanReason,
    ) -> Result<(), XdpError> {
        let mut state = self.lock();
        let prefix = state.ipv6_prefix_len(port);
        let key = abi::source_id(ip, prefix);
        let now = crate::clock::now_ns();
        let fresh = RampartBan {
            deadline_ns,
            tat_ns: now.saturating_add(state.ban_excess_tat_ns(port)),
            reason: reason.code(),
            port,
            prefix_len: if abi::ip_from16(key.addr).is_ipv4() {
                32
            } else {
                u16::from(prefix)
            },
        };
        let value = merged_ban(state.maps.bans.get(&key, 0).ok(), fresh, now);
        state
            .maps
            .bans
            .insert(key, value, 0)
            .map_err(|e| map_err(map_name::BANS, "insert", e))
    }

    /// Bans every source in `net` (a boxed prefix of the prefix tier) until `deadline_ns`
    /// (CLOCK_MONOTONIC) on behalf of listener `port`, in the prefix-ban trie keyed by the
    /// prefix. The kernel judges a SYN by the longest boxed prefix holding its source, measures
    /// it against the port's ban rate and extends the ban on excess, as for one source. A live
    /// ban with a later deadline keeps it.
    pub fn ban_prefix(
        &self,
        net: IpNet,
        port: u16,
        deadline_ns: u64,
        reason: BanReason,
    ) -> Result<(), XdpError> {
        let mut state = self.lock();
        let net = net.trunc();
        let key = super::lpm::cidr_key(net);
        let trie_key = aya::maps::lpm_trie::Key::new(key.prefixlen, key.addr);
        let now = crate::clock::now_ns();
        let fresh = RampartBan {
            deadline_ns,
            tat_ns: now.saturating_add(state.ban_excess_tat_ns(port)),
            reason: reason.code(),
            port,
            prefix_len: u16::from(net.prefix_len()),
        };
        let old = state.maps.prefix_bans.get(&trie_key, 0).ok();
        // An exact-key read: `get` on an LPM trie is a longest-prefix lookup.
        let old = old.filter(|_| state.prefix_ban_keys().contains(&key));
        let value = merged_ban(old, fresh, now);
        state
            .maps
            .prefix_bans
            .insert(&trie_key, value, 0)
            .map_err(|e| map_err(map_name::PREFIX_BANS, "insert", e))
    }

    /// Lifts the ban on the boxed prefix `net`; true if there was one.
    pub fn unban_prefix(&self, net: IpNet) -> Result<bool, XdpError> {
        let mut state = self.lock();
        let key = super::lpm::cidr_key(net.trunc());
        let trie_key = aya::maps::lpm_trie::Key::new(key.prefixlen, key.addr);
        match state.maps.prefix_bans.remove(&trie_key) {
            Ok(()) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(map_err(map_name::PREFIX_BANS, "remove", e)),
        }
    }

    /// Marks `ip`'s client known-good on listener `port` until `deadline_ns` (CLOCK_MONOTONIC):
    /// its SYNs skip that port's SYN budget (never its bans or SYN limit). IPv6 clients by the
    /// port's prefix, as bans. A later deadline in the map is kept.
    pub fn set_known_good(&self, ip: IpAddr, port: u16, deadline_ns: u64) -> Result<(), XdpError> {
        let mut state = self.lock();
        let key = state.known_good_key(ip, port);
        let deadline = match state.maps.known_good.get(&key, 0) {
            Ok(old) => old.max(deadline_ns),
            Err(_) => deadline_ns,
        };
        state
            .maps
            .known_good
            .insert(key, deadline, 0)
            .map_err(|e| map_err(map_name::KNOWN_GOOD, "insert", e))
    }

    /// The known-good deadline (ns) of `ip` on `port` in the kernel map, if any.
    pub fn known_good(&self, ip: IpAddr, port: u16) -> Option<u64> {
        let state = self.lock();
        let key = state.known_good_key(ip, port);
        state.maps.known_good.get(&key, 0).ok()
    }

    /// Lifts the ban on `ip` (its prefix under listener `port`'s policy for IPv6); true if
    /// there was one.
    pub fn unban(&self, ip: IpAddr, port: u16) -> Result<bool, XdpError> {
        let mut state = self.lock();
        let key = abi::source_id(ip, state.ipv6_prefix_len(port));
        match state.maps.bans.remove(&key) {
            Ok(()) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(map_err(map_name::BANS, "remove", e)),
        }
    }

    /// Every ban in the kernel map, live or expired, with its (possibly extended) deadline.
    pub fn bans(&self) -> Vec<XdpBan> {
        let state = self.lock();
        state.bans()
    }

    /// Removes bans whose deadline is `<= now_ns`; returns how many. (Expired dynamic blocks
    /// leave the trie at the next [`sync_dynamic`](Self::sync_dynamic).) The
    /// kernel ignores expired entries anyway; this frees their slots. O(bans).
    pub fn sweep(&self, now_ns: u64) -> usize {
        let mut state = self.lock();
        let expired: Vec<RampartIp> = state
            .maps
            .bans
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, ban)| ban.deadline_ns <= now_ns)
            .map(|(k, _)| k)
            .collect();
        let mut removed = 0;
        for key in expired {
            // Re-check: the kernel may have extended it meanwhile (it only extends live bans,
            // so an expired one stays expired unless userspace re-banned it).
            if let Ok(ban) = state.maps.bans.get(&key, 0) {
                if ban.deadline_ns <= now_ns && state.maps.bans.remove(&key).is_ok() {
                    removed += 1;
                }
            }
        }
        let expired: Vec<_> = state
            .maps
            .prefix_bans
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, ban)| ban.deadline_ns <= now_ns)
            .map(|(k, _)| k)
            .collect();
        for key in expired {
            // The same re-check: the kernel extends prefix bans too.
            if let Ok(ban) = state.maps.prefix_bans.get(&key, 0) {
                if ban.deadline_ns <= now_ns && state.maps.prefix_bans.remove(&key).is_ok() {
                    removed += 1;
                }
            }
        }
        removed
    }

    /// Makes the dynamic-block trie hold exactly `rules` (the engine's live `blockIp` entries,
    /// [`crate::protection::DynamicBlocks::rules`]): computes the trie's contents and writes only
    /// the keys that changed. On a failed write the mirror keeps what was written, so the next
    /// call retries the rest.
    pub fn sync_dynamic(&self, rules: &[DynamicRule]) -> Result<(), XdpError> {
        self.lock().write_dynamic(kernel_entries(rules))
    }

    /// Number of keys the dynamic-block trie holds (family markers included).
    pub fn dynamic_keys(&self) -> usize {
        self.lock().dyn_kernel.len()
    }

    /// Counters (summed over CPUs) and live bans at `crate::clock::now_ns()`.
    pub fn status(&self) -> XdpStatus {
        let now = crate::clock::now_ns();
        let state = self.lock();
        let mut banned: Vec<String> = state
            .bans()
            .into_iter()
            .filter(|b| b.deadline_ns > now)
            .map(|b| b.display())
            .collect();
        banned.sort();
        banned.dedup();
        let c = |slot| state.counter(slot);
        XdpStatus {
            attached: self.attached,
            interface: if self.attached {
                self.interface.clone()
            } else {
                String::new()
            },
            mode: self.mode,
            counters: XdpCounters {
                passed: c(abi::counter::PASSED),
                dropped_cidr: c(abi::counter::DROP_CIDR),
                dropped_dynamic: c(abi::counter::DROP_DYNAMIC),
                dropped_penalty: c(abi::counter::DROP_PENALTY),
                dropped_syn_flood: c(abi::counter::DROP_SYNFLOOD),
                dropped_unparsed: c(abi::counter::DROP_UNPARSED),
                banned: c(abi::counter::BANNED),
                ban_extended: c(abi::counter::BAN_EXTENDED),
                dropped_syn_budget: c(abi::counter::DROP_SYN_BUDGET),
                dropped_non_tcp: c(abi::counter::DROP_NON_TCP),
                dropped_fragment: c(abi::counter::DROP_FRAGMENT),
            },
            banned_ips: banned,
            errors: 0,
            ban_queue_overflow: 0,
            maps: self.sizes,
            known_good_queue_overflow: 0,
            known_good_mirrored: 0,
        }
    }

    /// One counter slot ([`abi::counter`]) summed over CPUs.
    pub fn counter(&self, slot: u32) -> u64 {
        self.lock().counter(slot)
    }

    /// The SYN GCRA theoretical arrival time (ns) of `ip` on `port`, if tracked.
    pub fn syn_tat(&self, ip: IpAddr, port: u16) -> Option<u64> {
        let state = self.lock();
        let id = abi::source_id(ip, state.ipv6_prefix_len(port));
        let key = RampartSynKey {
            addr: id.addr,
            port,
            pad: 0,
        };
        state.maps.syn.get(&key, 0).ok().map(|s| s.tat_ns)
    }

    /// The SYN budget's GCRA theoretical arrival time (ns) of `port` (0: never used).
    pub fn budget_tat(&self, port: u16) -> u64 {
        self.lock()
            .maps
            .budget
            .get(&u32::from(port), 0)
            .unwrap_or(0)
    }

    /// Runs the program once on `frame` with `BPF_PROG_TEST_RUN` and returns its action
    /// ([`XDP_DROP`], [`XDP_PASS`]). Maps are the real ones: verdicts update counters, SYN
    /// state and bans. The kernel rejects frames shorter than 14 bytes (EINVAL).
    pub fn test_run(&self, frame: &[u8]) -> Result<u32, XdpError> {
        self.test_run_timed(frame, 1).map(|(action, _)| action)
    }

    /// [`test_run`](Self::test_run) repeated `repeat` times in the kernel; returns the last
    /// action and the kernel's mean time per run (the per-packet cost of the program).
    pub fn test_run_timed(
        &self,
        frame: &[u8],
        repeat: u32,
    ) -> Result<(u32, std::time::Duration), XdpError> {
        let state = self.lock();
        let program: &Xdp = state
            .ebpf
            .program(abi::PROGRAM_NAME)
            .ok_or_else(|| XdpError::Load {
                op: format!("finding program {}", abi::PROGRAM_NAME),
                cause: "missing from the object".to_string(),
            })?
            .try_into()
            .map_err(|e: ProgramError| classify("program type", &e))?;
        let mut out = vec![0u8; frame.len() + 256];
        let result = program
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                repeat: repeat.max(1),
                ..TestRunOptions::new()
            })
            .map_err(|e| classify("BPF_PROG_TEST_RUN", &e))?;
        Ok((result.return_value, result.duration))
    }
}

impl State {
    /// tau + T (ns) of listener `port`'s ban rate in the live set (0 without one): a new ban's
    /// TAT is now + this.
    fn ban_excess_tat_ns(&self, port: u16) -> u64 {
        self.sets[self.live as usize]
            .ports
            .get(&port)
            .map(|p| p.ban_tolerance_ns.saturating_add(p.ban_interval_ns))
            .unwrap_or(0)
    }

    /// The exact keys the prefix-ban trie holds.
    fn prefix_ban_keys(&self) -> Vec<abi::RampartCidrKey> {
        self.maps
            .prefix_bans
            .keys()
            .filter_map(Result::ok)
            .map(|k| abi::RampartCidrKey {
                prefixlen: k.prefix_len(),
                addr: k.data(),
            })
            .collect()
    }

    /// The known-good map's key of `ip` on listener `port` (IPv6 clients by the port's prefix).
    fn known_good_key(&self, ip: IpAddr, port: u16) -> RampartSynKey {
        RampartSynKey {
            addr: abi::source_id(ip, self.ipv6_prefix_len(port)).addr,
            port,
            pad: 0,
        }
    }

    /// The IPv6 prefix of listener `port` in the live set (the set header's when the port has
    /// no entry).
    fn ipv6_prefix_len(&self, port: u16) -> u8 {
        let ports = &self.sets[self.live as usize].ports;
        ports
            .get(&port)
            .or_else(|| ports.get(&0))
            .map(|h| h.ipv6_prefix_len.min(128) as u8)
            .unwrap_or(DEFAULT_IPV6_PREFIX)
    }

    fn counter(&self, slot: u32) -> u64 {
        self.maps
            .stats
            .get(&slot, 0)
            .map(|values| values.iter().copied().fold(0u64, u64::saturating_add))
            .unwrap_or(0)
    }

    fn bans(&self) -> Vec<XdpBan> {
        let mut out: Vec<XdpBan> = self
            .maps
            .bans
            .iter()
            .filter_map(Result::ok)
            .map(|(key, ban)| XdpBan {
                ip: abi::ip_from16(key.addr),
                prefix_len: ban.prefix_len.min(128) as u8,
                prefix: false,
                port: ban.port,
                deadline_ns: ban.deadline_ns,
                tat_ns: ban.tat_ns,
                reason: BanReason::from_code(ban.reason),
            })
            .collect();
        out.extend(
            self.maps
                .prefix_bans
                .iter()
                .filter_map(Result::ok)
                .map(|(key, ban)| XdpBan {
                    ip: abi::ip_from16(key.data()),
                    prefix_len: ban.prefix_len.min(128) as u8,
                    prefix: true,
                    port: ban.port,
                    deadline_ns: ban.deadline_ns,
                    tat_ns: ban.tat_ns,
                    reason: BanReason::from_code(ban.reason),
                }),
        );
        out.sort_by_key(|b| (b.ip, b.deadline_ns));
        out
    }
}
