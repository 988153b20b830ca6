//! The server proxy's end of the proxy pair's link: one HTTP/2 connection over TLS
//! from a client proxy near the users, carrying many requests at once. Each link
//! request is answered with a frame sequence (`link_protocol::frame`) so a stale
//! instance can flow while the origin is consulted. `docs/link-protocol.md` is the
//! specification.
//!
//! - [`serve`]: one exchange, from the request to the last frame;
//! - [`stale`]: a held instance streamed while the origin is asked;
//! - [`levels`]: how much compression the link affords;
//! - [`waits`]: per-host origin waits, which decide when optimism can pay;
//! - [`push`]: a page's subresources pushed with its answer.
//!
//! [`start`] runs a server (`wirefold serve`) with this end of the link on its main
//! listener.

mod ending;
pub mod levels;
pub mod push;
pub mod serve;
pub mod stale;
pub mod waits;

use std::sync::Arc;

use link_protocol::frame;
use proxy::live::LiveConfig;
use proxy::server::{LinkEndpoint, Running, StartError};

/// Starts a server whose main listener answers link requests (when `link.enabled`)
/// besides ordinary ones.
pub async fn start(config: impl Into<LiveConfig>) -> Result<Running, StartError> {
    proxy::server::start_with(
        config,
        Some(Box::new(|pipeline| {
            Arc::new(serve::LinkServer::new(pipeline)) as Arc<dyn LinkEndpoint>
        })),
    )
    .await
}

/// The client proxy went away, or stopped taking frames: nothing more can be sent.
#[derive(Debug)]
pub struct Gone;

/// Why a link exchange stopped before its answer was complete.
#[derive(Debug)]
pub enum Stopped {
    Gone,
    /// A frame of the answer does not fit the link (an origin header block past
    /// [`frame::MAX_PAYLOAD`]): the exchange ends with ERROR instead.
    Oversized(frame::OversizedFrame),
}

impl From<Gone> for Stopped {
    fn from(_: Gone) -> Self {
        Stopped::Gone
    }
}

impl From<frame::OversizedFrame> for Stopped {
    fn from(oversized: frame::OversizedFrame) -> Self {
        Stopped::Oversized(oversized)
    }
}

type BodyItem = Result<bytes::Bytes, proxy::body::BoxError>;

/// Where a link response's frames go: the response body's channel. A client proxy
/// that takes no frame for `idle` counts as gone: the exchange stops and frees what
/// it holds (a client that keeps a stream open without reading would hold it).
#[derive(Clone)]
pub struct FrameSender {
    tx: tokio::sync::mpsc::Sender<BodyItem>,
    idle: std::time::Duration,
}

impl FrameSender {
    pub fn new(tx: tokio::sync::mpsc::Sender<BodyItem>, idle: std::time::Duration) -> Self {
        FrameSender { tx, idle }
    }

    /// Room for one frame (cancel safe).
    pub async fn reserve(&self) -> Result<tokio::sync::mpsc::Permit<'_, BodyItem>, Gone> {
        match tokio::time::timeout(self.idle, self.tx.reserve()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(Gone),
        }
    }

    pub async fn send(&self, frames: bytes::Bytes) -> Result<(), Gone> {
        self.reserve().await?.send(Ok(frames));
        Ok(())
    }

    /// Sends encoded frames that are ready together as one body chunk. Each chunk is
    /// an HTTP/2 write of its own, and on a slow link a lone small frame costs its own
    /// TLS record and TCP segment (52 bytes of headers are 15 ms at 28.8 kbit/s).
    pub async fn send_together(
        &self,
        frames: impl IntoIterator<Item = bytes::Bytes>,
    ) -> Result<(), Gone> {
        let mut pending = Vec::new();
        for frame in frames {
            let big = frame.len() >= TOGETHER;
            pending.push(frame);
            // A big frame closes a chunk: later ones are not copied onto it.
            if big {
                self.send(together(std::mem::take(&mut pending))).await?;
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
        self.send(together(pending)).await
    }
}

/// Frames from this size on end the chunk they join.
const TOGETHER: usize = 16 * 1024;

/// Encoded frames as one body chunk (a lone frame as it is).
pub fn together(frames: impl IntoIterator<Item = bytes::Bytes>) -> bytes::Bytes {
    let frames = match <[bytes::Bytes; 1]>::try_from(frames.into_iter().collect::<Vec<_>>()) {
        Ok([frame]) => return frame,
        Err(frames) => frames,
    };
    let mut chunk = bytes::BytesMut::with_capacity(frames.iter().map(bytes::Bytes::len).sum());
    for frame in frames {
        chunk.extend_from_slice(&frame);
    }
    chunk.freeze()
}

/// Unsent bytes the kernel may queue on a link socket. Frames handed to it are
/// committed (a stale stream cannot take them back), so the queue is kept short and
/// decisions stay close to what is on the wire.
const UNSENT_LIMIT: libc::c_int = 16 * 1024;

/// Applies `UNSENT_LIMIT` (`TCP_NOTSENT_LOWAT`) to an accepted socket.
#[allow(unsafe_code)] // std has no setsockopt
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
