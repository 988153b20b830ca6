//! Resources the server proxy pushes with a page (`docs/link-protocol.md`, "Push over
//! the link"): the PROMISE that names them, checked against the page's origin; the
//! browser requests that wait for a promised resource instead of crossing the link
//! for it; and the pushed responses that follow the page's outcome, each verified
//! like any answer and kept as an instance.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, Uri};
use store::Hash;
use tokio::sync::watch;

use crate::frames::{feed, Frames};
use crate::instances::{may_keep, Instances, Received};
use crate::metrics::{ClientMetrics, Pushed};
use link_protocol::frame::{Frame, MAX_PROMISED};
use link_protocol::reassemble::{Current, Delivery, Outcome, Reassembler};

/// The URLs promised by pushes under way, each with what its waiters wait on.
#[derive(Default)]
pub struct Pushes {
    promised: Mutex<HashMap<String, watch::Receiver<()>>>,
}

impl Pushes {
    /// The promised URLs. Each use is one lookup, insertion or removal, so a panic
    /// elsewhere cannot leave the map half-changed: a poisoned lock is taken over.
    fn promised(&self) -> MutexGuard<'_, HashMap<String, watch::Receiver<()>>> {
        self.promised.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Checks a PROMISE received with the answer to `page` and registers its URLs:
    /// `None` (nothing registered) unless every URL is an absolute URL of the page's
    /// own scheme and authority, and there are at most [`MAX_PROMISED`].
    pub fn promise(self: &Arc<Self>, page: &Uri, urls: &[String]) -> Option<Promised> {
        if urls.len() > MAX_PROMISED {
            return None;
        }
        let mut promised = Vec::with_capacity(urls.len());
        for url in urls {
            let uri: Uri = url.parse().ok()?;
            let same_origin = uri.scheme().is_some()
                && uri.scheme() == page.scheme()
                && uri.authority().is_some()
                && uri.authority() == page.authority();
            if !same_origin {
                return None;
            }
            // The key a browser's request for it is known by (`Uri`'s own form).
            promised.push(uri.to_string());
        }
        let mut waiting = self.promised();
        let pending = promised
            .iter()
            .map(|url| {
                // A URL another push already promised is waited for there.
                if waiting.contains_key(url) {
                    return None;
                }
                let (sender, receiver) = watch::channel(());
                waiting.insert(url.clone(), receiver);
                Some(sender)
            })
            .collect();
        drop(waiting);
        Some(Promised {
            pushes: self.clone(),
            urls: promised,
            pending,
            next: 0,
        })
    }

    /// Waits, at most `bound`, while a push of `url` is promised and not yet kept
    /// or withdrawn: the pushed instance is then held, and no request crosses the
    /// link for what is already on its way.
    pub async fn wait_for(&self, url: &str, bound: Duration) {
        let receiver = self.promised().get(url).cloned();
        if let Some(mut receiver) = receiver {
            // Ends when the push's sender is dropped: it was kept or withdrawn.
            let _ = tokio::time::timeout(bound, receiver.changed()).await;
        }
    }
}

/// One page's promised pushes: released one by one as they end (dropping it
/// releases the rest, counted as withdrawn).
pub struct Promised {
    pushes: Arc<Pushes>,
    urls: Vec<String>,
    /// By promise index: the sender its waiters wait on, until released.
    pending: Vec<Option<watch::Sender<()>>>,
    /// The lowest index a PUSH may name next.
    next: usize,
}

impl Promised {
    /// Starts the push of `index`: the URL, or `None` when the index is not after
    /// the last one or out of range. The promises skipped are withdrawn.
    fn begin(&mut self, index: usize, metrics: &ClientMetrics) -> Option<String> {
        if index < self.next || index >= self.urls.len() {
            return None;
        }
        for skipped in self.next..index {
            self.release(skipped);
            metrics.pushed(Pushed::Withdrawn, 1);
        }
        self.next = index + 1;
        Some(self.urls[index].clone())
    }

    /// Wakes the requests waiting for the push of `index`.
    fn release(&mut self, index: usize) {
        let Some(sender) = self.pending.get_mut(index).and_then(Option::take) else {
            return;
        };
        let mut waiting = self.pushes.promised();
        if waiting
            .get(&self.urls[index])
            .is_some_and(|receiver| receiver.same_channel(&sender.subscribe()))
        {
            waiting.remove(&self.urls[index]);
        }
    }

    /// The promises not pushed (yet).
    fn unended(&self) -> usize {
        self.urls.len() - self.next
    }
}

impl Drop for Promised {
    fn drop(&mut self) {
        for index in 0..self.pending.len() {
            self.release(index);
        }
    }
}

/// What receiving pushes needs of the client proxy.
pub struct Receiver {
    pub instances: Instances,
    pub metrics: Arc<ClientMetrics>,
    /// `max_body_bytes`: a pushed instance is held in memory whole, so it is bounded.
    pub limit: usize,
}

impl Receiver {
    /// Reads the pushed responses that follow a page's outcome until the link
    /// response ends. Anything out of grammar, a failed verification or the link
    /// failing ends the reading (the stream is dropped, so the server stops); what is
    /// still promised is withdrawn and its browser requests cross the link.
    pub async fn receive(self, mut promised: Promised, mut frames: Frames) {
        loop {
            let index = match frames.next().await {
                Ok(Some(Frame::Push { index })) => usize::from(index),
                Ok(None) => break,
                Ok(Some(other)) => {
                    self.fail(&format!("a {} frame where a PUSH belongs", other.name()));
                    break;
                }
                Err(e) => {
                    self.fail(&e.to_string());
                    break;
                }
            };
            let Some(url) = promised.begin(index, &self.metrics) else {
                self.fail(&format!(
                    "PUSH of promise {index}, out of order or never promised"
                ));
                break;
            };
            match self.receive_one(&url, &mut frames).await {
                Ok(how) => {
                    self.metrics.pushed(how, 1);
                    promised.release(index);
                }
                Err(reason) => {
                    self.fail(&format!("{url}: {reason}"));
                    break;
                }
            }
        }
        self.metrics.pushed(Pushed::Withdrawn, promised.unended());
    }

    fn fail(&self, reason: &str) {
        self.metrics.pushed(Pushed::Failed, 1);
        tracing::warn!(%reason, "dropped the server proxy's pushes");
    }

    /// One pushed response, from the frame after PUSH to its outcome.
    async fn receive_one(&self, url: &str, frames: &mut Frames) -> Result<Pushed, String> {
        let mut reassembler = Box::new(Reassembler::new(self.limit));
        let mut held: HashMap<Hash, Bytes> = HashMap::new();
        let request_time = SystemTime::now();
        loop {
            let frame = frames
                .next()
                .await
                .map_err(|e| e.to_string())?
                .ok_or("the link response ended inside a pushed response")?;
            // A pushed response is HEADERS, then CONFIRM, a FULL body or ERROR.
            if matches!(
                frame,
                Frame::StaleBegin { .. }
                    | Frame::StaleData(_)
                    | Frame::Delta { .. }
                    | Frame::Promise { .. }
                    | Frame::Push { .. }
            ) {
                return Err(format!("a {} frame in a pushed response", frame.name()));
            }
            // CONFIRM may name only an instance held for this very URL.
            if let Frame::Confirm { hash } = frame {
                let (instances, url) = (self.instances.clone(), url.to_string());
                let body = tokio::task::spawn_blocking(move || {
                    instances
                        .holds(&url, &hash)
                        .then(|| instances.body(&hash))
                        .flatten()
                })
                .await
                .ok()
                .flatten();
                if let Some(body) = body {
                    held.insert(hash, body);
                }
            }
            let result;
            (result, reassembler) = feed(reassembler, frame, &held).await;
            match result.map_err(|e| e.to_string())? {
                None if reassembler.in_full_body() && reassembler.unverified_len() > self.limit => {
                    return Err(format!("a pushed instance over {} bytes", self.limit));
                }
                None => {}
                Some(Outcome::Error { .. }) => return Ok(Pushed::Withdrawn),
                Some(Outcome::Current(current)) => {
                    return Ok(self.keep(url, current, request_time).await)
                }
            }
        }
    }

    /// Keeps a verified pushed instance when it is fit for anyone: a `200` a GET
    /// without credentials may keep (`instances::may_keep`), varying on nothing a
    /// browser's request could change (the pushed request had none of its fields).
    async fn keep(&self, url: &str, current: Current, request_time: SystemTime) -> Pushed {
        let none = HeaderMap::new();
        let secondary_key = proxy::cache::secondary_key(&current.fields, &none);
        if current.status != StatusCode::OK
            || !may_keep(&Method::GET, &none, current.status, &current.fields)
            || secondary_key.as_deref() != Some("")
        {
            return Pushed::Refused;
        }
        let how = match current.delivery {
            Delivery::Confirm => Pushed::Refreshed,
            Delivery::Full | Delivery::Delta => Pushed::Kept,
        };
        let (instances, url) = (self.instances.clone(), url.to_string());
        let length = current.body.len() as u64;
        let kept = tokio::task::spawn_blocking(move || {
            let already_held = instances.holds(&url, &current.hash);
            let kept = instances.keep(Received {
                url: &url,
                body: &current.body,
                fields: &current.fields,
                secondary_key: String::new(),
                request_time,
                response_time: SystemTime::now(),
            });
            (already_held, kept)
        })
        .await;
        let Ok((already_held, kept)) = kept else {
            return Pushed::Refused;
        };
        if let Err(e) = kept {
            tracing::warn!(error = %e, "could not keep a pushed instance");
            return Pushed::Refused;
        }
        if how == Pushed::Kept {
            self.metrics.push_bytes.inc_by(length);
            if already_held {
                self.metrics.push_bytes_already_held.inc_by(length);
            }
        }
        how
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(list: &[&str]) -> Vec<String> {
        list.iter().map(|u| u.to_string()).collect()
    }

    #[test]
    fn a_promise_names_only_the_pages_own_origin() {
        let pushes = Arc::new(Pushes::default());
        let page: Uri = "http://a.test:8080/page".parse().unwrap();
        for bad in [
            "http://b.test:8080/x.css",
            "https://a.test:8080/x.css",
            "http://a.test/x.css",
            "/x.css",
            "not a url",
        ] {
            assert!(
                pushes
                    .promise(&page, &urls(&["http://a.test:8080/ok.css", bad]))
                    .is_none(),
                "{bad}"
            );
        }
        assert!(
            pushes.promised().is_empty(),
            "a refused promise registers nothing"
        );
        let many = vec!["http://a.test:8080/x.css".to_string(); MAX_PROMISED + 1];
        assert!(pushes.promise(&page, &many).is_none());
        let promised = pushes
            .promise(&page, &urls(&["http://a.test:8080/ok.css"]))
            .expect("same origin");
        assert_eq!(promised.urls, ["http://a.test:8080/ok.css"]);
    }

    #[tokio::test]
    async fn waiters_wake_when_a_push_ends_or_the_promise_is_dropped() {
        let pushes = Arc::new(Pushes::default());
        let page: Uri = "http://a.test/page".parse().unwrap();
        let metrics = ClientMetrics::new();
        let mut promised = pushes
            .promise(
                &page,
                &urls(&[
                    "http://a.test/1.css",
                    "http://a.test/2.js",
                    "http://a.test/3.png",
                ]),
            )
            .unwrap();
        let long = Duration::from_secs(3600);
        assert_eq!(
            promised.begin(1, &metrics).as_deref(),
            Some("http://a.test/2.js")
        );
        // The skipped first promise is withdrawn: its waiter goes at once.
        pushes.wait_for("http://a.test/1.css", long).await;
        assert!(promised.begin(1, &metrics).is_none(), "indexes only grow");
        promised.release(1);
        pushes.wait_for("http://a.test/2.js", long).await;
        drop(promised);
        pushes.wait_for("http://a.test/3.png", long).await;
        assert!(pushes.promised().is_empty());
    }
}
