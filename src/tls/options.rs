//! TLS knobs of a listener or route (`tls: { minVersion, maxVersion, cipherSuites, groups,
//! preferServerCipherOrder, sessionTickets, sessionCacheSize }`, docs/proxy.md: TLS versions,
//! suites, groups and resumption) and the rustls crypto provider they select from.
//!
//! Names are the ones operators know from nginx and HAProxy: versions `TLSv1.2` / `TLSv1.3`
//! (`ssl_protocols`, `ssl-min-ver`), cipher suites by their IANA name (RFC 8446 §B.4, RFC 5289,
//! RFC 7905) or their OpenSSL name (`ECDHE-RSA-AES128-GCM-SHA256`), groups by their IANA name
//! (`X25519`, `secp256r1`) or OpenSSL alias (`P-256`, `prime256v1`).

use rustls::crypto::CryptoProvider;
use rustls::{CipherSuite, NamedGroup, ProtocolVersion, SupportedProtocolVersion};
use std::sync::Arc;

/// A TLS protocol version Rampart can offer (rustls implements TLS 1.2 and 1.3 only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TlsVersion {
    /// TLS 1.2 (RFC 5246), `'TLSv1.2'`.
    Tls12,
    /// TLS 1.3 (RFC 8446), `'TLSv1.3'`.
    Tls13,
}

impl TlsVersion {
    /// Every version, oldest first.
    pub const ALL: [TlsVersion; 2] = [TlsVersion::Tls12, TlsVersion::Tls13];

    /// The config spelling (`'TLSv1.2'`, as nginx `ssl_protocols` and HAProxy `ssl-min-ver`).
    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "TLSv1.2",
            TlsVersion::Tls13 => "TLSv1.3",
        }
    }

    /// The version parsed from its config spelling.
    pub fn parse(s: &str) -> Option<TlsVersion> {
        TlsVersion::ALL.into_iter().find(|v| v.name() == s)
    }

    /// The protocol version code (`0x0303`, `0x0304`; RFC 8446 §4.2.1).
    pub fn code(self) -> u16 {
        u16::from(self.wire())
    }

    fn rustls(self) -> &'static SupportedProtocolVersion {
        match self {
            TlsVersion::Tls12 => &rustls::version::TLS12,
            TlsVersion::Tls13 => &rustls::version::TLS13,
        }
    }

    fn wire(self) -> ProtocolVersion {
        match self {
            TlsVersion::Tls12 => ProtocolVersion::TLSv1_2,
            TlsVersion::Tls13 => ProtocolVersion::TLSv1_3,
        }
    }
}

/// A cipher suite Rampart may offer: its IANA name, its OpenSSL name, the version it belongs to.
#[derive(Debug, Clone, Copy)]
pub struct SuiteName {
    /// The rustls / IANA code point.
    pub suite: CipherSuite,
    /// IANA name (`TLS_AES_128_GCM_SHA256`, `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`).
    pub iana: &'static str,
    /// OpenSSL name (`ECDHE-RSA-AES128-GCM-SHA256`; the TLS 1.3 suites keep their IANA name).
    pub openssl: &'static str,
    /// The protocol version the suite is defined for.
    pub version: TlsVersion,
}

const fn suite(
    suite: CipherSuite,
    iana: &'static str,
    openssl: &'static str,
    version: TlsVersion,
) -> SuiteName {
    SuiteName {
        suite,
        iana,
        openssl,
        version,
    }
}

/// Every cipher suite the crypto provider implements, in its default preference order (AEAD with
/// ECDHE only: rustls implements no CBC, RSA key exchange or DHE suite).
pub const SUITES: &[SuiteName] = &[
    suite(
        CipherSuite::TLS13_AES_256_GCM_SHA384,
        "TLS_AES_256_GCM_SHA384",
        "TLS_AES_256_GCM_SHA384",
        TlsVersion::Tls13,
    ),
    suite(
        CipherSuite::TLS13_AES_128_GCM_SHA256,
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_128_GCM_SHA256",
        TlsVersion::Tls13,
    ),
    suite(
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_CHACHA20_POLY1305_SHA256",
        TlsVersion::Tls13,
    ),
    suite(
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        TlsVersion::Tls12,
    ),
    suite(
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        TlsVersion::Tls12,
    ),
    suite(
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        TlsVersion::Tls12,
    ),
    suite(
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
        TlsVersion::Tls12,
    ),
    suite(
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
        TlsVersion::Tls12,
    ),
    suite(
        CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        "ECDHE-RSA-CHACHA20-POLY1305",
        TlsVersion::Tls12,
    ),
];

/// The suite named `s` (IANA or OpenSSL name, exact case).
pub fn suite_by_name(s: &str) -> Option<&'static SuiteName> {
    SUITES.iter().find(|n| n.iana == s || n.openssl == s)
}

/// A key-exchange group Rampart may offer: the config names that select it and whether it is
/// usable with TLS 1.2 (the post-quantum hybrids are TLS 1.3 only).
#[derive(Debug, Clone, Copy)]
pub struct GroupName {
    /// The IANA code point (RFC 8446 §4.2.7, draft-ietf-tls-ecdhe-mlkem).
    pub group: NamedGroup,
    /// Accepted spellings; the first is the IANA name.
    pub names: &'static [&'static str],
    /// Usable in TLS 1.2 (ECDHE, RFC 8422).
    pub tls12: bool,
}

/// Every group a config may name (whether this build's provider has it: [`provider_has_group`]).
pub const GROUPS: &[GroupName] = &[
    GroupName {
        group: NamedGroup::X25519MLKEM768,
        names: &["X25519MLKEM768"],
        tls12: false,
    },
    GroupName {
        group: NamedGroup::X25519,
        names: &["X25519", "x25519"],
        tls12: true,
    },
    GroupName {
        group: NamedGroup::secp256r1,
        names: &["secp256r1", "P-256", "prime256v1"],
        tls12: true,
    },
    GroupName {
        group: NamedGroup::secp384r1,
        names: &["secp384r1", "P-384"],
        tls12: true,
    },
];

/// The group named `s` (any accepted spelling, exact case).
pub fn group_by_name(s: &str) -> Option<&'static GroupName> {
    GROUPS.iter().find(|g| g.names.contains(&s))
}

/// Default `sessionCacheSize`: TLS 1.2 session-id entries kept per certificate (HAProxy's
/// `tune.ssl.cachesize` default); tickets carry their own state and need none.
pub const DEFAULT_SESSION_CACHE_SIZE: usize = 20_000;

/// Default `ticketKeyRotationS`: 6 h (a ticket resumes for 6 to 12 h; [`crate::tls::tickets`]).
pub const DEFAULT_ROTATION_S: u64 = 21_600;
/// Largest `ticketKeyRotationS`: 3.5 days, so that the lifetime hint (two rotations) stays within
/// TLS 1.3's 7 days (RFC 8446 §4.6.1).
pub const MAX_ROTATION_S: u64 = 302_400;

/// The validated `tls` object of a listener or route (every field resolved to its value).
///
/// Cipher suites and groups are kept as their 16-bit code points so the options can key the
/// session cache (`Hash`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TlsOptions {
    /// `minVersion` (default TLSv1.2).
    pub min_version: TlsVersion,
    /// `maxVersion` (default TLSv1.3).
    pub max_version: TlsVersion,
    /// `cipherSuites` in preference order (code points); `None` = every suite of [`SUITES`].
    pub cipher_suites: Option<Vec<u16>>,
    /// `groups` (code points); `None` = the provider's default groups.
    pub groups: Option<Vec<u16>>,
    /// `preferServerCipherOrder`: pick the first suite of ours the client offers (rustls
    /// `ignore_client_order`); default false (the client's order, as rustls and nginx).
    pub prefer_server_cipher_order: bool,
    /// `sessionTickets`: stateless resumption tickets (TLS 1.2 RFC 5077, TLS 1.3 RFC 8446 §4.6.1)
    /// with keys rotated every `ticket_key_rotation_s`; default true.
    pub session_tickets: bool,
    /// `ticketKeyRotationS`: seconds between two ticket-key rotations (a ticket resumes for one
    /// to two of them; [`crate::tls::tickets`]); default 21600 (6 h).
    pub ticket_key_rotation_s: u64,
    /// `sessionCacheSize`: server-side session entries (TLS 1.2 session ids, and TLS 1.3
    /// resumption without tickets); 0 = none.
    pub session_cache_size: usize,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            min_version: TlsVersion::Tls12,
            max_version: TlsVersion::Tls13,
            cipher_suites: None,
            groups: None,
            prefer_server_cipher_order: false,
            session_tickets: true,
            ticket_key_rotation_s: DEFAULT_ROTATION_S,
            session_cache_size: DEFAULT_SESSION_CACHE_SIZE,
        }
    }
}

impl TlsOptions {
    /// The versions from `min_version` to `max_version`.
    pub fn versions(&self) -> impl Iterator<Item = TlsVersion> + '_ {
        TlsVersion::ALL
            .into_iter()
            .filter(|v| (self.min_version..=self.max_version).contains(v))
    }

    /// The rustls crypto provider these options select: this build's provider with its suites
    /// reduced to (and ordered as) `cipher_suites` within the version range, and its groups to
    /// `groups`. Errors name what leaves no handshake possible (the config layer refuses those
    /// combinations first, with paths).
    pub fn provider(&self) -> Result<Arc<CryptoProvider>, String> {
        let mut p = base_provider();
        let wire: Vec<_> = self.versions().map(TlsVersion::wire).collect();
        if let Some(order) = &self.cipher_suites {
            let all = std::mem::take(&mut p.cipher_suites);
            p.cipher_suites = order
                .iter()
                .filter_map(|&c| all.iter().find(|s| u16::from(s.suite()) == c).copied())
                .collect();
        }
        p.cipher_suites
            .retain(|s| wire.contains(&s.version().version));
        if let Some(groups) = &self.groups {
            let all = std::mem::take(&mut p.kx_groups);
            p.kx_groups = groups
                .iter()
                .filter_map(|&g| all.iter().find(|k| u16::from(k.name()) == g).copied())
                .collect();
        }
        if p.cipher_suites.is_empty() {
            return Err("no cipher suite left for the allowed versions".into());
        }
        if p.kx_groups.is_empty() {
            return Err("no key-exchange group left".into());
        }
        Ok(Arc::new(p))
    }

    /// The rustls protocol versions of the range.
    pub fn rustls_versions(&self) -> Vec<&'static SupportedProtocolVersion> {
        self.versions().map(TlsVersion::rustls).collect()
    }
}

/// This build's crypto provider with its default suites and groups (the one place the provider
/// is chosen; docs/proxy.md: TLS versions, suites, groups and resumption).
pub fn base_provider() -> CryptoProvider {
    #[cfg(feature = "ring")]
    return rustls::crypto::ring::default_provider();
    #[cfg(not(feature = "ring"))]
    rustls::crypto::aws_lc_rs::default_provider()
}

/// Whether this build's provider implements `g`.
pub fn provider_has_group(g: NamedGroup) -> bool {
    base_provider().kx_groups.iter().any(|k| k.name() == g)
}

/// The IANA names of the groups offered when `groups` is not set, in order.
pub fn default_group_names() -> Vec<&'static str> {
    base_provider()
        .kx_groups
        .iter()
        .filter_map(|k| GROUPS.iter().find(|g| g.group == k.name()))
        .map(|g| g.names[0])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suite_table_is_the_providers() {
        let p = base_provider();
        let ours: Vec<_> = SUITES.iter().map(|s| s.suite).collect();
        let theirs: Vec<_> = p.cipher_suites.iter().map(|s| s.suite()).collect();
        assert_eq!(ours, theirs);
        for s in SUITES {
            assert_eq!(suite_by_name(s.iana).map(|n| n.suite), Some(s.suite));
            assert_eq!(suite_by_name(s.openssl).map(|n| n.suite), Some(s.suite));
        }
        for k in &p.kx_groups {
            assert!(GROUPS.iter().any(|g| g.group == k.name()), "{:?}", k.name());
        }
    }

    #[test]
    fn the_provider_follows_the_options() {
        let o = TlsOptions {
            min_version: TlsVersion::Tls13,
            cipher_suites: Some(vec![
                u16::from(CipherSuite::TLS13_CHACHA20_POLY1305_SHA256),
                u16::from(CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
                u16::from(CipherSuite::TLS13_AES_128_GCM_SHA256),
            ]),
            groups: Some(vec![u16::from(NamedGroup::secp384r1)]),
            ..TlsOptions::default()
        };
        let p = o.provider().unwrap();
        let suites: Vec<_> = p.cipher_suites.iter().map(|s| s.suite()).collect();
        assert_eq!(
            suites,
            [
                CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
                CipherSuite::TLS13_AES_128_GCM_SHA256
            ]
        );
        let groups: Vec<_> = p.kx_groups.iter().map(|k| k.name()).collect();
        assert_eq!(groups, [NamedGroup::secp384r1]);
        let only12 = TlsOptions {
            max_version: TlsVersion::Tls12,
            cipher_suites: Some(vec![u16::from(CipherSuite::TLS13_AES_128_GCM_SHA256)]),
            ..TlsOptions::default()
        };
        assert_eq!(
            only12.provider().unwrap_err(),
            "no cipher suite left for the allowed versions"
        );
    }
}
