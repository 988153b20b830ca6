//! One record per answered request, completed where its response completes (the
//! body's last byte handed to the connection, or the client gone) and handed to what
//! consumes it: the access log and the status page ([`Records`]).
//!
//! Making a record costs the request a few clones of values it already holds; all
//! formatting happens elsewhere (the access log's writer thread, the status page's
//! handler).

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use store::Hash;

use crate::access_log::AccessLog;
use crate::body::{self, Body, Sent};
use crate::model::{ConnInfo, Provenance, CLIENT_CLOSED};
use crate::status::StatusBoard;

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

/// The proxy pair's link as the kernel measured it on the link's socket (TCP_INFO).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkSample {
    /// Bytes per second, the most recent delivery rate sample; `None` before one.
    pub delivery_rate: Option<u64>,
    /// The smoothed round-trip time.
    pub rtt: Option<Duration>,
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

/// Where every completed record goes.
pub struct Records {
    board: StatusBoard,
    access_log: Option<AccessLog>,
}

impl Records {
    pub fn new(board: StatusBoard, access_log: Option<AccessLog>) -> Self {
        Records { board, access_log }
    }

    pub fn board(&self) -> &StatusBoard {
        &self.board
    }

    pub fn access_log(&self) -> Option<&AccessLog> {
        self.access_log.as_ref()
    }

    /// Counts the record on the status board and queues it for the access log
    /// (never waiting: a full queue drops it, counted).
    pub fn add(&self, record: RequestRecord) {
        self.board.add(&record);
        if let Some(log) = &self.access_log {
            log.write(record);
        }
    }
}

/// A record being completed by the response's maker and by its body as it is sent.
/// It goes to [`Records`] once the last of them lets go: a body that outlives its
/// maker (a stream), or a maker that outlives its body (a link exchange whose client
/// proxy left), both give a complete record.
#[derive(Clone)]
pub struct OpenRecord(Arc<Open>);

struct Open {
    /// Taken when the last holder lets go.
    state: Mutex<Option<OpenState>>,
    started: Instant,
    records: Arc<Records>,
}

struct OpenState {
    record: RequestRecord,
    original_len: Option<u64>,
    sent: Option<Sent>,
}

impl OpenRecord {
    /// `started` is when the request arrived, for the total time.
    pub fn new(record: RequestRecord, started: Instant, records: Arc<Records>) -> Self {
        OpenRecord(Arc::new(Open {
            state: Mutex::new(Some(OpenState {
                record,
                original_len: None,
                sent: None,
            })),
            started,
            records,
        }))
    }

    pub fn update(&self, change: impl FnOnce(&mut RequestRecord)) {
        self.with_state(|state| change(&mut state.record));
    }

    /// Bytes of the whole body before encoding; `None` when that is what is sent.
    /// Counted only if the whole body goes.
    pub fn set_original_len(&self, original_len: Option<u64>) {
        self.with_state(|state| state.original_len = original_len);
    }

    pub fn deliver(&self, delivery: Delivery) {
        self.set_original_len(delivery.original_len);
        self.update(|record| {
            record.mechanism = delivery.mechanism;
            record.cache = delivery.cache;
            record.dictionary_announced = delivery.dictionary_announced;
            record.dictionary_used = delivery.dictionary_used;
        });
    }

    /// Takes the response's status and media type, and counts its body as it is sent.
    pub fn watch(&self, response: Response<Body>) -> Response<Body> {
        let (parts, body) = response.into_parts();
        self.update(|record| {
            record.status = parts.status;
            record.content_type = parts.headers.get(header::CONTENT_TYPE).cloned();
        });
        let open = self.clone();
        let body = body::counted(body, move |sent| {
            open.with_state(|state| state.sent = Some(sent));
        });
        Response::from_parts(parts, body)
    }

    /// Each change sets fields whole, so a poisoned lock is taken over as it is. The
    /// state is there while a holder is.
    fn with_state(&self, change: impl FnOnce(&mut OpenState)) {
        let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(state) = state.as_mut() {
            change(state);
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        let state = self
            .state
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(OpenState {
            mut record,
            original_len,
            sent,
        }) = state
        else {
            return;
        };
        let sent = sent.unwrap_or_default();
        record.bytes_sent = sent.bytes;
        // Cut short, the share of the original that went is unknown: none counts as saved.
        record.original_bytes = match original_len {
            Some(original) if sent.complete => original,
            _ => sent.bytes,
        };
        record.total = self.started.elapsed();
        self.records.add(record);
    }
}
