//! A connection's first bytes: a deadline on them, before the servers' own timers
//! apply, and what they say (HTTP/1.1 or the HTTP/2 preface).

use std::time::Duration;

/// Ends a connection whose protocol is not known within `limit` of its start.
///
/// For a TLS connection that chose `h2` by ALPN: the h2 server reads the 24-byte
/// preface without any limit, so a client that sends nothing, or a prefix of the
/// preface, would hold the connection forever (slowloris). Once a byte leaves the
/// preface, or the whole preface arrived, the deadline is off and the server's own
/// timers rule.
pub struct FirstBytesDeadline<I> {
    inner: I,
    deadline: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// Bytes read so far that match the HTTP/2 preface.
    matched: usize,
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

impl<I> FirstBytesDeadline<I> {
    pub fn new(inner: I, limit: Duration) -> Self {
        FirstBytesDeadline {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep(limit))),
            matched: 0,
        }
    }
}

impl<I: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for FirstBytesDeadline<I> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let this = &mut *self;
        let before = buf.filled().len();
        match std::pin::Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) if this.deadline.is_some() => {
                let new = &buf.filled()[before..];
                let expected = &H2_PREFACE[this.matched..];
                let n = new.len().min(expected.len());
                if new.is_empty()
                    || new[..n] != expected[..n]
                    || this.matched + n == H2_PREFACE.len()
                {
                    this.deadline = None;
                } else {
                    this.matched += n;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match this
                .deadline
                .as_mut()
                .map(|d| std::future::Future::poll(d.as_mut(), cx))
            {
                Some(Poll::Ready(())) => Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no request within the header timeout",
                ))),
                _ => Poll::Pending,
            },
            other => other,
        }
    }
}

/// `AsyncWrite` for a wrapper that only watches the read side: every write goes to its
/// `inner` untouched.
macro_rules! write_through {
    ($wrapper:ident) => {
        impl<I: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for $wrapper<I> {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                data: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.inner).poll_write(cx, data)
            }
            fn poll_write_vectored(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
            }
            fn is_write_vectored(&self) -> bool {
                self.inner.is_write_vectored()
            }
            fn poll_flush(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.inner).poll_flush(cx)
            }
            fn poll_shutdown(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
            }
        }
    };
}
// For h2_server's test client, which watches only what it reads too.
#[cfg(test)]
pub(crate) use write_through;

write_through!(FirstBytesDeadline);

/// What a connection's first bytes say it speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    /// The HTTP/2 preface: h2c by prior knowledge, or h2 over TLS without ALPN.
    Http2,
}

/// Reads a connection's first bytes until they tell HTTP/1.1 from the HTTP/2 preface:
/// the first byte that leaves the preface, the whole preface, or the end of the stream
/// (which hyper's HTTP/1.1 side then closes). A connection that tells nothing within
/// `limit` fails with `TimedOut` (slowloris: hyper's header timer has not started yet).
///
/// Told once, the connection goes to a server of that one protocol, instead of one
/// that keeps room for both for its whole life (the auto builder's state is sized for
/// HTTP/2's, which every idle HTTP/1.1 connection would pay).
pub async fn sniff<I>(mut io: I, limit: Duration) -> std::io::Result<(Protocol, Replay<I>)>
where
    I: tokio::io::AsyncRead + Unpin,
{
    let mut head = [0; H2_PREFACE.len()];
    let told = tokio::time::timeout(limit, read_until_told(&mut io, &mut head)).await;
    let (protocol, len) = told.map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no request within the header timeout",
        )
    })??;
    Ok((
        protocol,
        Replay {
            inner: io,
            head,
            replayed: 0,
            len: len as u8,
        },
    ))
}

async fn read_until_told<I>(
    io: &mut I,
    head: &mut [u8; H2_PREFACE.len()],
) -> std::io::Result<(Protocol, usize)>
where
    I: tokio::io::AsyncRead + Unpin,
{
    use tokio::io::AsyncReadExt;
    let mut len = 0;
    loop {
        let n = io.read(&mut head[len..]).await?;
        len += n;
        if n == 0 || head[..len] != H2_PREFACE[..len] {
            return Ok((Protocol::Http1, len));
        }
        if len == H2_PREFACE.len() {
            return Ok((Protocol::Http2, len));
        }
    }
}

/// A connection whose first bytes, read by [`sniff`], are read again before the rest.
/// They are kept inline (at most the preface's 24 bytes), not in a buffer of their own.
pub struct Replay<I> {
    inner: I,
    head: [u8; H2_PREFACE.len()],
    replayed: u8,
    len: u8,
}

impl<I: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Replay<I> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.replayed == this.len {
            return std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let rest = &this.head[this.replayed as usize..this.len as usize];
        let n = rest.len().min(buf.remaining());
        buf.put_slice(&rest[..n]);
        this.replayed += n as u8;
        if this.replayed == this.len && buf.remaining() > 0 {
            // Read on into the same buffer, so that a head which has arrived whole is
            // read whole. hyper grows its read buffer when a read leaves less than its
            // 8 KiB of room, and the buffer keeps that size for the connection's life:
            // the replayed bytes alone would double it to 16 KiB. Nothing yet, or the
            // end, the next read meets again; an error is dropped here, and the next
            // read meets the failed connection's end.
            let _ = std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        std::task::Poll::Ready(Ok(()))
    }
}

write_through!(Replay);

/// A replayed connection parks as its transport does. It parks only once a whole head
/// has been read through it, so after the sniffed bytes, which come first.
impl<I: crate::park::Transport> crate::park::Transport for Replay<I> {
    const PARKS: bool = I::PARKS;
    fn into_socket(self) -> Option<std::net::TcpStream> {
        // Should sniffed bytes remain, closing loses nothing hyper was owed an answer for.
        (self.replayed == self.len)
            .then(|| self.inner.into_socket())
            .flatten()
    }
    const SENDS_FILES: bool = I::SENDS_FILES;
    fn poll_send_file(
        &mut self,
        cx: &mut std::task::Context<'_>,
        head: &[std::io::IoSlice<'_>],
        file: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.inner.poll_send_file(cx, head, file, offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const LONG: Duration = Duration::from_secs(60);

    /// Sends `parts` one write at a time, then sniffs and reads everything back.
    async fn sniff_and_read(parts: &[&[u8]]) -> (Protocol, Vec<u8>) {
        let (mut client, server) = tokio::io::duplex(64);
        let parts: Vec<Vec<u8>> = parts.iter().map(|p| p.to_vec()).collect();
        let writer = tokio::spawn(async move {
            for part in parts {
                client.write_all(&part).await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let (protocol, mut replay) = sniff(server, LONG).await.unwrap();
        writer.await.unwrap();
        let mut seen = Vec::new();
        replay.read_to_end(&mut seen).await.unwrap();
        (protocol, seen)
    }

    #[tokio::test]
    async fn http1_requests_are_told_at_the_first_byte_off_the_preface_and_replayed_whole() {
        for parts in [
            &[&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..]][..],
            // Starts like the preface ("P"), leaves it at the second byte.
            &[
                b"P",
                b"OST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
            ],
            &[b"PRI * HTTP/1.1\r\n\r\n"],
        ] {
            let (protocol, seen) = sniff_and_read(parts).await;
            assert_eq!(protocol, Protocol::Http1);
            assert_eq!(seen, parts.concat());
        }
    }

    #[tokio::test]
    async fn a_head_that_arrived_whole_is_read_whole_in_the_first_read() {
        // hyper's first read: 8 KiB of room. Given only the sniffed bytes, its next
        // read would double its buffer for the connection's life.
        let request = b"GET /a/longer/path HTTP/1.1\r\nHost: example.test\r\n\r\n";
        let (mut client, server) = tokio::io::duplex(1024);
        client.write_all(request).await.unwrap();
        let (_, mut replay) = sniff(server, LONG).await.unwrap();
        let mut first_read = vec![0; 8192];
        let n = replay.read(&mut first_read).await.unwrap();
        assert_eq!(&first_read[..n], request);
    }

    #[tokio::test]
    async fn the_http2_preface_is_told_even_in_pieces_and_replayed() {
        let frames = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00";
        let (protocol, seen) = sniff_and_read(&[
            &H2_PREFACE[..5],
            &H2_PREFACE[5..20],
            &H2_PREFACE[20..],
            frames,
        ])
        .await;
        assert_eq!(protocol, Protocol::Http2);
        assert_eq!(seen, [H2_PREFACE, &frames[..]].concat());
    }

    #[tokio::test]
    async fn a_connection_closed_at_once_goes_to_http1_with_nothing_to_read() {
        let (protocol, seen) = sniff_and_read(&[]).await;
        assert_eq!(protocol, Protocol::Http1);
        assert!(seen.is_empty());
    }

    #[tokio::test]
    async fn silence_or_part_of_the_preface_times_out() {
        for prefix in [&b""[..], &H2_PREFACE[..16]] {
            let (mut client, server) = tokio::io::duplex(64);
            client.write_all(prefix).await.unwrap();
            let sniffed = sniff(server, Duration::from_millis(50)).await;
            let error = sniffed.err().expect("no protocol told");
            assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
            drop(client);
        }
    }
}
