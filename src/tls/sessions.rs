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

    /// SHA-256 of the whole key (certificate digest, client-certificate policy, the options'
    /// `Debug` form): the additional data every ticket of this state is sealed with, so a
    /// ticket resumes only where the same certificate is served the same way. Equal on every
    /// node running the same build with the same certificate and options.
    pub fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.cert);
        match &self.client_auth {
            Some(d) => {
                h.update([1]);
                h.update(d);
            }
            None => h.update([0]),
        }
        h.update(format!("{:?}", self.options).as_bytes());
        h.finalize().into()
    }
}

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

    fn cert(host: &str) -> Arc<CertifiedKey> {
        let (c, k) = self_signed(&[host.to_string()]).unwrap();
        load_certified_key(c.as_bytes(), k.as_bytes()).unwrap()
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
