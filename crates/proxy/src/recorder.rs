//! Where each request's [`RequestRecord`] is kept open while its response is sent
//! ([`OpenRecord`]) and where it goes once complete ([`Records`]: the status board and
//! the access log). Apart from `record`, so that the record stays a value its
//! consumers import and nothing it imports imports them.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use http::{header, Response};

use crate::access_log::AccessLog;
use crate::body::{self, Body, Sent};
use crate::record::{Delivery, RequestRecord};
use crate::status::StatusBoard;

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
