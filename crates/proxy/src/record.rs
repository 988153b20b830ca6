//! One record per answered request, completed where its response completes (the
//! body's last byte handed to the connection, or the client gone) and handed to what
//! consumes it: the access log and the status page ([`crate::recorder`]).
//!
//! Making a record costs the request a few clones of values it already holds; all
//! formatting happens elsewhere (the access log's writer thread, the status page's
//! handler).

use std::borrow::Cow;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use http::header::{self, HeaderValue};
use http::{Method, Request, StatusCode, Uri, Version};
use store::Hash;

use crate::model::{ConnInfo, Provenance, CLIENT_CLOSED};

/// What happened to one request.
#[derive(Debug)]
pub struct RequestRecord {
    /// When the request arrived.
    pub received: SystemTime,
    pub client: SocketAddr,
    pub method: Method,
    /// The request target as received (absolute for a link request).
    pub target: Uri,
    pub protocol: Version,
    pub referer: Option<HeaderValue>,
    pub user_agent: Option<HeaderValue>,
    /// The status sent; [`CLIENT_CLOSED`] if the client left before the answer began.
    pub status: StatusCode,
    /// Body bytes handed to the connection: for a link request, the frames.
    pub bytes_sent: u64,
    /// Bytes of the body before encoding, of what was sent: `bytes_sent` for an
    /// identity body or one cut short, 0 when no body was sent (HEAD, 304).
    pub original_bytes: u64,
    /// How the body was sent: a `wirefold_body_bytes_sent_total` mechanism (`br`,
    /// `dcz`, `vcdiff`, `link-delta`, …); `None` without a representation (304).
    pub mechanism: Option<Cow<'static, str>>,
    /// What the cache did; `None` when the pipeline did not get that far.
    pub cache: Option<Provenance>,
    /// From sending the request upstream to the origin's response head.
    pub origin_wait: Option<Duration>,
    /// From arrival to the body's end (or the client leaving).
    pub total: Duration,
    pub content_type: Option<HeaderValue>,
    /// Site, path and query: what the status page ranks by bytes saved.
    pub resource: Option<String>,
    /// The response offers a dictionary (`Use-As-Dictionary`, or a `Link` to one).
    pub dictionary_announced: bool,
    /// The dictionary the body was compressed against (`dcb`, `dcz`).
    pub dictionary_used: Option<Hash>,
    /// The link as measured when a link exchange began.
    pub link: Option<LinkSample>,
}

/// A TCP connection as the kernel measured it (TCP_INFO): the proxy pair's link
/// socket for the record, a client's connection for adaptive fidelity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkSample {
    /// Bytes per second, the most recent delivery rate sample; `None` before one.
    pub delivery_rate: Option<u64>,
    /// The smoothed round-trip time.
    pub rtt: Option<Duration>,
    /// The delivery rate sample was limited by the sender (it had less to send than
    /// the path could carry): a floor on the path's rate, not an estimate of it.
    pub app_limited: bool,
}

impl LinkSample {
    /// What the kernel has measured of a TCP connection (TCP_INFO, passive): its most
    /// recent delivery rate sample (`tcpi_delivery_rate`, Linux 4.9+) and smoothed RTT
    /// (`tcpi_rtt`). Either is `None` until the kernel has one. libc's `tcp_info` stops
    /// short of the delivery rate, so the fields are read at their ABI offsets.
    #[allow(unsafe_code)] // std has no getsockopt
    pub fn measure(socket: Option<std::os::fd::RawFd>) -> Option<LinkSample> {
        const APP_LIMITED_OFFSET: usize = 7; // bit 0: tcpi_delivery_rate_app_limited
        const RTT_OFFSET: usize = 68;
        const DELIVERY_RATE_OFFSET: usize = 160;
        let fd = socket?;
        let mut info = [0u8; 256];
        let mut len = info.len() as libc::socklen_t;
        // SAFETY: the buffer is valid for `len` bytes and the kernel writes at most that;
        // a closed or reused descriptor only makes the call fail or report another socket.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                info.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return None;
        }
        let filled = &info[..(len as usize).min(info.len())];
        let rtt = filled
            .get(RTT_OFFSET..)
            .and_then(|rest| rest.first_chunk::<4>())
            .map(|field| u32::from_ne_bytes(*field))
            .filter(|&micros| micros > 0)
            .map(|micros| Duration::from_micros(u64::from(micros)));
        let delivery_rate = filled
            .get(DELIVERY_RATE_OFFSET..)
            .and_then(|rest| rest.first_chunk::<8>())
            .map(|field| u64::from_ne_bytes(*field))
            .filter(|&rate| rate > 0);
        let app_limited = filled
            .get(APP_LIMITED_OFFSET)
            .is_some_and(|bits| bits & 1 == 1);
        Some(LinkSample {
            delivery_rate,
            rtt,
            app_limited,
        })
    }
}

impl RequestRecord {
    /// A request's record as it arrives; whoever answers fills in the rest.
    pub fn arriving<B>(req: &Request<B>, conn: ConnInfo) -> RequestRecord {
        let field = |name| req.headers().get(name).cloned();
        RequestRecord {
            received: SystemTime::now(),
            client: conn.peer,
            method: req.method().clone(),
            target: req.uri().clone(),
            protocol: req.version(),
            referer: field(header::REFERER),
            user_agent: field(header::USER_AGENT),
            // Until an answer is watched: a request dropped before it is one the client left.
            status: CLIENT_CLOSED,
            bytes_sent: 0,
            original_bytes: 0,
            mechanism: None,
            cache: None,
            origin_wait: None,
            total: Duration::ZERO,
            content_type: None,
            resource: None,
            dictionary_announced: false,
            dictionary_used: None,
            link: None,
        }
    }

    /// Bytes the mechanism saved (never negative: a coding that cost bytes saved none).
    pub fn saved(&self) -> u64 {
        self.original_bytes.saturating_sub(self.bytes_sent)
    }
}

/// What a response delivered, as its maker knows it before the body is sent.
#[derive(Clone, Debug, Default)]
pub struct Delivery {
    /// `None` for a response without a representation (304).
    pub mechanism: Option<Cow<'static, str>>,
    /// Bytes of the whole body before encoding; `None` when that is what is sent
    /// (identity, a range, HEAD, an error text).
    pub original_len: Option<u64>,
    pub cache: Option<Provenance>,
    pub dictionary_announced: bool,
    pub dictionary_used: Option<Hash>,
}

impl Delivery {
    /// A short error text from wirefold itself, sent as it is.
    pub fn error(cache: Option<Provenance>) -> Delivery {
        Delivery {
            mechanism: Some(Cow::Borrowed("identity")),
            cache,
            ..Delivery::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connected_socket_reports_its_delivery_rate_and_rtt() {
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let payload = vec![7u8; 1 << 20];
        let reader = std::thread::spawn(move || {
            let mut sink = vec![0u8; 1 << 20];
            client.read_exact(&mut sink).unwrap();
        });
        server.write_all(&payload).unwrap();
        reader.join().unwrap();
        let measured = LinkSample::measure(Some(server.as_raw_fd())).unwrap();
        assert!(measured.delivery_rate.unwrap() > 0, "{measured:?}");
        assert!(measured.rtt.is_some(), "{measured:?}");
        assert_eq!(LinkSample::measure(Some(-1)), None);
        assert_eq!(LinkSample::measure(None), None);
    }
}
