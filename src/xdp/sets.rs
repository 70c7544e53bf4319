//! The policy sets and the dynamic-block trie, written through the manager's [`State`]: the
//! pinned-map compatibility check, reset at attach, staging a set (differences only, after an RCU
//! grace period), the one-index commit, and the trie diff.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::abi::{self, map_name, RampartCidrKey, RampartDynValue, RampartMeta};
use super::error::XdpError;
use super::load::classify;
use super::lpm::LpmKey;
use super::manager::State;
use super::maps::{is_not_found, lpm, map_err, write_trie, ListTrie};
use super::policy::{self, SetContents};
use super::sys::RcuSync;

impl State {
    pub(super) fn check_meta(&mut self) -> Result<(), XdpError> {
        let meta = self
            .maps
            .meta
            .get(&0, 0)
            .map_err(|e| map_err(map_name::META, "read", e))?;
        let ours = RampartMeta {
            abi_version: abi::ABI_VERSION,
            layout: abi::LAYOUT,
        };
        if meta != RampartMeta::default() && meta != ours {
            return Err(XdpError::StalePins {
                dir: PathBuf::from(map_name::META),
                cause: format!(
                    "rampart_meta holds ABI {} layout {:#x}, this build is ABI {} layout {:#x}",
                    meta.abi_version,
                    meta.layout,
                    abi::ABI_VERSION,
                    abi::LAYOUT
                ),
            });
        }
        self.maps
            .meta
            .set(0, ours, 0)
            .map_err(|e| map_err(map_name::META, "write", e))
    }

    /// Empties both policy sets and the dynamic trie, whatever a previous process left.
    pub(super) fn reset(&mut self) -> Result<(), XdpError> {
        let live = self
            .maps
            .active
            .get(&0, 0)
            .map_err(|e| map_err(map_name::ACTIVE, "read", e))?
            & 1;
        self.live = live;
        for set in 0..2 {
            self.sets[set] = self.read_set(set)?;
        }
        self.dyn_kernel = self
            .maps
            .dynamic
            .iter()
            .filter_map(Result::ok)
            .map(|(k, v)| ((k.prefix_len(), k.data()), v))
            .collect();
        self.write_dynamic(BTreeMap::new())?;
        // Empty the idle set, flip to it, then empty the other after a grace period.
        self.stage(SetContents::default())?;
        self.commit()?;
        self.stage(SetContents::default())?;
        self.staged = false;
        Ok(())
    }

    pub(super) fn read_set(&self, set: usize) -> Result<SetContents, XdpError> {
        let ports = self.maps.ports[set]
            .iter()
            .collect::<Result<BTreeMap<_, _>, _>>()
            .map_err(|e| map_err(map_name::PORTS[set], "read", e))?;
        let read_trie = |trie: &ListTrie, name: &str| {
            let mut entries = trie
                .iter()
                .map(|r| {
                    r.map(|(k, v)| {
                        let key = RampartCidrKey {
                            prefixlen: k.prefix_len(),
                            addr: k.data(),
                        };
                        (key, v)
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| map_err(name, "read", e))?;
            entries.sort_unstable_by_key(|&(k, _)| k);
            Ok::<_, XdpError>(entries)
        };
        Ok(SetContents {
            ports,
            allow: read_trie(&self.maps.allow[set], map_name::ALLOW[set])?,
            block: read_trie(&self.maps.block[set], map_name::BLOCK[set])?,
        })
    }

    pub(super) fn rcu(&mut self) -> Result<Arc<RcuSync>, XdpError> {
        if self.rcu.is_none() {
            let rcu = RcuSync::new().map_err(|e| {
                classify(
                    "creating the grace-period map",
                    &e as &dyn std::error::Error,
                )
            })?;
            self.rcu = Some(Arc::new(rcu));
        }
        Ok(Arc::clone(self.rcu.as_ref().expect("just set")))
    }

    /// Waits until no packet can still be reading the idle set (it was live before the flip).
    pub(super) fn finish_grace(&mut self) -> Result<(), XdpError> {
        if let Some(handle) = self.grace.take() {
            if let Ok(Ok(())) = handle.join() {
                self.needs_grace = false;
            }
        }
        if self.needs_grace {
            self.rcu()?
                .wait()
                .map_err(|e| classify("RCU grace period", &e as &dyn std::error::Error))?;
            self.needs_grace = false;
        }
        Ok(())
    }

    pub(super) fn stage(&mut self, target: SetContents) -> Result<(), XdpError> {
        self.finish_grace()?;
        let idle = (1 - self.live) as usize;
        self.staged = false;
        if self.dirty[idle] {
            self.sets[idle] = self.read_set(idle)?;
            self.dirty[idle] = false;
        }
        match self.write_set(idle, &target) {
            Ok(()) => {
                self.sets[idle] = target;
                self.staged = true;
                Ok(())
            }
            Err(e) => {
                // The live set is untouched; the idle one is re-read before its next use.
                self.dirty[idle] = true;
                Err(e)
            }
        }
    }

    pub(super) fn write_set(&mut self, idle: usize, target: &SetContents) -> Result<(), XdpError> {
        let d = policy::diff(&self.sets[idle].ports, &target.ports);
        let name = map_name::PORTS[idle];
        for port in d.remove {
            match self.maps.ports[idle].remove(&port) {
                Ok(()) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(map_err(name, "remove", e)),
            }
        }
        for (port, value) in d.upsert {
            self.maps.ports[idle]
                .insert(port, value, 0)
                .map_err(|e| map_err(name, "insert", e))?;
        }
        let d = policy::diff_sorted(&self.sets[idle].allow, &target.allow);
        write_trie(&mut self.maps.allow[idle], map_name::ALLOW[idle], d)?;
        let d = policy::diff_sorted(&self.sets[idle].block, &target.block);
        write_trie(&mut self.maps.block[idle], map_name::BLOCK[idle], d)
    }

    pub(super) fn commit(&mut self) -> Result<(), XdpError> {
        if !self.staged {
            return Ok(());
        }
        let idle = 1 - self.live;
        self.maps
            .active
            .set(0, idle, 0)
            .map_err(|e| map_err(map_name::ACTIVE, "write", e))?;
        self.live = idle;
        self.staged = false;
        self.needs_grace = true;
        // Start the grace period now so the next stage rarely waits for it.
        if let Ok(rcu) = self.rcu() {
            self.grace = std::thread::Builder::new()
                .name("rampart-xdp-rcu".to_string())
                .spawn(move || rcu.wait())
                .ok();
        }
        Ok(())
    }

    /// Writes the differences between the dynamic blocks and the kernel trie (upserts first:
    /// a changing block never opens a gap).
    pub(super) fn write_dynamic(
        &mut self,
        wanted: BTreeMap<LpmKey, RampartDynValue>,
    ) -> Result<(), XdpError> {
        let d = policy::diff(&self.dyn_kernel, &wanted);
        for (key, value) in d.upsert {
            self.maps
                .dynamic
                .insert(&lpm(&key), value, 0)
                .map_err(|e| map_err(map_name::DYNAMIC, "insert", e))?;
            self.dyn_kernel.insert(key, value);
        }
        for key in d.remove {
            match self.maps.dynamic.remove(&lpm(&key)) {
                Ok(()) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(map_err(map_name::DYNAMIC, "remove", e)),
            }
            self.dyn_kernel.remove(&key);
        }
        Ok(())
    }
}
