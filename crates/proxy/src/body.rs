//! The one body type every stage passes around, and the small adapters that make it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use tokio::sync::mpsc;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A response or request body: whole, streamed from a peer, or produced by a task.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// Any body whose errors convert into `BoxError`.
pub fn boxed<B>(body: B) -> Body
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// A body fed by a task through a bounded channel (back-pressure: the producer waits
/// while the client is slow). An `Err` item ends the body with that error.
pub fn channel(capacity: usize) -> (mpsc::Sender<Result<Bytes, BoxError>>, Body) {
    let (tx, rx) = mpsc::channel(capacity);
    (tx, ChannelBody { rx }.boxed_unsync())
}

struct ChannelBody {
    rx: mpsc::Receiver<Result<Bytes, BoxError>>,
}

impl HttpBody for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.rx
            .poll_recv(cx)
            .map(|item| item.map(|r| r.map(Frame::data)))
    }
}

/// Fails a body that pauses longer than `limit` between frames (a stalled origin).
pub struct IdleTimeout<B> {
    inner: B,
    limit: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl<B> IdleTimeout<B> {
    pub fn new(inner: B, limit: Duration) -> Self {
        IdleTimeout {
            inner,
            limit,
            deadline: Box::pin(tokio::time::sleep(limit)),
        }
    }
}

/// The error of a body [`IdleTimeout`] cut off.
#[derive(Debug, thiserror::Error)]
#[error("no data for {0:?}")]
pub struct IdleTimedOut(Duration);

impl<B> HttpBody for IdleTimeout<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(item) => {
                let next = tokio::time::Instant::now() + this.limit;
                this.deadline.as_mut().reset(next);
                Poll::Ready(item.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(IdleTimedOut(this.limit))))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The outcome of reading a body up to a limit.
pub enum ReadUpTo {
    /// The whole body fit.
    Complete(Bytes),
    /// The body is longer: what was read, and the rest still to come.
    Partial(Bytes, Body),
}

/// Reads a body whole if it is at most `limit` bytes; otherwise returns what was read
/// and the unread rest, so the caller can go on streaming without losing a byte.
/// `declared` (the body's `Content-Length`, when known) sizes the buffer once instead
/// of growing it by doubling, which would hold two copies at each step.
pub async fn read_up_to(
    mut body: Body,
    limit: usize,
    declared: Option<u64>,
) -> Result<ReadUpTo, BoxError> {
    let capacity = declared.map_or(0, |len| len.min(limit as u64) as usize);
    let mut buf = bytes::BytesMut::with_capacity(capacity);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            buf.extend_from_slice(&data);
            if buf.len() > limit {
                return Ok(ReadUpTo::Partial(buf.freeze(), body));
            }
        }
    }
    Ok(ReadUpTo::Complete(buf.freeze()))
}

/// A body that yields `prefix` and then everything `rest` yields.
pub fn prepend(prefix: Bytes, rest: Body) -> Body {
    Prepend {
        prefix: Some(prefix),
        rest,
    }
    .boxed_unsync()
}

struct Prepend {
    prefix: Option<Bytes>,
    rest: Body,
}

impl HttpBody for Prepend {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }
}

/// Streams `len` bytes of a file from `start`, in chunks, through a bounded channel.
pub fn file(mut file: tokio::fs::File, start: u64, len: u64) -> Body {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    const CHUNK: usize = 64 * 1024;
    let (tx, body) = channel(4);
    tokio::spawn(async move {
        if start > 0 {
            if let Err(e) = file.seek(std::io::SeekFrom::Start(start)).await {
                let _ = tx.send(Err(Box::new(e))).await;
                return;
            }
        }
        let mut remaining = len;
        while remaining > 0 {
            let mut buf = vec![0u8; CHUNK.min(remaining as usize)];
            match file.read(&mut buf).await {
                Ok(0) => {
                    let e = std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "file shrank while being sent",
                    );
                    let _ = tx.send(Err(Box::new(e))).await;
                    return;
                }
                Ok(n) => {
                    buf.truncate(n);
                    remaining -= n as u64;
                    if tx.send(Ok(Bytes::from(buf))).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(Box::new(e))).await;
                    return;
                }
            }
        }
    });
    body
}

/// What a tapped body shows its watcher.
pub enum Tap<'a> {
    /// A data frame, as it goes through.
    Data(&'a Bytes),
    /// The body ended normally.
    End,
    /// The body failed with this error (its last event).
    Failed(&'a BoxError),
}

/// Shows `each` every data frame as it goes through, unchanged, then how the body
/// ended: `End` (once the last frame went through, or the body said it has no more)
/// or `Failed`, once.
pub fn tapped(body: Body, each: impl Fn(Tap<'_>) + Send + Unpin + 'static) -> Body {
    Tapped {
        inner: body,
        each,
        ended: false,
    }
    .boxed_unsync()
}

struct Tapped<F> {
    inner: Body,
    each: F,
    ended: bool,
}

impl<F: Fn(Tap<'_>) + Unpin> HttpBody for Tapped<F> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    (this.each)(Tap::Data(data));
                }
                // A reader may stop at the end a body announces and never poll for
                // `None`: hyper's HTTP/1.1 writer, once a known length is sent.
                if !this.ended && this.inner.is_end_stream() {
                    this.ended = true;
                    (this.each)(Tap::End);
                }
            }
            Poll::Ready(Some(Err(e))) if !this.ended => {
                this.ended = true;
                (this.each)(Tap::Failed(e));
            }
            Poll::Ready(None) if !this.ended => {
                this.ended = true;
                (this.each)(Tap::End);
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// How much of a body went through [`counted`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// Data bytes.
    pub bytes: u64,
    /// The body reached its end (not dropped midway: a client that left).
    pub complete: bool,
}

/// Calls `done` with what went through, once the body ends or is dropped (a client
/// that disconnects is counted for what it received).
pub fn counted(body: Body, done: impl FnOnce(Sent) + Send + Unpin + 'static) -> Body {
    Counted {
        inner: body,
        sent: Sent::default(),
        done: Some(done),
    }
    .boxed_unsync()
}

struct Counted<F: FnOnce(Sent)> {
    inner: Body,
    sent: Sent,
    done: Option<F>,
}

impl<F: FnOnce(Sent) + Unpin> HttpBody for Counted<F> {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.sent.bytes += data.len() as u64;
                }
            }
            Poll::Ready(None) => self.sent.complete = true,
            _ => {}
        }
        polled
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<F: FnOnce(Sent)> Drop for Counted<F> {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            // A connection stops polling a body that says it has ended.
            self.sent.complete |= self.inner.is_end_stream();
            done(self.sent);
        }
    }
}

/// A short plain-text error from wirefold itself; never cached.
pub fn error_response(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = Response::new(full(format!("wirefold: {message}\n")));
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::{Arc, Mutex};

    #[tokio::test]
    async fn a_tap_sees_the_end_of_a_body_read_only_to_its_announced_end() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut body = tapped(full("page"), {
            let seen = seen.clone();
            move |tap| {
                seen.lock().unwrap().push(match tap {
                    Tap::Data(data) => format!("data {}", data.len()),
                    Tap::End => "end".to_string(),
                    Tap::Failed(_) => "failed".to_string(),
                })
            }
        });
        // As hyper's HTTP/1.1 writer reads a body of known length: the frame, then no
        // poll for `None` once the body says it is done.
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.data_ref().map(Bytes::len), Some(4));
        assert!(body.is_end_stream());
        drop(body);
        assert_eq!(*seen.lock().unwrap(), ["data 4", "end"]);
    }
}
