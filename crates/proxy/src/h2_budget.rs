//! A budget per HTTP/2 connection on the response bytes waiting inside `h2`, so that
//! the choice of which stream sends next is made when the socket takes more, not
//! when a stream's body happens to be ready.
//!
//! `h2` sends every stream that has buffered data frame by frame, in turn; whatever a
//! stream has handed it is on its way, whatever its urgency. So a stream may hand
//! `h2` DATA only while the connection's unsent total (handed to `h2`, not yet
//! written to the TLS stream below it) is under the budget, and when room opens the
//! most urgent waiting stream goes first ([`Budget::room`]): of equal urgency, those
//! not incremental one after another in the order they were asked for (RFC 9218
//! §4: only a whole one is of use), then the incremental ones in turn. What counts as written
//! is read off the frames `h2` writes ([`Metered`], a wrapper around the connection's
//! I/O): a DATA frame's payload as it passes. A stream's bytes that `h2` drops
//! instead (the stream was reset, by either side, or lies beyond a client's GOAWAY)
//! are given back when the RST_STREAM or GOAWAY passes the same wrapper.
//!
//! Streams wait for room only once the connection has carried requests of two
//! priority classes (urgency and incremental flag): until then no response is more
//! urgent than another, and every stream hands `h2` all it has at once, counted, as
//! without a budget (RFC 9218's one-after-another order of equal, non-incremental
//! urgencies is given up there: `h2` takes turns frame by frame). Waiting for room
//! costs a hand-off between the stream's task and the connection's per piece
//! (docs/benchmarks.md, "Ordering only where there is something to order"); a
//! browser's connection mixes classes from its first subresource, a client of one
//! kind of request (an API client, a load generator) never does. What was handed
//! before stays counted, so a page answered at once still goes out ahead of the
//! subresources asked for after it.

use std::collections::{BTreeMap, HashMap};
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard};
use std::task::{ready, Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use wirefold_http::priority::Priority;

/// A waiting stream's place: urgency, then incremental after not, then the stream
/// (not incremental: the one asked for first keeps going) or the wait's arrival
/// (incremental: each piece queues anew, so they take turns).
type Key = (u8, bool, u64);

/// The most a stream hands `h2` over the budget: one DATA frame (`h2`'s default
/// largest), so that a budget smaller than a frame still sends whole frames.
const FRAME: usize = 16 * 1024;

/// A connection's budget, shared by its streams and its [`Metered`] I/O.
pub struct Budget {
    limit: usize,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    /// DATA bytes handed to `h2` and not yet written below it.
    unsent: usize,
    /// Each stream's part of `unsent`, and whether its owner is still sending.
    streams: HashMap<u32, Stake>,
    /// The streams waiting for room, in the order they get it ([`Place`]'s key).
    waiting: BTreeMap<Key, Waker>,
    arrivals: u64,
    /// The priority class of the connection's first request.
    class: Option<(u8, bool)>,
    /// Requests of two classes have arrived: the budget binds from now on.
    mixed: bool,
    /// The connection's I/O is gone: nothing handed to `h2` will be written, and no
    /// stream gets room again.
    closed: bool,
}

#[derive(Default)]
struct Stake {
    unsent: usize,
    /// The stream's sender is still running (it may ask for more room).
    live: bool,
    /// `h2` dropped the stream's data (a reset): it gets no more room.
    reset: bool,
}

impl Queue {
    /// Takes `bytes` off `stream`'s part (no more than it has: what a reset gave back
    /// is not given back twice), and wakes the first waiter if that opened room.
    fn settle(&mut self, stream: u32, bytes: usize, limit: usize) {
        let Some(stake) = self.streams.get_mut(&stream) else {
            return;
        };
        let settled = bytes.min(stake.unsent);
        stake.unsent -= settled;
        self.unsent -= settled;
        self.forget_if_done(stream);
        self.wake_first(limit);
    }

    fn forget_if_done(&mut self, stream: u32) {
        if self
            .streams
            .get(&stream)
            .is_some_and(|stake| stake.unsent == 0 && !stake.live)
        {
            self.streams.remove(&stream);
        }
    }

    /// A request of `class` arrived on the connection.
    fn arrived(&mut self, class: (u8, bool)) {
        if self.mixed {
            return;
        }
        match self.class {
            None => self.class = Some(class),
            Some(first) => self.mixed = first != class,
        }
    }

    /// `h2` dropped `stream`'s unsent data: its part is free, and it gets no more.
    fn reset(&mut self, stream: u32, limit: usize) {
        let Some(stake) = self.streams.get_mut(&stream) else {
            return;
        };
        self.unsent -= std::mem::take(&mut stake.unsent);
        if stake.live {
            stake.reset = true;
            // It may be waiting anywhere in the line: each waiter looks again, and
            // only it leaves (rare: a reset, among at most the connection's streams).
            self.wake_all();
        } else {
            self.streams.remove(&stream);
            self.wake_first(limit);
        }
    }

    fn wake_all(&self) {
        for waiter in self.waiting.values() {
            waiter.wake_by_ref();
        }
    }

    fn wake_first(&self, limit: usize) {
        if self.unsent < limit {
            if let Some(first) = self.waiting.values().next() {
                first.wake_by_ref();
            }
        }
    }
}

impl Budget {
    pub fn new(limit: usize) -> Self {
        Budget {
            limit,
            queue: Mutex::new(Queue::default()),
        }
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        // The queue's every change is complete before any call that could panic.
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A request of `priority` arrived: the budget binds once two classes have.
    pub fn arrived(&self, priority: Priority) {
        self.queue()
            .arrived((priority.urgency(), priority.incremental));
    }

    /// Registers a stream of `priority` that is about to send; [`Budget::leave`]
    /// when it is done.
    pub fn enter(&self, stream: u32, priority: Priority) {
        let mut queue = self.queue();
        queue.arrived((priority.urgency(), priority.incremental));
        queue.streams.entry(stream).or_default().live = true;
    }

    /// The stream's sender is done; what it handed `h2` is still counted until
    /// written (or dropped by a reset).
    pub fn leave(&self, stream: u32) {
        let mut queue = self.queue();
        if let Some(stake) = queue.streams.get_mut(&stream) {
            stake.live = false;
        }
        queue.forget_if_done(stream);
    }

    /// Waits for room for `stream` (of `priority`) to hand `h2` up to `wanted` bytes:
    /// the unsent total is under the budget and no stream waits that goes before it
    /// ([`Key`]: more urgent, or as urgent and asked for earlier); all of it at once,
    /// counted, while the connection has carried one class only. Returns the bytes
    /// granted (the room left, at least a frame, at most `wanted`), already counted
    /// as unsent: [`Budget::give_back`] what is not handed over. `None` once the
    /// stream was reset or the connection ended.
    pub async fn room(&self, stream: u32, priority: Priority, wanted: usize) -> Option<usize> {
        let mut place = Place {
            budget: self,
            key: None,
        };
        std::future::poll_fn(|cx| place.poll(cx, stream, priority, wanted)).await
    }

    /// The connection's I/O is gone ([`Metered`] dropped): every stream waiting for
    /// room, and any that asks later, gets `None`.
    fn close(&self) {
        let mut queue = self.queue();
        queue.closed = true;
        queue.wake_all();
    }

    /// Uncounts `bytes` of a grant that `stream` did not hand to `h2`.
    pub fn give_back(&self, stream: u32, bytes: usize) {
        if bytes > 0 {
            self.queue().settle(stream, bytes, self.limit);
        }
    }
}

/// A stream's place in the waiting line; leaving it (the stream was dropped while it
/// waited) passes a wakeup it may have taken on to the next.
struct Place<'a> {
    budget: &'a Budget,
    key: Option<Key>,
}

impl Place<'_> {
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        stream: u32,
        priority: Priority,
        wanted: usize,
    ) -> Poll<Option<usize>> {
        let limit = self.budget.limit;
        let mut queue = self.budget.queue();
        let queue = &mut *queue;
        if queue.closed || queue.streams.get(&stream).is_some_and(|stake| stake.reset) {
            if let Some(key) = self.key.take() {
                queue.waiting.remove(&key);
                queue.wake_first(limit);
            }
            return Poll::Ready(None);
        }
        if !queue.mixed {
            queue.unsent += wanted;
            queue.streams.entry(stream).or_default().unsent += wanted;
            return Poll::Ready(Some(wanted));
        }
        let key = *self.key.get_or_insert_with(|| {
            let order = if priority.incremental {
                queue.arrivals += 1;
                queue.arrivals
            } else {
                u64::from(stream)
            };
            (priority.urgency(), priority.incremental, order)
        });
        let first = queue
            .waiting
            .keys()
            .next()
            .is_none_or(|&first| key <= first);
        if queue.unsent < limit && first {
            queue.waiting.remove(&key);
            self.key = None;
            let granted = wanted.min((limit - queue.unsent).max(FRAME));
            queue.unsent += granted;
            queue.streams.entry(stream).or_default().unsent += granted;
            queue.wake_first(limit);
            return Poll::Ready(Some(granted));
        }
        queue.waiting.insert(key, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let mut queue = self.budget.queue();
            queue.waiting.remove(&key);
            queue.wake_first(self.budget.limit);
        }
    }
}

/// What the frames passing one way say about the budget.
enum Seen {
    /// Bytes of a DATA frame's payload.
    Data { stream: u32, bytes: usize },
    /// An RST_STREAM: `h2` drops the stream's data.
    Reset(u32),
    /// A GOAWAY: `h2` drops the pushed streams beyond the last one it names.
    GoAway,
}

/// Where one direction of the connection is in its frames (RFC 9113 §4.1: a 9-byte
/// header, length, type, flags, stream, then the payload).
#[derive(Default)]
struct Frames {
    /// Bytes of the client's connection preface not yet passed (it precedes its
    /// frames).
    preface_left: usize,
    header: [u8; 9],
    header_len: usize,
    payload_left: usize,
    /// The stream of the DATA frame whose payload is passing.
    data_stream: Option<u32>,
}

const DATA: u8 = 0;
const RST_STREAM: u8 = 3;
const GOAWAY: u8 = 7;

impl Frames {
    fn after_preface() -> Self {
        Frames {
            preface_left: 24,
            ..Frames::default()
        }
    }

    fn pass(&mut self, mut bytes: &[u8], seen: &mut impl FnMut(Seen)) {
        let skipped = self.preface_left.min(bytes.len());
        self.preface_left -= skipped;
        bytes = &bytes[skipped..];
        while !bytes.is_empty() {
            if self.payload_left > 0 {
                let passed = self.payload_left.min(bytes.len());
                self.payload_left -= passed;
                bytes = &bytes[passed..];
                if let Some(stream) = self.data_stream {
                    seen(Seen::Data {
                        stream,
                        bytes: passed,
                    });
                }
                continue;
            }
            let wanted = (9 - self.header_len).min(bytes.len());
            self.header[self.header_len..self.header_len + wanted]
                .copy_from_slice(&bytes[..wanted]);
            self.header_len += wanted;
            bytes = &bytes[wanted..];
            if self.header_len == 9 {
                self.header_len = 0;
                let h = self.header;
                self.payload_left =
                    usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                self.data_stream = (h[3] == DATA).then_some(stream);
                match h[3] {
                    RST_STREAM => seen(Seen::Reset(stream)),
                    GOAWAY => seen(Seen::GoAway),
                    _ => {}
                }
            }
        }
    }
}

/// The connection's I/O below `h2`, settling the budget as frames pass: DATA
/// payloads written, RST_STREAMs either way, a client's GOAWAY. Without a budget it
/// only passes bytes through.
///
/// With a bound on the layer below (TLS: records encrypted and not yet taken by the
/// socket go out in order, whatever their urgency), a write is passed whole while the
/// socket takes everything, and once it backs up, only after the layer below has
/// written all it holds, and at most `bound` bytes. A fixed limit inside rustls
/// would instead cut every write into pieces of that size, one system call each,
/// also where nothing waits (docs/benchmarks.md, "What ordering costs").
pub struct Metered<S> {
    inner: S,
    budget: Option<std::sync::Arc<Budget>>,
    bound: Option<usize>,
    /// The layer below still held bytes after the last write.
    backed_up: bool,
    written: Frames,
    read: Frames,
}

impl<S> Metered<S> {
    pub fn new(inner: S, budget: Option<std::sync::Arc<Budget>>, bound: Option<usize>) -> Self {
        Metered {
            inner,
            budget,
            bound,
            backed_up: false,
            written: Frames::default(),
            read: Frames::after_preface(),
        }
    }
}

/// The connection ended: the streams waiting for room would otherwise wait for
/// writes that never come.
impl<S> Drop for Metered<S> {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.close();
        }
    }
}

impl<S: AsyncWrite + Unpin> Metered<S> {
    /// Writes what the bound allows of `bufs` to the layer below (see [`Metered`]).
    fn poll_write_bounded(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let inner = Pin::new(&mut self.inner);
        let Some(bound) = self.bound else {
            return inner.poll_write_vectored(cx, bufs);
        };
        let n = if self.backed_up {
            let mut inner = inner;
            ready!(inner.as_mut().poll_flush(cx))?;
            let first = bufs
                .iter()
                .find(|buf| !buf.is_empty())
                .map_or(&[][..], |buf| &buf[..]);
            ready!(inner.poll_write(cx, &first[..first.len().min(bound)]))?
        } else {
            ready!(inner.poll_write_vectored(cx, bufs))?
        };
        // Whether the socket took it all; a failure shows on the next write.
        self.backed_up = Pin::new(&mut self.inner).poll_flush(cx).is_pending();
        Poll::Ready(Ok(n))
    }
}

impl Budget {
    fn written(&self, frames: &mut Frames, bytes: &[u8], queue: &mut Queue) {
        frames.pass(bytes, &mut |seen| match seen {
            Seen::Data { stream, bytes } => queue.settle(stream, bytes, self.limit),
            Seen::Reset(stream) => queue.reset(stream, self.limit),
            Seen::GoAway => {}
        });
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if let Some(budget) = &this.budget {
            let new = &buf.filled()[before..];
            let mut queue = budget.queue();
            let limit = budget.limit;
            this.read.pass(new, &mut |seen| match seen {
                Seen::Reset(stream) => queue.reset(stream, limit),
                // Pushed streams (even) beyond the GOAWAY's last one are dropped;
                // those before it, taken for dropped too, only lift the budget a
                // little while the connection winds down.
                Seen::GoAway => {
                    let pushed: Vec<u32> = queue
                        .streams
                        .keys()
                        .copied()
                        .filter(|stream| stream % 2 == 0)
                        .collect();
                    for stream in pushed {
                        queue.reset(stream, limit);
                    }
                }
                Seen::Data { .. } => {}
            });
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let n = ready!(this.poll_write_bounded(cx, bufs))?;
        if let Some(budget) = &this.budget {
            let mut queue = budget.queue();
            let mut left = n;
            for buf in bufs {
                let passed = left.min(buf.len());
                budget.written(&mut this.written, &buf[..passed], &mut queue);
                left -= passed;
                if left == 0 {
                    break;
                }
            }
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A TLS layer over a socket that is open or backed up: it takes every write
    /// whole and holds what the socket does not take.
    #[derive(Default)]
    struct Below {
        taken: Vec<usize>,
        held: usize,
        socket_open: bool,
    }

    impl AsyncWrite for Below {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.taken.push(buf.len());
            self.held += buf.len();
            let _ = self.poll_flush(cx);
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            if self.socket_open {
                self.held = 0;
            }
            if self.held == 0 {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            }
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn write(io: &mut Metered<Below>, bytes: usize) -> Poll<std::io::Result<usize>> {
        let data = vec![0; bytes];
        let mut cx = Context::from_waker(std::task::Waker::noop());
        Pin::new(io).poll_write(&mut cx, &data)
    }

    #[test]
    fn below_a_bound_writes_pass_whole_until_the_socket_backs_up() {
        let mut io = Metered::new(Below::default(), None, Some(8192));
        io.inner.socket_open = true;
        assert!(matches!(write(&mut io, 40_000), Poll::Ready(Ok(40_000))));
        // The socket stops taking: this write is held below, and the next waits.
        io.inner.socket_open = false;
        assert!(matches!(write(&mut io, 40_000), Poll::Ready(Ok(40_000))));
        assert!(write(&mut io, 40_000).is_pending());
        // Once it has taken what was held, at most the bound goes below until it
        // takes everything again.
        io.inner.socket_open = true;
        assert!(matches!(write(&mut io, 40_000), Poll::Ready(Ok(8192))));
        assert!(matches!(write(&mut io, 40_000), Poll::Ready(Ok(40_000))));
        assert_eq!(io.inner.taken, [40_000, 40_000, 8192, 40_000]);
    }

    fn grant(budget: &Budget, stream: u32, priority: Priority, wanted: usize) -> Poll<usize> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut place = Place { budget, key: None };
        let granted = place.poll(&mut cx, stream, priority, wanted);
        granted.map(|granted| granted.unwrap())
    }

    #[test]
    fn one_class_is_granted_all_at_once_and_counted_for_the_next() {
        let budget = Budget::new(8192);
        let (page, image) = (Priority::new(0, true), Priority::new(3, false));
        budget.enter(1, page);
        // One class so far: all at once, no wait, but counted.
        assert_eq!(grant(&budget, 1, page, 100_000), Poll::Ready(100_000));
        budget.give_back(1, 1_000);
        assert_eq!(budget.queue().unsent, 99_000);
        // A second class: it waits for the page's bytes to be written.
        budget.enter(3, image);
        assert_eq!(grant(&budget, 3, image, 20_000), Poll::Pending);
        budget.queue().settle(1, 90_000, budget.limit);
        assert_eq!(grant(&budget, 3, image, 20_000), Poll::Pending);
        budget.queue().settle(1, 1_000, budget.limit);
        assert_eq!(grant(&budget, 3, image, 20_000), Poll::Ready(FRAME));
    }

    fn poll_room(
        place: &mut Place<'_>,
        stream: u32,
        priority: Priority,
        woken: &Arc<Woken>,
    ) -> Poll<Option<usize>> {
        let waker = Waker::from(woken.clone());
        place.poll(&mut Context::from_waker(&waker), stream, priority, 20_000)
    }

    #[derive(Default)]
    struct Woken(std::sync::atomic::AtomicBool);

    impl std::task::Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    impl Woken {
        fn taken(&self) -> bool {
            self.0.swap(false, std::sync::atomic::Ordering::SeqCst)
        }
    }

    /// A stream waiting behind others is woken by its own reset, and every waiter by
    /// the connection's end; each then gets `None`, and so does any later ask.
    #[test]
    fn waiters_are_woken_and_refused_by_a_reset_or_the_connection_end() {
        let budget = Arc::new(Budget::new(8192));
        let (page, image) = (Priority::new(0, false), Priority::new(3, false));
        budget.enter(1, page);
        assert_eq!(grant(&budget, 1, page, 100_000), Poll::Ready(100_000));
        let mut places: Vec<(u32, Place<'_>, Arc<Woken>)> = [3, 5, 7]
            .into_iter()
            .map(|stream| {
                budget.enter(stream, image);
                (
                    stream,
                    Place {
                        budget: &budget,
                        key: None,
                    },
                    Arc::default(),
                )
            })
            .collect();
        for (stream, place, woken) in &mut places {
            assert!(poll_room(place, *stream, image, woken).is_pending());
        }
        // Stream 7, last in line, is reset by the client.
        budget.queue().reset(7, budget.limit);
        let (stream, place, woken) = &mut places[2];
        assert!(woken.taken());
        assert_eq!(poll_room(place, *stream, image, woken), Poll::Ready(None));
        // The connection ends with the page's bytes unwritten.
        let io = Metered::new(Below::default(), Some(budget.clone()), None);
        drop(io);
        for (stream, place, woken) in &mut places[..2] {
            assert!(woken.taken(), "stream {stream} not woken");
            assert_eq!(poll_room(place, *stream, image, woken), Poll::Ready(None));
        }
        budget.enter(9, image);
        let mut later = Place {
            budget: &budget,
            key: None,
        };
        assert_eq!(
            poll_room(&mut later, 9, image, &Arc::default()),
            Poll::Ready(None)
        );
    }

    #[test]
    fn without_a_bound_writes_pass_whole_into_a_backed_up_socket() {
        let mut io = Metered::new(Below::default(), None, None);
        for _ in 0..2 {
            assert!(matches!(write(&mut io, 40_000), Poll::Ready(Ok(40_000))));
        }
        assert_eq!(io.inner.taken, [40_000, 40_000]);
    }
}
