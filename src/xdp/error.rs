//! The XDP layer's error type.

use std::fmt;

/// XDP errors; each message says what failed and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XdpError {
    /// The object was not built (`RAMPART_XDP_MISSING`, e.g. clang not found).
    ObjectMissing(String),
    /// The kernel refused for lack of privilege (EPERM/EACCES).
    PermissionDenied(String),
    /// No such network interface.
    InterfaceMissing(String),
    /// bpffs is not mounted and could not be mounted.
    BpfFs(String),
    /// Pinned maps from another build (ABI or layout differ) are in the way.
    StalePins(String),
    /// The interface already has an XDP program.
    Busy(String),
    /// Loading (verifier) or attaching failed for another reason.
    Load(String),
    /// A policy that cannot be applied (names the port and field).
    InvalidPolicy(String),
    /// A map operation failed (names the map).
    Map(String),
}

impl fmt::Display for XdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ObjectMissing(m) => write!(f, "{m}"),
            Self::PermissionDenied(m) => write!(
                f,
                "permission denied: {m}; XDP needs CAP_BPF and CAP_NET_ADMIN (or root)"
            ),
            Self::InterfaceMissing(i) => write!(f, "interface {i:?} does not exist"),
            Self::BpfFs(m) => write!(f, "{m}"),
            Self::StalePins(m) => write!(f, "stale pinned maps: {m}"),
            Self::Busy(m) => write!(f, "{m}"),
            Self::Load(m) => write!(f, "{m}"),
            Self::InvalidPolicy(m) => write!(f, "invalid XDP policy: {m}"),
            Self::Map(m) => write!(f, "XDP map operation failed: {m}"),
        }
    }
}

impl std::error::Error for XdpError {}
