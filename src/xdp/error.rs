//! The XDP layer's error type: each variant holds what a caller needs to decide (the map, the
//! operation, the errno, the interface, the pin directory); `Display` is for people and says what
//! to do.

use std::fmt;
use std::path::PathBuf;

/// Why an XDP operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XdpError {
    /// build.rs could not compile the object; `why` names what was missing (e.g. "clang not
    /// found (install clang)").
    ObjectMissing {
        /// The build-time cause, as `RAMPART_XDP_MISSING` recorded it.
        why: String,
    },
    /// The kernel refused for lack of privilege (EPERM/EACCES) while doing `op`.
    PermissionDenied {
        /// What was being done (`loading the XDP object`, `rampart_bans: insert`, ...).
        op: String,
        /// The error chain.
        cause: String,
    },
    /// No such network interface.
    InterfaceMissing {
        /// The name asked for.
        interface: String,
    },
    /// bpffs is not mounted at `path` (and could not be mounted), or a pin there could not be
    /// created or removed.
    BpfFs {
        /// The mount point or pin path.
        path: PathBuf,
        /// What failed.
        cause: String,
    },
    /// Pinned maps in `dir` come from another build (ABI, layout or map definition differ).
    StalePins {
        /// The pin directory (or pin) in the way.
        dir: PathBuf,
        /// What differs, and what to remove.
        cause: String,
    },
    /// `interface` already has an XDP program.
    Busy {
        /// The interface.
        interface: String,
        /// The attach error.
        cause: String,
    },
    /// Loading (the verifier) or attaching failed for another reason.
    Load {
        /// What was being done.
        op: String,
        /// The error chain (with the verifier log's tail when it rejected the program).
        cause: String,
    },
    /// A policy the kernel maps cannot hold.
    InvalidPolicy {
        /// The port at fault, when one is.
        port: Option<u16>,
        /// What is wrong (names the field).
        problem: String,
    },
    /// A map operation failed.
    Map {
        /// The map (`rampart_bans`, ...).
        map: String,
        /// The operation (`insert`, `remove`, `read`, ...).
        op: &'static str,
        /// The OS error number, when there is one.
        errno: Option<i32>,
        /// The error chain.
        cause: String,
    },
}

impl fmt::Display for XdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ObjectMissing { why } => write!(f, "XDP object not built: {why}"),
            Self::PermissionDenied { op, cause } => write!(
                f,
                "permission denied: {op}: {cause}; XDP needs CAP_BPF and CAP_NET_ADMIN (or root)"
            ),
            Self::InterfaceMissing { interface } => {
                write!(f, "interface {interface:?} does not exist")
            }
            Self::BpfFs { path, cause } => write!(f, "{}: {cause}", path.display()),
            Self::StalePins { dir, cause } => {
                write!(f, "stale pinned maps in {}: {cause}", dir.display())
            }
            Self::Busy { interface, cause } => write!(
                f,
                "{cause}: {interface} already has an XDP program (see `ip link show {interface}`, \
                 `bpftool net`)"
            ),
            Self::Load { op, cause } => write!(f, "{op}: {cause}"),
            Self::InvalidPolicy {
                port: Some(p),
                problem,
            } => write!(f, "invalid XDP policy: port {p}: {problem}"),
            Self::InvalidPolicy {
                port: None,
                problem,
            } => write!(f, "invalid XDP policy: {problem}"),
            Self::Map { map, op, cause, .. } => {
                write!(f, "XDP map operation failed: {map}: {op}: {cause}")
            }
        }
    }
}

impl std::error::Error for XdpError {}

impl XdpError {
    /// A failure while doing `op`: `PermissionDenied` for EPERM/EACCES, else `Load`.
    pub fn of_op(op: impl Into<String>, errno: Option<i32>, cause: impl Into<String>) -> XdpError {
        let (op, cause) = (op.into(), cause.into());
        match errno {
            Some(libc::EPERM) | Some(libc::EACCES) => XdpError::PermissionDenied { op, cause },
            _ => XdpError::Load { op, cause },
        }
    }

    /// A failed map operation: `PermissionDenied` for EPERM/EACCES, else `Map`.
    pub fn of_map(
        map: &str,
        op: &'static str,
        errno: Option<i32>,
        cause: impl Into<String>,
    ) -> XdpError {
        match errno {
            Some(libc::EPERM) | Some(libc::EACCES) => XdpError::PermissionDenied {
                op: format!("{map}: {op}"),
                cause: cause.into(),
            },
            _ => XdpError::Map {
                map: map.to_string(),
                op,
                errno,
                cause: cause.into(),
            },
        }
    }
}
