//! Session-ticket encryption (`sessionTickets`, `ticketKeyRotationS`, `cluster.shareTicketKeys`;
//! docs/proxy.md: TLS, "Session tickets").
//!
//! A ticket (TLS 1.2 RFC 5077, TLS 1.3 RFC 8446 §4.6.1) is the session state sealed with
//! AES-256-GCM (aws-lc-rs `RandomizedNonceKey`: a fresh random 96-bit nonce per ticket) under a
//! 32-byte key, prefixed by that key's random 16-byte name (the layout of RFC 5077 §4's
//! `key_name`, as HAProxy and nginx keys have) so a ticket says which key made it:
//! `name (16) ‖ nonce (12) ‖ ciphertext ‖ tag (16)`. The additional data is the digest of what
//! the ticket may resume ([`crate::tls::sessions::SessionKey::digest`]: certificate,
//! client-certificate policy, `tls` options), so a ticket made for one certificate never
//! resumes on another even when the keys are shared.
//!
//! Keys live in a [`KeySet`] of three: `previous`, `current`, `next`. Time is cut in epochs of
//! `ticketKeyRotationS` seconds of the wall clock (UNIX time / rotation); at each epoch boundary
//! the set shifts (`next` becomes `current`, `current` becomes `previous`, a new `next` is made).
//! New tickets are sealed with `current`; a ticket opens under any of the three, so a ticket made
//! under key k resumes until k falls out of the set: one to two rotations after it was made. The
//! ticket lifetime hint is therefore two rotations. `next` is accepted so that a node already in
//! the next epoch (shared keys, below) is understood by one still in the previous one.
//!
//! Local keys (the default) are made on this node, one set per resumption state, and rotated
//! lazily by the handshake that first sees the new epoch (a `try_lock`; a handshake never waits
//! for another's rotation, it uses the set it has). Shared keys (`cluster.shareTicketKeys`) come
//! from Redis through the cluster tier's ticket-key task ([`SharedKeys`], read with one
//! `ArcSwap` load); until a first set has arrived a ticketer uses its local keys, and once one
//! has, it keeps the last set received while Redis is unreachable.
//!
//! AES-GCM with random nonces is safe for 2^32 tickets per key (NIST SP 800-38D §8.3): at the
//! default rotation (6 h) that is 198,000 new tickets per second, sustained.

pub use crate::tls::options::{DEFAULT_ROTATION_S, MAX_ROTATION_S};
use arc_swap::{ArcSwap, ArcSwapOption};
use aws_lc_rs::aead::{Aad, Nonce, RandomizedNonceKey, AES_256_GCM, NONCE_LEN};
use rustls::server::ProducesTickets;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

/// Length of a key's name, the first bytes of every ticket it seals.
pub const NAME_LEN: usize = 16;
/// Length of an AES-256-GCM key.
pub const KEY_LEN: usize = 32;
/// Length of one key's material as stored and shared: name then key.
pub const MATERIAL_LEN: usize = NAME_LEN + KEY_LEN;
const TAG_LEN: usize = 16;

/// The current epoch for `rotation_s`: UNIX seconds / rotation.
pub fn epoch_now(rotation_s: u64) -> u64 {
    let s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    s / rotation_s.max(1)
}

/// Fresh random key material (name then key) from aws-lc's RNG; `FailedToGetRandomBytes` when
/// it has none to give.
pub fn random_material() -> Result<[u8; MATERIAL_LEN], rustls::Error> {
    let mut m = [0u8; MATERIAL_LEN];
    aws_lc_rs::rand::fill(&mut m).map_err(|_| rustls::Error::FailedToGetRandomBytes)?;
    Ok(m)
}

/// One ticket key: its name and its AES-256-GCM key. `Debug` shows the name only.
pub struct TicketKey {
    name: [u8; NAME_LEN],
    key: RandomizedNonceKey,
}

impl fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TicketKey({})", hex(&self.name))
    }
}

impl TicketKey {
    /// The key of `material` (name then key, [`MATERIAL_LEN`] bytes).
    pub fn new(material: &[u8; MATERIAL_LEN]) -> Result<TicketKey, String> {
        let mut name = [0u8; NAME_LEN];
        name.copy_from_slice(&material[..NAME_LEN]);
        let key = RandomizedNonceKey::new(&AES_256_GCM, &material[NAME_LEN..])
            .map_err(|_| "AES-256-GCM refused the key".to_string())?;
        Ok(TicketKey { name, key })
    }

    /// A fresh random key.
    pub fn random() -> Result<TicketKey, rustls::Error> {
        TicketKey::new(&random_material()?).map_err(rustls::Error::General)
    }

    /// This key's name.
    pub fn name(&self) -> [u8; NAME_LEN] {
        self.name
    }

    fn seal(&self, aad: &[u8], plain: &[u8]) -> Option<Vec<u8>> {
        let mut body = Vec::with_capacity(plain.len() + TAG_LEN);
        body.extend_from_slice(plain);
        let nonce = self
            .key
            .seal_in_place_append_tag(Aad::from(aad), &mut body)
            .ok()?;
        let mut out = Vec::with_capacity(NAME_LEN + NONCE_LEN + body.len());
        out.extend_from_slice(&self.name);
        out.extend_from_slice(nonce.as_ref());
        out.extend_from_slice(&body);
        Some(out)
    }

    fn open(&self, aad: &[u8], ticket: &[u8]) -> Option<Vec<u8>> {
        let nonce =
            Nonce::try_assume_unique_for_key(&ticket[NAME_LEN..NAME_LEN + NONCE_LEN]).ok()?;
        let mut body = ticket[NAME_LEN + NONCE_LEN..].to_vec();
        let n = self
            .key
            .open_in_place(nonce, Aad::from(aad), &mut body)
            .ok()?
            .len();
        body.truncate(n);
        Some(body)
    }
}

/// The keys of one epoch: `current` seals, all three open.
#[derive(Debug)]
pub struct KeySet {
    /// The epoch (UNIX seconds / rotation) `current` is the current key of.
    pub epoch: u64,
    /// The previous epoch's key (none right after a start or a gap of two epochs or more).
    pub previous: Option<Arc<TicketKey>>,
    /// The key new tickets are sealed with.
    pub current: Arc<TicketKey>,
    /// The next epoch's key.
    pub next: Arc<TicketKey>,
}

impl KeySet {
    /// A fresh local set for `epoch` (no previous key).
    pub fn fresh(epoch: u64) -> Result<KeySet, rustls::Error> {
        Ok(KeySet {
            epoch,
            previous: None,
            current: Arc::new(TicketKey::random()?),
            next: Arc::new(TicketKey::random()?),
        })
    }

    /// The set of `epoch`, shifted from this one with fresh keys (a clock that went back keeps
    /// this set's keys under the new epoch).
    fn advance(&self, epoch: u64) -> Result<KeySet, rustls::Error> {
        let next = || TicketKey::random().map(Arc::new);
        let (previous, current) = match epoch.saturating_sub(self.epoch) {
            0 => (self.previous.clone(), self.current.clone()),
            1 => (Some(self.current.clone()), self.next.clone()),
            2 => (Some(self.next.clone()), next()?),
            _ => (None, next()?),
        };
        Ok(KeySet {
            epoch,
            previous,
            current,
            next: next()?,
        })
    }

    /// Parses the shared form `epoch:previous:current:next` (decimal epoch, each key's material
    /// in hex, `previous` may be empty), as the ticket-key script keeps it in Redis.
    pub fn parse(s: &str) -> Result<KeySet, String> {
        let f: Vec<&str> = s.split(':').collect();
        let [epoch, previous, current, next] = f[..] else {
            return Err("is not epoch:previous:current:next".into());
        };
        let epoch = epoch
            .parse::<u64>()
            .map_err(|_| "has no decimal epoch".to_string())?;
        let key = |h: &str, what: &str| -> Result<Arc<TicketKey>, String> {
            let m =
                unhex(h).ok_or_else(|| format!("{what} key is not {MATERIAL_LEN} bytes of hex"))?;
            TicketKey::new(&m).map(Arc::new)
        };
        Ok(KeySet {
            epoch,
            previous: match previous {
                "" => None,
                h => Some(key(h, "previous")?),
            },
            current: key(current, "current")?,
            next: key(next, "next")?,
        })
    }

    fn keys(&self) -> impl Iterator<Item = &Arc<TicketKey>> {
        std::iter::once(&self.current)
            .chain(self.previous.as_ref())
            .chain(std::iter::once(&self.next))
    }

    /// Seals `plain` under `current` with additional data `aad`.
    pub fn encrypt(&self, aad: &[u8], plain: &[u8]) -> Option<Vec<u8>> {
        self.current.seal(aad, plain)
    }

    /// Opens `ticket` under the key it names, if that key is in the set.
    pub fn decrypt(&self, aad: &[u8], ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() < NAME_LEN + NONCE_LEN + TAG_LEN {
            return None;
        }
        let key = self.keys().find(|k| ticket[..NAME_LEN] == k.name)?;
        key.open(aad, ticket)
    }
}

/// Lower-case hex of `b` ([`crate::tls::ja3::push_hex`]).
fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(2 * b.len());
    crate::tls::ja3::push_hex(&mut s, b);
    s
}

fn unhex(s: &str) -> Option<[u8; MATERIAL_LEN]> {
    if s.len() != 2 * MATERIAL_LEN || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; MATERIAL_LEN];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Hex of key material (96 lower-case hex characters: name then key), the form the ticket-key
/// script stores.
pub fn material_hex(m: &[u8; MATERIAL_LEN]) -> String {
    hex(m)
}

/// The shared key set of one rotation period, written by the cluster tier's ticket-key task and
/// read by every ticketer of that period.
#[derive(Debug)]
pub struct SharedKeys {
    rotation_s: u64,
    set: ArcSwapOption<KeySet>,
}

impl SharedKeys {
    /// The rotation period, s.
    pub fn rotation_s(&self) -> u64 {
        self.rotation_s
    }

    /// The last set received (`None` until one arrives).
    pub fn load(&self) -> Option<Arc<KeySet>> {
        self.set.load_full()
    }

    /// Installs `set`; returns true when it changed the keys (another epoch or other keys).
    pub fn store(&self, set: KeySet) -> bool {
        let same = self.set.load().as_ref().is_some_and(|old| {
            old.epoch == set.epoch
                && old.current.name == set.current.name
                && old.previous.as_ref().map(|k| k.name) == set.previous.as_ref().map(|k| k.name)
                && old.next.name == set.next.name
        });
        if !same {
            self.set.store(Some(Arc::new(set)));
        }
        !same
    }
}

/// Every [`SharedKeys`] in use, by rotation period (one registry per proxy with
/// `cluster.shareTicketKeys`). Held weakly: a period no ticketer uses any more (its routes'
/// `tls` changed) is no longer fetched.
#[derive(Debug, Default)]
pub struct SharedTicketKeys(Mutex<HashMap<u64, Weak<SharedKeys>>>);

impl SharedTicketKeys {
    /// The shared keys of `rotation_s` (made empty on first use; the ticket-key task fetches
    /// them while a ticketer holds them).
    pub fn get(&self, rotation_s: u64) -> Arc<SharedKeys> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = m.get(&rotation_s).and_then(Weak::upgrade) {
            return k;
        }
        let k = Arc::new(SharedKeys {
            rotation_s,
            set: ArcSwapOption::empty(),
        });
        m.insert(rotation_s, Arc::downgrade(&k));
        k
    }

    /// Every period in use, shortest first (the unused ones are forgotten).
    pub fn all(&self) -> Vec<Arc<SharedKeys>> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|_, w| w.strong_count() > 0);
        let mut v: Vec<_> = m.values().filter_map(Weak::upgrade).collect();
        v.sort_by_key(|k| k.rotation_s);
        v
    }
}

/// The ticketer of one resumption state: local keys rotated every `rotation_s`, or the shared
/// ones once they have arrived.
pub struct Ticketer {
    rotation_s: u64,
    aad: [u8; 32],
    local: ArcSwap<KeySet>,
    rotating: Mutex<()>,
    shared: Option<Arc<SharedKeys>>,
}

impl fmt::Debug for Ticketer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticketer")
            .field("rotation_s", &self.rotation_s)
            .field("shared", &self.shared.is_some())
            .finish()
    }
}

impl Ticketer {
    /// A ticketer rotating every `rotation_s` seconds, binding its tickets to `aad`, using
    /// `shared` keys when given and arrived. Errors when the RNG fails.
    pub fn new(
        rotation_s: u64,
        aad: [u8; 32],
        shared: Option<Arc<SharedKeys>>,
    ) -> Result<Ticketer, rustls::Error> {
        Ok(Ticketer {
            rotation_s,
            aad,
            local: ArcSwap::from_pointee(KeySet::fresh(epoch_now(rotation_s))?),
            rotating: Mutex::new(()),
            shared,
        })
    }

    /// The set to use now: the shared one when there is one, else the local one rotated to the
    /// current epoch (by this call when no other is rotating it; if the RNG fails the old set
    /// stays and the failure is logged).
    fn keys(&self) -> Arc<KeySet> {
        if let Some(s) = self.shared.as_ref().and_then(|s| s.load()) {
            return s;
        }
        let set = self.local.load_full();
        let epoch = epoch_now(self.rotation_s);
        if set.epoch == epoch {
            return set;
        }
        let Ok(_g) = self.rotating.try_lock() else {
            return set;
        };
        let set = self.local.load_full();
        if set.epoch == epoch {
            return set;
        }
        match set.advance(epoch) {
            Ok(n) => {
                let n = Arc::new(n);
                self.local.store(n.clone());
                n
            }
            Err(e) => {
                tracing::error!("cannot make a session ticket key, keeping the old ones: {e}");
                set
            }
        }
    }
}

impl ProducesTickets for Ticketer {
    fn enabled(&self) -> bool {
        true
    }

    /// Two rotations: the longest a ticket can still open.
    fn lifetime(&self) -> u32 {
        u32::try_from(self.rotation_s.saturating_mul(2)).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.keys().encrypt(&self.aad, plain)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.keys().decrypt(&self.aad, cipher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_opens_while_its_key_is_in_the_set() {
        let s0 = KeySet::fresh(10).unwrap();
        let t = s0.encrypt(b"aad", b"session").unwrap();
        assert_eq!(&t[..NAME_LEN], &s0.current.name);
        assert_eq!(t.len(), NAME_LEN + NONCE_LEN + 7 + TAG_LEN);
        assert_eq!(s0.decrypt(b"aad", &t).as_deref(), Some(&b"session"[..]));
        assert_eq!(s0.decrypt(b"other", &t), None, "bound to its aad");
        let mut bad = t.clone();
        bad[NAME_LEN + NONCE_LEN] ^= 1;
        assert_eq!(s0.decrypt(b"aad", &bad), None, "tampered");
        // One rotation: k is previous, still opens; two: gone.
        let s1 = s0.advance(11).unwrap();
        assert_eq!(s1.previous.as_ref().unwrap().name, s0.current.name);
        assert_eq!(s1.current.name, s0.next.name);
        assert_eq!(s1.decrypt(b"aad", &t).as_deref(), Some(&b"session"[..]));
        let s2 = s1.advance(12).unwrap();
        assert_eq!(s2.decrypt(b"aad", &t), None);
        // A node still in epoch 10 opens a ticket made under 11's key (its `next`).
        let t1 = s1.encrypt(b"aad", b"x").unwrap();
        assert_eq!(s0.decrypt(b"aad", &t1).as_deref(), Some(&b"x"[..]));
        // A gap of two epochs keeps the old next as previous; of three, nothing.
        assert_eq!(s0.advance(12).unwrap().previous.unwrap().name, s0.next.name);
        assert!(s0.advance(13).unwrap().previous.is_none());
        assert_eq!(s0.decrypt(b"aad", &t[..20]), None, "too short");
    }

    #[test]
    fn the_shared_form_round_trips_and_garbage_is_refused() {
        let m: Vec<_> = (0..3).map(|_| random_material().unwrap()).collect();
        let s = format!("42::{}:{}", material_hex(&m[0]), material_hex(&m[1]));
        let set = KeySet::parse(&s).unwrap();
        assert_eq!(set.epoch, 42);
        assert!(set.previous.is_none());
        assert_eq!(&set.current.name[..], &m[0][..NAME_LEN]);
        assert!(KeySet::parse("42:x:y").is_err());
        assert_eq!(
            KeySet::parse(&format!("42::abcd:{}", material_hex(&m[1]))).unwrap_err(),
            "current key is not 48 bytes of hex"
        );
        let shared = SharedTicketKeys::default();
        let k = shared.get(60);
        assert!(Arc::ptr_eq(&k, &shared.get(60)));
        drop(shared.get(30));
        assert_eq!(shared.all().len(), 1, "a period nobody holds is forgotten");
        assert!(k.load().is_none());
        assert!(k.store(KeySet::parse(&s).unwrap()));
        assert!(!k.store(KeySet::parse(&s).unwrap()), "same keys: no change");
        // Two ticketers on the shared keys open each other's tickets; a local one does not.
        let a = Ticketer::new(60, [1; 32], Some(k.clone())).unwrap();
        let b = Ticketer::new(60, [1; 32], Some(k)).unwrap();
        let local = Ticketer::new(60, [1; 32], None).unwrap();
        let t = a.encrypt(b"state").unwrap();
        assert_eq!(b.decrypt(&t).as_deref(), Some(&b"state"[..]));
        assert_eq!(local.decrypt(&t), None);
        assert_eq!(a.lifetime(), 120);
    }
}
