//! Reading a link answer: its body split into frames as they arrive, and each frame
//! fed to the reassembler, shared by the answer's own outcome (`exchange.rs`) and the
//! resources pushed after it (`push.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use store::Hash;

use crate::metrics::ClientMetrics;
use link_protocol::frame::{Frame, FrameError, FrameReader};
use link_protocol::reassemble::{Outcome, ReassembleError, Reassembler};
use proxy::body::Body;

#[derive(Debug, thiserror::Error)]
pub(crate) enum FramesError {
    #[error("{0}")]
    Frame(FrameError),
    #[error("{0}")]
    Link(String),
}

/// A link response body split into frames.
pub(crate) struct Frames {
    body: Body,
    reader: FrameReader,
    ended: bool,
    metrics: Arc<ClientMetrics>,
}

impl Frames {
    pub(crate) fn new(body: Body, metrics: Arc<ClientMetrics>) -> Frames {
        Frames {
            body,
            reader: FrameReader::default(),
            ended: false,
            metrics,
        }
    }

    /// The next frame; `None` once the body ended after a whole frame.
    pub(crate) async fn next(&mut self) -> Result<Option<Frame>, FramesError> {
        loop {
            if let Some(frame) = self.reader.next_frame().map_err(FramesError::Frame)? {
                return Ok(Some(frame));
            }
            if self.ended {
                self.reader.finish().map_err(FramesError::Frame)?;
                return Ok(None);
            }
            match self.body.frame().await {
                Some(Ok(piece)) => {
                    if let Ok(data) = piece.into_data() {
                        self.metrics.link_bytes_received.inc_by(data.len() as u64);
                        self.reader.push(&data);
                    }
                }
                Some(Err(e)) => return Err(FramesError::Link(e.to_string())),
                None => self.ended = true,
            }
        }
    }
}

/// Feeds `frame` to `reassembler` and gives it back with the result. The frames that
/// end an outcome decode deltas and hash whole bodies: that work runs off the reactor.
pub(crate) async fn feed(
    mut reassembler: Box<Reassembler>,
    frame: Frame,
    held: &HashMap<Hash, Bytes>,
) -> (Result<Option<Outcome>, ReassembleError>, Box<Reassembler>) {
    if !matches!(frame, Frame::End { .. } | Frame::Confirm { .. }) {
        return (reassembler.push(frame, held), reassembler);
    }
    let held = held.clone();
    proxy::blocking::run(move || {
        let result = reassembler.push(frame, &held);
        (result, reassembler)
    })
    .await
}
