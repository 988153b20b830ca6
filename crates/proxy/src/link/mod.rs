//! The proxy pair's link: one HTTP/2 connection over TLS between a client proxy near
//! the users and a server proxy near the origins, carrying many requests at once.
//! Responses are frame sequences ([`frame`]) so a stale instance can flow while the
//! origin is consulted. `docs/link-protocol.md` is the specification.

pub mod client;
pub mod frame;
pub mod levels;
pub mod serve;
pub mod stale;
pub mod waits;

/// Where a link response's frames go: the response body's channel.
pub type FrameSender = tokio::sync::mpsc::Sender<Result<bytes::Bytes, crate::body::BoxError>>;

/// Unsent bytes the kernel may queue on a link socket. Frames handed to it are
/// committed (a stale stream cannot take them back), so the queue is kept short and
/// decisions stay close to what is on the wire.
const UNSENT_LIMIT: libc::c_int = 16 * 1024;

/// Applies [`UNSENT_LIMIT`] (`TCP_NOTSENT_LOWAT`) to an accepted socket.
pub fn limit_unsent(fd: std::os::fd::RawFd) {
    // SAFETY: a plain integer option on a descriptor the caller owns.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&UNSENT_LIMIT as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "TCP_NOTSENT_LOWAT not applied");
    }
}
