//! Session resumption state that outlives the route table (docs/proxy.md: TLS versions, suites,
//! groups and resumption).
//!
//! A [`Sessions`] is a session cache (TLS 1.2 session ids, RFC 5246 §7.4.1.2; TLS 1.3 stateful
//! tickets when tickets are off) plus a ticketer (TLS 1.2 tickets, RFC 5077; TLS 1.3 tickets,
//! RFC 8446 §4.6.1): [`crate::tls::tickets::Ticketer`], AES-256-GCM keys rotated every
//! `ticketKeyRotationS` (6 h by default; a ticket resumes for one to two rotations), local to
//! this node or shared through Redis (`cluster.shareTicketKeys`). [`TlsCache`] keeps one per
//! (certificate chain digest, client-certificate policy, `tls` options) across `updateConfig`, so
//! a route change that keeps the certificate keeps every session; a new certificate (or new
//! options) starts from none. rustls resumes a session only for the server name it was made for
//! (RFC 6066 §3) and with its cipher suite, so routes sharing a certificate cannot resume each
//! other's sessions.

use crate::tls::options::TlsOptions;
use crate::tls::tickets::{SharedTicketKeys, Ticketer};
use rustls::server::{
    NoServerSessionStorage, ProducesTickets, ServerSessionMemoryCache, StoresServerSessions,
};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The resumption state one rustls server config uses.
#[derive(Debug, Clone)]
pub struct Sessions {
    /// Session-id / stateful-ticket storage (`sessionCacheSize` entries, least recently used
    /// evicted first).
    pub storage: Arc<dyn StoresServerSessions>,
    /// Ticket encryption (`sessionTickets`), or one that issues none.
    pub ticketer: Arc<dyn ProducesTickets>,
}

/// A ticketer that issues no tickets (`sessionTickets: false`).
#[derive(Debug)]
struct NoTickets;

impl ProducesTickets for NoTickets {
    fn enabled(&self) -> bool {
        false
    }
    fn lifetime(&self) -> u32 {
        0
    }
    fn encrypt(&self, _plain: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn decrypt(&self, _cipher: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

impl Sessions {
    /// Fresh, empty state for `opts`, its tickets bound to `aad` ([`SessionKey::digest`]) and
    /// sealed with the `shared` keys of its rotation period when given (else local keys). When
    /// ticket keys cannot be made (the system RNG failed, which also fails every handshake) the
    /// state issues no tickets and the failure is logged.
    pub fn new(opts: &TlsOptions, aad: [u8; 32], shared: Option<&SharedTicketKeys>) -> Sessions {
        let storage: Arc<dyn StoresServerSessions> = if opts.session_cache_size > 0 {
            ServerSessionMemoryCache::new(opts.session_cache_size)
        } else {
            Arc::new(NoServerSessionStorage {})
        };
        let new_ticketer = || {
            let shared = shared.map(|s| s.get(opts.ticket_key_rotation_s));
            Ticketer::new(opts.ticket_key_rotation_s, aad, shared)
        };
        let ticketer: Arc<dyn ProducesTickets> = match opts.session_tickets.then(new_ticketer) {
            Some(Ok(t)) => Arc::new(t),
            Some(Err(e)) => {
                tracing::error!("cannot make session ticket keys, issuing no tickets: {e}");
                Arc::new(NoTickets)
            }
            None => Arc::new(NoTickets),
        };
        Sessions { storage, ticketer }
    }
}

/// What one [`Sessions`] is shared by: the certificate (SHA-256 of its DER chain), the client
/// certificate policy (`mtls` CA digest and whether required: a session made without a client
/// certificate must not resume where one is required) and the `tls` options.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    cert: [u8; 32],
    client_auth: Option<[u8; 32]>,
    options: TlsOptions,
}

impl SessionKey {
    /// The key of `cert` served with `options`, asking client certificates per `client_auth`
    /// (an `mtls` digest, see [`crate::config::mtls::Mtls::digest`]).
    pub fn new(cert: &CertifiedKey, client_auth: Option<[u8; 32]>, options: &TlsOptions) -> Self {
        let mut h = Sha256::new();
        for c in &cert.cert {
            h.update((c.len() as u64).to_be_bytes());
            h.update(c.as_ref());
        }
        SessionKey {
            cert: h.finalize().into(),
            client_auth,
            options: options.clone(),
        }
    }

    /// SHA-256 of the whole key: the additional data every ticket of this state is sealed
    /// with, so a ticket resumes only where the same certificate is served the same way. It
    /// hashes a fixed encoding (below), never a Rust formatting of the fields, so it is equal on
    /// every node with the same certificate, client-certificate policy and `tls` options,
    /// whatever Rampart version each runs (`cluster.shareTicketKeys` across a rolling upgrade).
    ///
    /// The encoding, integers big-endian, in this order:
    /// 1. the label `rampart session key v1`, prefixed with its length (u8);
    /// 2. the certificate digest (32 bytes: SHA-256 of each DER certificate, each prefixed with
    ///    its length as u64);
    /// 3. the client-certificate policy: `0`, or `1` and the `mtls` digest (32 bytes);
    /// 4. `minVersion` and `maxVersion`: their protocol version codes (u16 each, `0x0303` for
    ///    TLS 1.2, `0x0304` for TLS 1.3, RFC 8446 §4.2.1);
    /// 5. `cipherSuites` then `groups`: each `0` (the defaults), or `1`, the number of entries
    ///    (u32) and each entry's code point (u16), in the configured order;
    /// 6. `preferServerCipherOrder` and `sessionTickets`: `0` or `1` each (u8);
    /// 7. `ticketKeyRotationS` and `sessionCacheSize` (u64 each).
    pub fn digest(&self) -> [u8; 32] {
        let TlsOptions {
            min_version,
            max_version,
            cipher_suites,
            groups,
            prefer_server_cipher_order,
            session_tickets,
            ticket_key_rotation_s,
            session_cache_size,
        } = &self.options;
        let mut h = Sha256::new();
        h.update([DIGEST_LABEL.len() as u8]);
        h.update(DIGEST_LABEL);
        h.update(self.cert);
        match &self.client_auth {
            Some(d) => {
                h.update([1]);
                h.update(d);
            }
            None => h.update([0]),
        }
        h.update(min_version.code().to_be_bytes());
        h.update(max_version.code().to_be_bytes());
        for list in [cipher_suites, groups] {
            match list {
                Some(l) => {
                    h.update([1]);
                    h.update((l.len() as u32).to_be_bytes());
                    l.iter().for_each(|c| h.update(c.to_be_bytes()));
                }
                None => h.update([0]),
            }
        }
        h.update([
            u8::from(*prefer_server_cipher_order),
            u8::from(*session_tickets),
        ]);
        h.update(ticket_key_rotation_s.to_be_bytes());
        h.update((*session_cache_size as u64).to_be_bytes());
        h.finalize().into()
    }
}

/// The label that starts the [`SessionKey::digest`] encoding (its version: a new encoding takes
/// a new label).
const DIGEST_LABEL: &[u8] = b"rampart session key v1";

/// [`Sessions`] by [`SessionKey`], kept across route-table rebuilds (one per proxy), and the
/// shared ticket keys its new states use (`cluster.shareTicketKeys`).
#[derive(Debug, Default)]
pub struct TlsCache {
    entries: Mutex<HashMap<SessionKey, Sessions>>,
    shared: Option<Arc<SharedTicketKeys>>,
}

impl TlsCache {
    /// An empty cache whose states seal tickets with `shared` keys when given.
    pub fn new(shared: Option<Arc<SharedTicketKeys>>) -> TlsCache {
        TlsCache {
            entries: Mutex::default(),
            shared,
        }
    }

    /// Starts a route-table build: the entries it asks for are kept, the others are dropped when
    /// the returned generation is finished.
    pub fn generation(&self) -> Generation<'_> {
        Generation {
            cache: self,
            used: HashMap::new(),
        }
    }

    /// Number of live entries (tests, metrics).
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True when no entry is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The entries one route-table build uses (see [`TlsCache::generation`]).
#[derive(Debug)]
pub struct Generation<'a> {
    cache: &'a TlsCache,
    used: HashMap<SessionKey, Sessions>,
}

impl Generation<'_> {
    /// The sessions for `key`: the cached ones when the previous table (or this build) had
    /// them, else fresh ones.
    pub fn sessions(&mut self, key: SessionKey) -> Sessions {
        if let Some(s) = self.used.get(&key) {
            return s.clone();
        }
        let old = (self.cache.entries.lock().unwrap_or_else(|e| e.into_inner()))
            .get(&key)
            .cloned();
        let s = match old {
            Some(s) => s,
            None => Sessions::new(&key.options, key.digest(), self.cache.shared.as_deref()),
        };
        self.used.insert(key, s.clone());
        s
    }

    /// Makes this build's entries the cache's (the entries it did not ask for are dropped).
    pub fn finish(self) {
        *self.cache.entries.lock().unwrap_or_else(|e| e.into_inner()) = self.used;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::certs::{load_certified_key, self_signed};
    use crate::tls::options::TlsVersion;

    fn cert(host: &str) -> Arc<CertifiedKey> {
        let (c, k) = self_signed(&[host.to_string()]).unwrap();
        load_certified_key(c.as_bytes(), k.as_bytes()).unwrap()
    }

    /// One field of a key changed, in place.
    type Change = fn(&mut SessionKey);

    /// A key with every field set away from its default.
    fn fixed_key() -> SessionKey {
        SessionKey {
            cert: [1; 32],
            client_auth: Some([2; 32]),
            options: TlsOptions {
                min_version: TlsVersion::Tls12,
                max_version: TlsVersion::Tls13,
                cipher_suites: Some(vec![0x1302, 0xc02f]),
                groups: Some(vec![0x001d]),
                prefer_server_cipher_order: true,
                session_tickets: true,
                ticket_key_rotation_s: 3600,
                session_cache_size: 256,
            },
        }
    }

    #[test]
    fn the_digest_is_the_documented_encoding_and_covers_every_field() {
        let base = fixed_key();
        let mut hex = String::new();
        crate::tls::ja3::push_hex(&mut hex, &base.digest());
        // SHA-256 of the encoding the doc of `digest` gives, for `fixed_key`: a different
        // value means nodes of two versions no longer resume each other's tickets.
        assert_eq!(
            hex,
            "bd8688ba30675586b3438b2b7e8694c0a9d18e28cd55284a5dc9ca407e43ae57"
        );
        let changes: [(&str, Change); 15] = [
            ("cert", |k| k.cert = [3; 32]),
            ("client_auth none", |k| k.client_auth = None),
            ("client_auth", |k| k.client_auth = Some([4; 32])),
            ("min_version", |k| k.options.min_version = TlsVersion::Tls13),
            ("max_version", |k| k.options.max_version = TlsVersion::Tls12),
            ("cipher_suites none", |k| k.options.cipher_suites = None),
            ("cipher_suites empty", |k| {
                k.options.cipher_suites = Some(vec![])
            }),
            ("cipher_suites order", |k| {
                k.options.cipher_suites = Some(vec![0xc02f, 0x1302])
            }),
            ("groups none", |k| k.options.groups = None),
            ("groups", |k| k.options.groups = Some(vec![0x0017])),
            ("suites moved to groups", |k| {
                k.options.cipher_suites = Some(vec![0x1302]);
                k.options.groups = Some(vec![0xc02f, 0x001d]);
            }),
            ("prefer_server_cipher_order", |k| {
                k.options.prefer_server_cipher_order = false
            }),
            ("session_tickets", |k| k.options.session_tickets = false),
            ("ticket_key_rotation_s", |k| {
                k.options.ticket_key_rotation_s = 3601
            }),
            ("session_cache_size", |k| k.options.session_cache_size = 0),
        ];
        let mut seen = vec![base.digest()];
        for (field, change) in changes {
            let mut key = fixed_key();
            change(&mut key);
            let d = key.digest();
            assert!(!seen.contains(&d), "{field}: a digest seen before");
            seen.push(d);
        }
        assert_eq!(fixed_key().digest(), base.digest());
    }

    #[test]
    fn a_rebuild_keeps_the_sessions_of_an_unchanged_cert_only() {
        let (a, b) = (cert("a.test"), cert("b.test"));
        let opts = TlsOptions::default();
        let cache = TlsCache::default();
        let mut g = cache.generation();
        let a1 = g.sessions(SessionKey::new(&a, None, &opts));
        let b1 = g.sessions(SessionKey::new(&b, None, &opts));
        // Two routes with one certificate share one state within a build.
        assert!(Arc::ptr_eq(
            &a1.ticketer,
            &g.sessions(SessionKey::new(&a, None, &opts)).ticketer
        ));
        g.finish();
        assert_eq!(cache.len(), 2);
        // The next build keeps `a`'s (same cert, options, client auth) and drops `b`'s.
        let mut g = cache.generation();
        let a2 = g.sessions(SessionKey::new(&a, None, &opts));
        assert!(Arc::ptr_eq(&a1.ticketer, &a2.ticketer));
        assert!(Arc::ptr_eq(&a1.storage, &a2.storage));
        let mtls = g.sessions(SessionKey::new(&a, Some([7; 32]), &opts));
        assert!(!Arc::ptr_eq(&a1.ticketer, &mtls.ticketer));
        let other = TlsOptions {
            prefer_server_cipher_order: true,
            ..TlsOptions::default()
        };
        let a3 = g.sessions(SessionKey::new(&a, None, &other));
        assert!(!Arc::ptr_eq(&a1.ticketer, &a3.ticketer));
        g.finish();
        assert_eq!(cache.len(), 3);
        let mut g = cache.generation();
        let b2 = g.sessions(SessionKey::new(&b, None, &opts));
        assert!(!Arc::ptr_eq(&b1.ticketer, &b2.ticketer), "b was dropped");
        g.finish();
        assert_eq!(cache.len(), 1);
        // Tickets on by default; off gives a ticketer that issues none.
        assert!(a1.ticketer.enabled());
        let off = Sessions::new(
            &TlsOptions {
                session_tickets: false,
                ..TlsOptions::default()
            },
            [0; 32],
            None,
        );
        assert!(!off.ticketer.enabled());
    }
}
