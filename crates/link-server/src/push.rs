//! Push over the link: with the answer to a page request from a client proxy that
//! accepts pushes (`wirefold-push`), the page's subresources follow in the same
//! response, so the browser's requests for them are answered by the client proxy
//! without a round trip over the link (Chandranmenon & Varghese 2001, inline
//! download; `docs/link-protocol.md`, "Push over the link").
//!
//! The server promises the manifest's best-ranked same-origin entries (PROMISE, before
//! the page's HEADERS, so the client proxy knows what is coming before the browser
//! asks), fetches them through `fetch` and `remember` as any request without
//! credentials would, and after the page's outcome sends each one that is a fresh,
//! shared, whole `200`: HEADERS CONFIRM when the client announced it holds that very
//! instance (`wirefold-held`), else HEADERS FULL DATA END. The rest are withdrawn.
//! Work is bounded by `[link] push_max_resources` and `push_max_bytes`, and stops when
//! the client proxy resets the stream.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use codec::cost::NetworkPath;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode};
use store::Hash;
use tokio::sync::mpsc;
use wirefold_http::audience::audience;
use wirefold_http::cache_control::CacheControl;
use wirefold_http::caching::{reuse, Freshness, Reuse};
use wirefold_http::ContentCoding;
use wirefold_page::manifest::{Destination, ManifestEntry, Priority};

use crate::ending::{best_ending, link_fields, Ending};
use crate::{levels, FrameSender, Stopped};
use link_protocol::frame::{self, Frame, LinkCoding};
use proxy::model::{Instance, InstanceBody, RequestContext};
use proxy::pipeline::hint::is_page;
use proxy::pipeline::Pipeline;

/// Pushed resources fetched ahead of the one being sent: bounds the instances held in
/// memory at once, and the origin requests made for a client that goes away.
const FETCHED_AHEAD: usize = 2;

/// A promised URL longer than this is not pushed (nor promised): no page needs one,
/// and the PROMISE frame stays small.
const MAX_PUSHED_URL: usize = 2048;

/// What a link request says about pushes: it accepts them (`wirefold-push`), and the
/// instances it holds for the page's origin (`wirefold-held`, hash prefixes).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PushRequest {
    held: Vec<u64>,
}

impl PushRequest {
    /// `None` when the request does not accept pushes; an error names a malformed
    /// `wirefold-held`.
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<PushRequest>, String> {
        if !headers.contains_key(frame::PUSH_HEADER) {
            return Ok(None);
        }
        let mut held = Vec::new();
        for value in headers.get_all(frame::HELD_HEADER) {
            let text = value
                .to_str()
                .map_err(|_| "wirefold-held is not ASCII".to_string())?;
            for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let prefix = (item.len() == frame::HELD_PREFIX_HEX)
                    .then(|| u64::from_str_radix(item, 16).ok())
                    .flatten()
                    .ok_or_else(|| {
                        format!(
                            "wirefold-held: `{item}` is not {} hex digits",
                            frame::HELD_PREFIX_HEX
                        )
                    })?;
                held.push(prefix);
            }
        }
        if held.len() > frame::MAX_HELD {
            return Err(format!(
                "wirefold-held names {} instances; at most {} are allowed",
                held.len(),
                frame::MAX_HELD
            ));
        }
        Ok(Some(PushRequest { held }))
    }

    fn holds(&self, hash: &Hash) -> bool {
        self.held.contains(&frame::held_prefix(hash))
    }
}

/// The pushes promised with one page: their URLs in order, and their instances as
/// they are fetched (`None`: not fetched, or not a whole 200).
pub struct Promised {
    urls: Vec<String>,
    fetched: mpsc::Receiver<Option<Instance>>,
    request: PushRequest,
}

/// Plans the pushes for the page `page` answered to the request of `ctx`: `None`
/// unless `[link] push` is on, the request is a GET without `Authorization`, and the
/// page is a whole HTML `200` the same for everyone (a personalised page's manifest
/// never leaves it). The future reads the page's manifest and, when it has
/// same-origin entries to push, starts fetching them. Synchronous up to the future,
/// so no borrow of the instance (whose body is not `Sync`) lives across an await.
pub fn promise(
    p: &Arc<Pipeline>,
    ctx: &RequestContext,
    request: PushRequest,
    page: &Instance,
) -> Option<impl std::future::Future<Output = Option<Promised>> + Send + use<>> {
    let config = p.config();
    let InstanceBody::Whole { bytes, hash } = &page.body else {
        return None;
    };
    let profile = &ctx.profile;
    let public_path = config.cache.is_public_path(profile.uri.path());
    if !config.link.push
        || profile.method != Method::GET
        || profile.has_authorization
        || !is_page(page)
        || !audience(&profile.headers, &page.headers, public_path).may_derive()
    {
        return None;
    }
    let origin = format!("{}://{}", profile.uri.scheme_str()?, profile.host.as_ref()?);
    let page_url = format!("{origin}{}", profile.path_and_query());
    let (p, bytes, hash, conn) = (p.clone(), bytes.clone(), *hash, ctx.conn);
    let fields = pushed_request_fields(&profile.headers);
    Some(async move {
        let rules = config.hints.manifest_rules();
        let manifest = p
            .manifests
            .of_page(&page_url, hash, &bytes, &rules, true)
            .await;
        // As after a page served on the normal path: its stylesheets are read in the
        // background, so later loads push their imports and fonts too. This load does
        // not wait for them (each is a fetch, one after another, for up to 16): it
        // pushes what the page itself names.
        p.read_stylesheets(&config.hints, &page_url, conn, &manifest);
        let urls = pushed_urls(
            &manifest.entries,
            &origin,
            &page_url,
            config.link.push_max_resources,
        );
        if urls.is_empty() {
            return None;
        }
        let (tx, fetched) = mpsc::channel(FETCHED_AHEAD);
        let fetching = urls.clone();
        tokio::spawn(async move {
            for url in fetching {
                let instance = p
                    .fetch_without_credentials(&url, fields.clone(), conn)
                    .await;
                // The exchange stopped pushing (the client proxy went away): stop too.
                if tx.send(instance).await.is_err() {
                    return;
                }
            }
        });
        Some(Promised {
            urls,
            fetched,
            request,
        })
    })
}

/// The entries to push: the manifest's best-ranked ones of the page's own origin
/// that a browser would fetch at once (no frames, nothing speculative), not the page
/// itself, each once, at most `max`.
fn pushed_urls(entries: &[ManifestEntry], origin: &str, page_url: &str, max: usize) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    for entry in entries {
        if urls.len() == max {
            break;
        }
        let own_origin = entry
            .url
            .strip_prefix(origin)
            .is_some_and(|path| path.starts_with('/'));
        let wanted =
            entry.destination != Destination::Document && entry.priority != Priority::Speculative;
        if own_origin
            && wanted
            && entry.url != page_url
            && entry.url.len() <= MAX_PUSHED_URL
            && entry.url.parse::<http::Uri>().is_ok()
            && !urls.contains(&entry.url)
        {
            urls.push(entry.url.clone());
        }
    }
    urls
}

/// The fields a pushed request takes from the page's: those that choose a
/// representation, never who the client is (a pushed instance is for anyone).
fn pushed_request_fields(page_request: &HeaderMap) -> HeaderMap {
    let mut fields = HeaderMap::new();
    for name in [header::ACCEPT_LANGUAGE, header::USER_AGENT] {
        if let Some(value) = page_request.get(&name) {
            fields.insert(name, value.clone());
        }
    }
    fields.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
    fields
}

impl Promised {
    /// The PROMISE frame.
    pub fn frame(&self) -> Frame {
        Frame::Promise {
            urls: self.urls.clone(),
        }
    }

    /// Sends each promised resource that may be pushed, in order, within
    /// `push_max_bytes`; returns when all are sent or withdrawn, or the client proxy
    /// stopped taking frames (it reset the stream: nothing more is fetched).
    pub async fn send(mut self, p: &Pipeline, tx: &FrameSender, link: NetworkPath) {
        let config = p.config();
        let mut budget = config.link.push_max_bytes;
        let public_path = |url: &str| {
            url.parse::<http::Uri>()
                .is_ok_and(|uri| config.cache.is_public_path(uri.path()))
        };
        for (index, url) in self.urls.iter().enumerate() {
            let Some(fetched) = self.fetched.recv().await else {
                break;
            };
            let Some(pushed) = fetched.and_then(|instance| pushable(instance, public_path(url)))
            else {
                p.metrics.link_push("withdrawn");
                continue;
            };
            let content_type = crate::ending::content_type(&pushed.fields);
            let length = pushed.bytes.len() as u64;
            let sent = if self.request.holds(&pushed.hash) {
                push_confirm(tx, index, pushed.fields, pushed.hash)
                    .await
                    .map(|()| ("held", 0))
            } else if length <= budget {
                budget -= length;
                push_full(tx, index, pushed, link)
                    .await
                    .map(|sent| ("full", sent))
            } else {
                p.metrics.link_push("withdrawn");
                continue;
            };
            match sent {
                Ok((result, sent)) => {
                    p.metrics.link_push(result);
                    p.metrics.record_body(
                        format!("link-push-{result}"),
                        content_type,
                        length,
                        sent,
                    );
                }
                Err(Stopped::Gone) => {
                    tracing::debug!("client proxy stopped taking pushes");
                    return;
                }
                // A head too large for a frame: nothing of it went out.
                Err(Stopped::Oversized(_)) => p.metrics.link_push("withdrawn"),
            }
        }
    }
}

/// A fetched instance fit to push.
struct Pushable {
    /// HEADERS' fields.
    fields: HeaderMap,
    bytes: Bytes,
    hash: Hash,
    /// The origin's own coding of `bytes`, when it came coded.
    origin_coded: Option<(ContentCoding, Bytes)>,
}

/// `instance` when it is fit to push: fresh now (a client proxy could not answer from
/// it otherwise), the same for everyone (not `private`, no `Set-Cookie`, not
/// `no-store`), and not varying on anything the pushed request lacks (`Vary` beyond
/// `Accept-Encoding`, whose codings are the link's business).
fn pushable(instance: Instance, public_path: bool) -> Option<Pushable> {
    let InstanceBody::Whole { bytes, hash } = &instance.body else {
        return None;
    };
    let (bytes, hash) = (bytes.clone(), *hash);
    let fields = link_fields(&instance);
    let cache_control = CacheControl::from_headers(&fields);
    let now = SystemTime::now();
    let fresh = reuse(
        &Freshness::new(StatusCode::OK, &fields, now, now),
        &cache_control,
        &CacheControl::default(),
        now,
    ) == Reuse::Fresh;
    let shared =
        !cache_control.no_store && audience(&HeaderMap::new(), &fields, public_path).may_derive();
    let unvaried = proxy::cache::secondary_key(&fields, &HeaderMap::new()).as_deref() == Some("");
    (instance.reusable && fresh && shared && unvaried).then_some(Pushable {
        fields,
        bytes,
        hash,
        origin_coded: instance.origin_coded,
    })
}

/// PUSH HEADERS CONFIRM: the client holds the instance; it gets the fields (and so
/// the freshness) it is now current with.
async fn push_confirm(
    tx: &FrameSender,
    index: usize,
    fields: HeaderMap,
    hash: Hash,
) -> Result<(), Stopped> {
    let frames = [
        push_frame(index)?,
        Frame::Headers {
            status: StatusCode::OK,
            fields,
        }
        .encode()?,
        Frame::Confirm { hash }.encode()?,
    ];
    tx.send_together(frames).await?;
    Ok(())
}

/// PUSH HEADERS FULL DATA END, coded as the link affords (the origin's own br or zstd
/// as they came); the coded bytes sent.
async fn push_full(
    tx: &FrameSender,
    index: usize,
    pushed: Pushable,
    link: NetworkPath,
) -> Result<u64, Stopped> {
    let Pushable {
        fields,
        bytes,
        hash,
        origin_coded,
    } = pushed;
    let levels = levels::levels(link, bytes.len() as u64);
    let target = bytes.clone();
    let best =
        delta::blocking::run(move || best_ending(&target, origin_coded, None, None, levels)).await;
    let Ending::Full { coding, coded } = best.ending else {
        unreachable!("with no base and no stale stream, only the full instance is offered")
    };
    let head = [
        push_frame(index)?,
        Frame::Headers {
            status: StatusCode::OK,
            fields,
        }
        .encode()?,
        Frame::Full {
            coding: LinkCoding::Coded(coding),
        }
        .encode()?,
    ];
    let end = Frame::End {
        hash,
        length: bytes.len() as u64,
    }
    .encode()?;
    let frames = head
        .into_iter()
        .chain(frame::data_frames(&coded))
        .chain([end]);
    tx.send_together(frames).await?;
    Ok(coded.len() as u64)
}

fn push_frame(index: usize) -> Result<Bytes, frame::OversizedFrame> {
    // At most `MAX_PROMISED` URLs are promised: an index always fits.
    let index = u16::try_from(index).unwrap_or(u16::MAX);
    Frame::Push { index }.encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(url: &str, destination: Destination, priority: Priority) -> ManifestEntry {
        ManifestEntry::new(url, destination, priority)
    }

    #[test]
    fn pushed_urls_are_the_pages_own_origin_ranked_bounded_and_once() {
        let origin = "http://a.test";
        let mut entries = vec![
            entry(
                "http://a.test/s.css",
                Destination::Style,
                Priority::RenderBlocking,
            ),
            entry(
                "http://b.test/x.css",
                Destination::Style,
                Priority::RenderBlocking,
            ),
            entry(
                "http://a.test.evil/y.js",
                Destination::Script,
                Priority::RenderBlocking,
            ),
            entry(
                "http://a.test/frame.html",
                Destination::Document,
                Priority::Later,
            ),
            entry(
                "http://a.test/lazy.png",
                Destination::Image,
                Priority::Speculative,
            ),
            entry(
                "http://a.test/page",
                Destination::Image,
                Priority::EagerImage,
            ),
            entry(
                "http://a.test/s.css",
                Destination::Style,
                Priority::RenderBlocking,
            ),
            entry(
                &format!("http://a.test/{}", "l".repeat(3000)),
                Destination::Image,
                Priority::EagerImage,
            ),
            entry(
                "http://a.test/i.png",
                Destination::Image,
                Priority::EagerImage,
            ),
        ];
        for i in 0..5000 {
            entries.push(entry(
                &format!("http://a.test/{i}.png"),
                Destination::Image,
                Priority::EagerImage,
            ));
        }
        let urls = pushed_urls(&entries, origin, "http://a.test/page", 4);
        assert_eq!(
            urls,
            [
                "http://a.test/s.css",
                "http://a.test/i.png",
                "http://a.test/0.png",
                "http://a.test/1.png"
            ]
        );
    }

    #[test]
    fn held_announcements_are_parsed_and_bounded() {
        let mut headers = HeaderMap::new();
        assert_eq!(PushRequest::from_headers(&headers), Ok(None));
        headers.insert(frame::PUSH_HEADER, HeaderValue::from_static("1"));
        let hash = Hash::of(b"held");
        let prefix = &hash.to_hex()[..frame::HELD_PREFIX_HEX];
        headers.insert(frame::HELD_HEADER, HeaderValue::from_str(prefix).unwrap());
        let request = PushRequest::from_headers(&headers).unwrap().unwrap();
        assert!(request.holds(&hash));
        assert!(!request.holds(&Hash::of(b"other")));
        headers.insert(frame::HELD_HEADER, HeaderValue::from_static("abc"));
        assert!(PushRequest::from_headers(&headers)
            .unwrap_err()
            .contains("abc"));
        let many = vec![prefix; frame::MAX_HELD + 1].join(",");
        headers.insert(frame::HELD_HEADER, HeaderValue::from_str(&many).unwrap());
        assert!(PushRequest::from_headers(&headers)
            .unwrap_err()
            .contains("at most"));
    }
}
