//! Pinned maps on bpffs: where they live, what a compatible pin looks like, how they go away.
//!
//! Layout: `<pin root>/v<ABI>/<name>/<map>` with `<name>` the interface (or a label for
//! unattached loads). The ABI version in the path keeps an older build's pins out of reach;
//! inside our directory every existing pin is checked against this build's map definition
//! (type, key size, value size, max entries, flags) before the object is loaded, because the
//! loader would otherwise reuse a mismatched pin and misread it. Cost: one `BPF_OBJ_GET` and
//! one `BPF_OBJ_GET_INFO_BY_FD` per pinned map at attach.
//!
//! Sized maps (bans, prefix bans, SYN states, known-good: [`XdpMapSizes`]) follow the config: a
//! pin of one of them that differs from this build's definition only in `max_entries` is removed
//! (its entries are lost; the attaching process re-writes the bans of its engines) so the map is
//! created at the size asked for.

use std::path::Path;

use aya::maps::{MapInfo, MapType};

use super::abi::{
    self, map_name, RampartBan, RampartCidrKey, RampartDynValue, RampartIp, RampartLpmKey,
    RampartMeta, RampartPortPolicy, RampartSynKey, RampartSynState,
};
use super::error::XdpError;
use super::status::XdpMapSizes;
use super::sys;

/// One pinned map as this build defines it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct MapDef {
    /// Map (and pin file) name.
    pub name: &'static str,
    /// Map type.
    pub map_type: MapType,
    /// Key size in bytes.
    pub key: u32,
    /// Value size in bytes (per CPU for per-CPU maps).
    pub value: u32,
    /// max_entries.
    pub max_entries: u32,
    /// map_flags (`BPF_F_NO_PREALLOC` = 1 for LPM tries).
    pub flags: u32,
    /// `max_entries` follows the config ([`XdpMapSizes`]).
    pub sized: bool,
}

/// Every map of the object, with the sizes of the `abi` twins and the sized maps at `sizes`.
pub(crate) fn map_defs(sizes: &XdpMapSizes) -> Vec<MapDef> {
    fn def<K, V>(name: &'static str, map_type: MapType, max_entries: u32) -> MapDef {
        MapDef {
            name,
            map_type,
            key: size_of::<K>() as u32,
            value: size_of::<V>() as u32,
            max_entries,
            flags: if map_type == MapType::LpmTrie { 1 } else { 0 },
            sized: false,
        }
    }
    fn sized(mut d: MapDef) -> MapDef {
        d.sized = true;
        d
    }
    use std::mem::size_of;
    use MapType::{Array, Hash, LpmTrie, LruHash, PerCpuArray};
    let mut defs = vec![
        def::<u32, RampartMeta>(map_name::META, Array, 1),
        def::<u32, u32>(map_name::ACTIVE, Array, 1),
        def::<RampartLpmKey, RampartDynValue>(map_name::DYNAMIC, LpmTrie, abi::MAX_DYNAMIC),
        sized(def::<RampartIp, RampartBan>(
            map_name::BANS,
            LruHash,
            sizes.bans,
        )),
        sized(def::<RampartSynKey, RampartSynState>(
            map_name::SYN,
            LruHash,
            sizes.syn_states,
        )),
        sized(def::<RampartCidrKey, RampartBan>(
            map_name::PREFIX_BANS,
            LpmTrie,
            sizes.prefix_bans,
        )),
        sized(def::<RampartSynKey, u64>(
            map_name::KNOWN_GOOD,
            LruHash,
            sizes.known_good,
        )),
        def::<u32, u64>(map_name::BUDGET, Array, abi::BUDGET_SLOTS),
        def::<u32, u64>(map_name::STATS, PerCpuArray, abi::counter::MAX),
    ];
    for set in 0..2 {
        defs.push(def::<u16, RampartPortPolicy>(
            map_name::PORTS[set],
            Hash,
            abi::MAX_PORTS,
        ));
        for name in [map_name::ALLOW[set], map_name::BLOCK[set]] {
            defs.push(def::<RampartCidrKey, u64>(name, LpmTrie, abi::MAX_CIDRS));
        }
    }
    defs
}

/// Refuses pins whose definition differs from this build's; removes a sized map's pin whose
/// only difference is its size.
pub(crate) fn check_pins(pin_dir: &Path, sizes: &XdpMapSizes) -> Result<(), XdpError> {
    for d in map_defs(sizes) {
        let (map_type, key, value, max, flags) =
            (d.map_type, d.key, d.value, d.max_entries, d.flags);
        let path = pin_dir.join(d.name);
        if !path.exists() {
            continue;
        }
        let info = MapInfo::from_pin(&path).map_err(|e| XdpError::StalePins {
            dir: pin_dir.to_path_buf(),
            cause: format!(
                "{}: cannot read map info ({}); remove {}",
                path.display(),
                sys::chain(&e),
                pin_dir.display()
            ),
        })?;
        let got = (
            info.map_type().ok(),
            info.key_size(),
            info.value_size(),
            info.max_entries(),
            info.map_flags(),
        );
        if d.sized && got.3 != max && got == (Some(map_type), key, value, got.3, flags) {
            tracing::info!(
                map = d.name,
                from = got.3,
                to = max,
                "XDP map resized: the pinned copy is replaced"
            );
            std::fs::remove_file(&path).map_err(|e| XdpError::BpfFs {
                path: path.clone(),
                cause: format!("removing a pin of another size: {e}"),
            })?;
            continue;
        }
        if got != (Some(map_type), key, value, max, flags) {
            return Err(XdpError::StalePins {
                dir: pin_dir.to_path_buf(),
                cause: format!(
                    "{} is {:?} key {} value {} max {} flags {:#x}, this build expects {:?} key \
                     {key} value {value} max {max} flags {flags:#x}; detach the other Rampart \
                     and remove {}",
                    path.display(),
                    got.0,
                    got.1,
                    got.2,
                    got.3,
                    got.4,
                    map_type,
                    pin_dir.display()
                ),
            });
        }
    }
    Ok(())
}

/// Removes this build's pins from `pin_dir`, then the directories that became empty.
pub(crate) fn remove_pins(pin_dir: &Path, pin_root: &Path) -> Result<(), XdpError> {
    for d in map_defs(&XdpMapSizes::DEFAULT) {
        let path = pin_dir.join(d.name);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(XdpError::BpfFs {
                    path,
                    cause: format!("removing the pin: {e}"),
                })
            }
        }
    }
    // Directories go only when empty (another interface may still use the root).
    let _ = std::fs::remove_dir(pin_dir);
    if let Some(version_dir) = pin_dir.parent() {
        let _ = std::fs::remove_dir(version_dir);
    }
    let _ = std::fs::remove_dir(pin_root);
    Ok(())
}
