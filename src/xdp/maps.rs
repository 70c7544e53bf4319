//! The program's maps as typed aya handles, taken from the loaded object, and the helpers
//! every map write goes through (error classification, LPM keys, batched trie diffs).

use std::os::fd::AsFd;

use aya::maps::lpm_trie::Key;
use aya::maps::{Array, HashMap, IterableMap, LpmTrie, Map, MapData, MapError, PerCpuArray};
use aya::Ebpf;

use super::abi::{
    map_name, RampartBan, RampartCidrKey, RampartDynValue, RampartIp, RampartLpmData, RampartMeta,
    RampartPortPolicy, RampartSynKey, RampartSynState,
};
use super::error::XdpError;
use super::lpm::LpmKey;
use super::policy;
use super::sys::{self, BatchError};

pub(super) type PortMap = HashMap<MapData, u16, RampartPortPolicy>;
pub(super) type ListTrie = LpmTrie<MapData, [u8; 16], u64>;

pub(super) struct Maps {
    pub(super) meta: Array<MapData, RampartMeta>,
    pub(super) active: Array<MapData, u32>,
    pub(super) ports: [PortMap; 2],
    pub(super) allow: [ListTrie; 2],
    pub(super) block: [ListTrie; 2],
    pub(super) dynamic: LpmTrie<MapData, RampartLpmData, RampartDynValue>,
    pub(super) bans: HashMap<MapData, RampartIp, RampartBan>,
    pub(super) syn: HashMap<MapData, RampartSynKey, RampartSynState>,
    pub(super) prefix_bans: LpmTrie<MapData, [u8; 16], RampartBan>,
    pub(super) known_good: HashMap<MapData, RampartSynKey, u64>,
    pub(super) budget: Array<MapData, u64>,
    pub(super) stats: PerCpuArray<MapData, u64>,
}

pub(super) fn map_err(map: &str, op: &'static str, err: MapError) -> XdpError {
    XdpError::of_map(map, op, sys::errno_of(&err), sys::chain(&err))
}

pub(super) fn is_not_found(err: &MapError) -> bool {
    matches!(err, MapError::KeyNotFound) || sys::errno_of(err) == Some(libc::ENOENT)
}

pub(super) fn lpm(key: &LpmKey) -> Key<RampartLpmData> {
    Key::new(key.0, key.1)
}

pub(super) fn take_maps(ebpf: &mut Ebpf) -> Result<Maps, XdpError> {
    fn take<T: TryFrom<Map, Error = MapError>>(ebpf: &mut Ebpf, name: &str) -> Result<T, XdpError> {
        let map = ebpf.take_map(name).ok_or_else(|| XdpError::Load {
            op: format!("taking map {name}"),
            cause: "missing from the object".to_string(),
        })?;
        T::try_from(map).map_err(|e| map_err(name, "open", e))
    }
    Ok(Maps {
        meta: take(ebpf, map_name::META)?,
        active: take(ebpf, map_name::ACTIVE)?,
        ports: [
            take(ebpf, map_name::PORTS[0])?,
            take(ebpf, map_name::PORTS[1])?,
        ],
        allow: [
            take(ebpf, map_name::ALLOW[0])?,
            take(ebpf, map_name::ALLOW[1])?,
        ],
        block: [
            take(ebpf, map_name::BLOCK[0])?,
            take(ebpf, map_name::BLOCK[1])?,
        ],
        dynamic: take(ebpf, map_name::DYNAMIC)?,
        bans: take(ebpf, map_name::BANS)?,
        syn: take(ebpf, map_name::SYN)?,
        prefix_bans: take(ebpf, map_name::PREFIX_BANS)?,
        known_good: take(ebpf, map_name::KNOWN_GOOD)?,
        budget: take(ebpf, map_name::BUDGET)?,
        stats: take(ebpf, map_name::STATS)?,
    })
}

/// Applies a diff to an allow/block trie: batched deletes then batched upserts
/// (`BPF_MAP_*_BATCH`, 8192 per syscall), one syscall per element where the kernel has no
/// batch operation for LPM tries.
pub(super) fn write_trie(
    trie: &mut ListTrie,
    name: &str,
    d: policy::Diff<RampartCidrKey, u64>,
) -> Result<(), XdpError> {
    let batch_err = |op: &'static str, error: std::io::Error| {
        XdpError::of_map(name, op, error.raw_os_error(), error.to_string())
    };
    let key = |k: &RampartCidrKey| Key::new(k.prefixlen, k.addr);

    let result = sys::delete_batch(trie.map().fd().as_fd(), &d.remove);
    let from = match result {
        Ok(()) => d.remove.len(),
        Err(BatchError::Unsupported { done }) => done,
        Err(BatchError::Failed { error, .. }) => return Err(batch_err("delete", error)),
    };
    for k in &d.remove[from..] {
        match trie.remove(&key(k)) {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(map_err(name, "remove", e)),
        }
    }

    let (keys, values): (Vec<RampartCidrKey>, Vec<u64>) = d.upsert.into_iter().unzip();
    let result = sys::update_batch(trie.map().fd().as_fd(), &keys, &values);
    let from = match result {
        Ok(()) => keys.len(),
        Err(BatchError::Unsupported { done }) => done,
        Err(BatchError::Failed { error, .. }) => return Err(batch_err("insert", error)),
    };
    for (k, v) in keys[from..].iter().zip(&values[from..]) {
        trie.insert(&key(k), v, 0)
            .map_err(|e| map_err(name, "insert", e))?;
    }
    Ok(())
}
