//! A deadline on a connection's first bytes, before hyper's own timers apply.

use std::time::Duration;

/// Ends a connection whose protocol is not known within `limit` of its start.
///
/// hyper's HTTP/1.1 header timeout starts only once the auto builder has told HTTP/1.1
/// from HTTP/2, and the auto builder reads the first bytes (up to the 24-byte HTTP/2
/// preface) without any limit: a client that connects and sends nothing, or a prefix of
/// the preface, would hold the connection forever (slowloris). Once a byte leaves the
/// preface, or the whole preface arrived, the deadline is off and hyper's timers rule.
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

impl<I: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for FirstBytesDeadline<I> {
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
