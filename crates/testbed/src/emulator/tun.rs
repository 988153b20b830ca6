//! Linux TUN devices through `/dev/net/tun`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `_IOW('T', 202, int)` from `<linux/if_tun.h>`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags in the union.
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Creates (or attaches to) the TUN device `name`: IP packets without the packet-info
/// header, non-blocking. The device is not persistent: it disappears when the returned
/// descriptor is closed, in whichever network namespace it sits by then.
pub fn open(name: &str) -> io::Result<OwnedFd> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {name:?}"),
        ));
    }
    // SAFETY: a NUL-terminated path and plain flags.
    let raw = unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor we just opened and own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    for (dst, src) in req.name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which `IfReq` lays out.
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReq) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}
