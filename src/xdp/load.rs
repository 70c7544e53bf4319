//! Loading and attaching: the verifier's verdict, native-then-generic attach, and the error
//! each failure maps to.

use aya::programs::{ProgramError, Xdp};
use aya::Ebpf;

use super::abi;
use super::error::XdpError;
use super::status::XdpMode;
use super::sys;

pub(super) fn classify(context: &str, err: &(dyn std::error::Error + 'static)) -> XdpError {
    XdpError::of_op(context, sys::errno_of(err), sys::chain(err))
}

pub(super) fn interface_exists(name: &str) -> bool {
    let Ok(c) = std::ffi::CString::new(name) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string.
    unsafe { libc::if_nametoindex(c.as_ptr()) != 0 }
}

pub(super) fn load_error(err: &ProgramError) -> XdpError {
    if let ProgramError::LoadError {
        io_error,
        verifier_log,
    } = err
    {
        let log = verifier_log.to_string();
        let tail: String = log
            .lines()
            .rev()
            .take(12)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        return XdpError::of_op(
            "the verifier rejected the XDP program",
            io_error.raw_os_error(),
            format!("{io_error}:\n{tail}"),
        );
    }
    classify("loading the XDP program", err)
}

pub(super) fn attach_program(
    program: &mut Xdp,
    interface: &str,
    mode: XdpMode,
) -> Result<(aya::programs::xdp::XdpLinkId, &'static str), XdpError> {
    use aya::programs::xdp::XdpMode as AyaMode;
    let tries: &[(AyaMode, &'static str)] = match mode {
        XdpMode::Auto => &[(AyaMode::Driver, "native"), (AyaMode::Skb, "generic")],
        XdpMode::Native => &[(AyaMode::Driver, "native")],
        XdpMode::Generic => &[(AyaMode::Skb, "generic")],
    };
    let mut failures = Vec::new();
    for &(aya_mode, label) in tries {
        match program.attach(interface, aya_mode) {
            Ok(link) => {
                tracing::info!(interface, mode = label, "XDP program attached");
                return Ok((link, label));
            }
            Err(ProgramError::UnknownInterface { name }) => {
                return Err(XdpError::InterfaceMissing { interface: name })
            }
            Err(e) => {
                let errno = sys::errno_of(&e);
                let op = format!("{label} attach to {interface}");
                let text = format!("{op}: {}", sys::chain(&e));
                match errno {
                    Some(libc::EPERM) | Some(libc::EACCES) => {
                        return Err(XdpError::PermissionDenied {
                            op,
                            cause: sys::chain(&e),
                        })
                    }
                    Some(libc::EBUSY) | Some(libc::EEXIST) => {
                        return Err(XdpError::Busy {
                            interface: interface.to_string(),
                            cause: text,
                        })
                    }
                    Some(libc::ENODEV) => {
                        return Err(XdpError::InterfaceMissing {
                            interface: interface.to_string(),
                        })
                    }
                    _ => {
                        tracing::warn!(interface, mode = label, error = %text, "XDP attach failed");
                        failures.push(text)
                    }
                }
            }
        }
    }
    Err(XdpError::Load {
        op: "could not attach XDP".to_string(),
        cause: failures.join("; "),
    })
}

/// The loaded XDP program of the object (`abi::PROGRAM_NAME`).
pub(super) fn xdp_program(ebpf: &mut Ebpf) -> Result<&mut Xdp, XdpError> {
    ebpf.program_mut(abi::PROGRAM_NAME)
        .ok_or_else(|| XdpError::Load {
            op: format!("finding program {}", abi::PROGRAM_NAME),
            cause: "missing from the object".to_string(),
        })?
        .try_into()
        .map_err(|e: ProgramError| classify("program type", &e))
}
