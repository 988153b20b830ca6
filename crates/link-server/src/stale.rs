//! The stale stream: an instance the server proxy holds and the client proxy lacks,
//! sent in zstd chunks flushed at frame boundaries while the origin is consulted.
//! It can stop after any chunk; the client then holds a known prefix.

use bytes::Bytes;
use codec::Encoder;
use delta::blocking;
use store::Hash;
use tokio::task::JoinHandle;
use wirefold_http::ContentCoding;

use crate::FrameSender;
use crate::Stopped;
use link_protocol::frame::{Frame, LinkCoding};

pub struct StaleStream {
    pub hash: Hash,
    pub bytes: Bytes,
    chunk: usize,
    coding: ContentCoding,
    begun: bool,
    /// Decoded bytes handed to the encoder.
    encoded_to: usize,
    encoder: Option<Encoder>,
    job: Option<JoinHandle<(Option<Encoder>, Vec<u8>)>>,
    /// A compressed chunk not yet sent, and the decoded offset it ends at.
    pending: Option<(Bytes, usize)>,
    /// Decoded bytes whose frames are sent (the client will hold this prefix).
    pub sent: usize,
    /// Coded bytes sent.
    pub sent_coded: usize,
}

impl StaleStream {
    pub fn new(
        hash: Hash,
        bytes: Bytes,
        chunk: usize,
        (coding, level): (ContentCoding, u32),
    ) -> StaleStream {
        StaleStream {
            hash,
            bytes,
            chunk,
            coding,
            begun: false,
            encoded_to: 0,
            encoder: Some(Encoder::new(coding, level)),
            job: None,
            pending: None,
            sent: 0,
            sent_coded: 0,
        }
    }

    /// Every frame sent.
    pub fn complete(&self) -> bool {
        self.begun && self.sent == self.bytes.len() && self.pending.is_none()
    }

    /// Sends the next frame (STALE_BEGIN, then one chunk per call; nothing once every
    /// frame is sent). Cancel safe: a chunk compressed but not sent when the future is
    /// dropped is kept for the next call, so the encoder and the client never disagree
    /// on what was sent.
    pub async fn send_next(&mut self, tx: &FrameSender) -> Result<(), Stopped> {
        if !self.begun {
            let begin = Frame::StaleBegin {
                hash: self.hash,
                length: self.bytes.len() as u64,
                coding: LinkCoding::Coded(self.coding),
            };
            tx.send(begin.encode()?).await?;
            self.begun = true;
            return Ok(());
        }
        let (frame, end) = match &self.pending {
            Some(pending) => pending.clone(),
            None => {
                let job = match &mut self.job {
                    Some(job) => job,
                    None => {
                        // The encoder is gone once the last chunk is: all of it was sent.
                        let Some(mut encoder) = self.encoder.take() else {
                            return Ok(());
                        };
                        let end = (self.encoded_to + self.chunk).min(self.bytes.len());
                        let piece = self.bytes.slice(self.encoded_to..end);
                        let last = end == self.bytes.len();
                        self.encoded_to = end;
                        self.job.insert(tokio::task::spawn_blocking(move || {
                            encoder.write(&piece);
                            if last {
                                (None, encoder.finish())
                            } else {
                                encoder.flush();
                                let out = encoder.take_output();
                                (Some(encoder), out)
                            }
                        }))
                    }
                };
                let (encoder, out) = blocking::join(job).await;
                self.job = None;
                self.encoder = encoder;
                let chunk = (Frame::StaleData(out.into()).encode()?, self.encoded_to);
                self.pending.insert(chunk).clone()
            }
        };
        let permit = tx.reserve().await?;
        self.pending = None;
        self.sent_coded += frame.len();
        self.sent = end;
        permit.send(Ok(frame));
        Ok(())
    }

    /// Sends what remains.
    pub async fn finish(&mut self, tx: &FrameSender) -> Result<(), Stopped> {
        while !self.complete() {
            self.send_next(tx).await?;
        }
        Ok(())
    }

    /// Coded bytes still to send if the stream goes on, estimated from the ratio so
    /// far (or `typical_ratio` before any chunk).
    pub fn remaining_coded(&self, typical_ratio: f64) -> u64 {
        let ratio = if self.sent > 0 {
            self.sent_coded as f64 / self.sent as f64
        } else {
            typical_ratio
        };
        ((self.bytes.len() - self.sent) as f64 * ratio) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use link_protocol::frame::FrameReader;

    async fn received(
        rx: &mut tokio::sync::mpsc::Receiver<Result<Bytes, proxy::body::BoxError>>,
    ) -> Vec<Frame> {
        let mut reader = FrameReader::default();
        let mut frames = Vec::new();
        while let Ok(item) = rx.try_recv() {
            reader.push(&item.unwrap());
            while let Some(f) = reader.next_frame().unwrap() {
                frames.push(f);
            }
        }
        frames
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_prefix_of_chunks_decodes_and_a_dropped_send_loses_nothing() {
        let page: Bytes = (0..100_000u32)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<_>>()
            .into();
        let (tx, mut rx) = tokio::sync::mpsc::channel(64);
        let tx = FrameSender::new(tx, std::time::Duration::from_secs(60));
        let mut stale = StaleStream::new(
            Hash::of(&page),
            page.clone(),
            16 * 1024,
            (ContentCoding::Br, 5),
        );
        stale.send_next(&tx).await.unwrap();
        stale.send_next(&tx).await.unwrap();
        // A send interrupted at once (as when the origin answers) is resumed intact.
        let _ = tokio::time::timeout(std::time::Duration::ZERO, stale.send_next(&tx)).await;
        stale.send_next(&tx).await.unwrap();
        let frames = received(&mut rx).await;
        let mut decoder = codec::Decoder::new(ContentCoding::Br, page.len());
        let mut decoded = Vec::new();
        for f in &frames[1..] {
            let Frame::StaleData(d) = f else {
                panic!("{f:?}")
            };
            decoder.write(d).unwrap();
            decoded.extend(decoder.take_output());
        }
        assert_eq!(
            decoded.len(),
            stale.sent,
            "the client holds exactly what was counted sent"
        );
        assert_eq!(&decoded[..], &page[..stale.sent]);

        stale.finish(&tx).await.unwrap();
        assert!(stale.complete());
        for f in received(&mut rx).await {
            let Frame::StaleData(d) = f else {
                panic!("{f:?}")
            };
            decoder.write(&d).unwrap();
        }
        decoded.extend(decoder.finish().unwrap());
        assert_eq!(decoded, page);
        assert_eq!(stale.remaining_coded(0.2), 0);
    }
}
