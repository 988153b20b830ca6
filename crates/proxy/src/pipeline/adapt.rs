//! Stage 4, adapt: picks the fidelity variant for this client and load (Seshan,
//! Stemm & Katz's transparent content negotiation, with the fields browsers send
//! today).
//!
//! An original that may have variants (a JPEG, PNG, GIF or WebP image; an HTML,
//! CSS or JavaScript text in a build with the `minify` feature) is queued for them on
//! first sight and served whole meanwhile: no response waits for an encoder. A
//! minified text is offered only to a client for whom it saves
//! `fidelity.text_min_saving` after the compression that client gets, and the choice
//! compares sizes after that compression (what the client pays). Once its ladder exists, each response carries
//! `Alternates` (RFC 2295), and the representation is chosen by
//! [`fidelity::choice::choose`]: the largest one whose estimated transfer time over
//! the client's link (Client Hints `Downlink`/`RTT`/`ECT`, else the passive estimate
//! of its network) meets `fidelity.target_time_ms`, within the `Save-Data` share and
//! the egress controller's maximum fraction. A chosen variant goes out with
//! `TCN: choice`, `Content-Location` (its own immutable URL under
//! [`VARIANT_PREFIX`]) and `Vary` naming every field that chose it;
//! `Negotiate: vlist` gets `300 Multiple Choices` with the list. A prepared answer
//! ([`super::prepared`]) keeps its choice, which each repeat makes again.

use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fidelity::choice::{choose, Decision, Inputs, LinkEstimate, PageWeight, Reason};
use fidelity::FidelityConfig;
use http::header::{self, HeaderValue};
use http::{HeaderMap, StatusCode};
use store::Hash;
use wirefold_http::cache_control::CacheControl;
use wirefold_http::client_hints::{DOWNLINK, ECT, RTT, SAVE_DATA, SEC_CH_PREFERS_REDUCED_DATA};
use wirefold_http::fidelity::{
    accepts_image, alternates, wants_variant_list, ImageFormat, TextKind, VariantDescription,
    ACCEPT_CH, ALTERNATES, CRITICAL_CH, TCN,
};
use wirefold_http::vary::add_field;
use wirefold_http::{AcceptEncoding, ContentCoding};

use crate::config::CompressionConfig;
use crate::manifests::{Manifests, PageManifest};
use crate::model::{
    content_etag, ConnInfo, Instance, InstanceBody, LinkRead, Provenance, Rechoose, RequestContext,
};
use crate::page_weight::referring_page;
use crate::record::LinkSample;
use crate::variants::{Ladder, OriginalKind, Rung, Variants, VARIANT_PREFIX};

/// The hints a page asks the browser for (`Accept-CH`): what the choice reads.
const LINK_HINTS: &str = "ECT, RTT, Downlink, Save-Data";

/// Runs on every instance, after `remember` (what is stored is always the full
/// instance): may replace a `Whole` body with a smaller variant of the same content
/// (never other content), and adds `Accept-CH` to pages and the negotiation fields
/// to negotiable responses. Queues first-seen originals for their variants. Passes
/// everything else through untouched, as it does everything when `fidelity.enabled`
/// is off. Never fails: a variant that cannot be read is replaced by the original.
///
/// `compression` says which coding a client gets for a text body (the `cached`
/// list of its type's profile, negotiated as `encode` does).
///
/// `manifests` find the page a subresource belongs to (its `Referer`), so that the
/// choice weighs the whole page against the target time, not the object alone.
pub async fn adapt(
    variants: &Arc<Variants>,
    manifests: &Arc<Manifests>,
    config: &FidelityConfig,
    compression: &CompressionConfig,
    ctx: &RequestContext,
    mut instance: Instance,
) -> Instance {
    if !config.enabled {
        return instance;
    }
    let Some(content_type) = instance
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
    else {
        return instance;
    };
    let kind = OriginalKind::of(&content_type);
    let request = &ctx.profile;
    let page = kind == Some(OriginalKind::Text(TextKind::Html));
    // A page, or a subresource naming its page: what page weights are made of.
    let referer = referring_page(&request.headers);
    let own_url = (page || referer.is_some()).then(|| ctx.url());
    if let Some(url) = &own_url {
        remember_size(variants, ctx, &instance, kind, url);
    }
    let Some(kind) = kind else {
        return instance;
    };
    if page && instance.status == StatusCode::OK {
        instance
            .headers
            .insert(ACCEPT_CH, HeaderValue::from_static(LINK_HINTS));
    }
    if let OriginalKind::Text(_) = kind {
        if !fidelity::text::MINIFIERS {
            // A build without the `minify` feature: queuing text would only write
            // empty ladders.
            return instance;
        }
    }
    let negotiable = request.is_get_or_head()
        && instance.status == StatusCode::OK
        && instance.reusable
        && !request.wants_range
        && !CacheControl::from_headers(&instance.headers).no_transform;
    let InstanceBody::Whole { bytes, hash } = &instance.body else {
        return instance;
    };
    if !negotiable {
        return instance;
    }
    let (original, original_len) = (*hash, bytes.len() as u64);
    let codings: &[(ContentCoding, u32)] = match kind {
        OriginalKind::Text(_) => compression
            .profile_for(&content_type)
            .filter(|_| compression.enabled)
            .map_or(&[], |p| p.cached.0.as_slice()),
        OriginalKind::Image(_) => &[],
    };
    let ladder = variants.ladder(&original).await;
    if ladder.as_ref().is_none_or(|l| !l.later.is_empty()) {
        // A first sight, or a ladder whose later pass (AVIF) is due: served whole, or
        // from the rungs there are, meanwhile. Asked again until the ladder is made
        // (the queue may be full), so not prepared.
        ctx.repeat.rule_out();
        let so_far = ladder.clone();
        variants.schedule(
            original,
            bytes.clone(),
            &content_type,
            config,
            codings,
            so_far,
        );
    }
    let Some(ladder) = ladder else {
        return instance;
    };
    if ladder.rungs.is_empty() {
        return instance;
    }
    if page {
        // The page's own choice reads these: a browser that has not sent them
        // retries the navigation once with them.
        instance
            .headers
            .insert(CRITICAL_CH, HeaderValue::from_static(LINK_HINTS));
    }
    let own_format = match kind {
        OriginalKind::Image(format) => Some(format),
        OriginalKind::Text(_) => None,
    };
    let path = request.uri.path();
    let list = variant_list(path, &instance.headers, original, original_len, &ladder);
    if wants_variant_list(&request.headers) {
        let urls =
            std::iter::once(path.to_owned()).chain(ladder.rungs.iter().map(|r| r.url(&original)));
        return list_response(instance, list, urls);
    }
    if let Ok(value) = HeaderValue::from_str(&list) {
        instance.headers.insert(ALTERNATES, value);
    }
    if own_format.is_some() {
        add_field(&mut instance.headers, "accept");
    } else {
        // A minified text is offered by the coding the client gets.
        add_field(&mut instance.headers, "accept-encoding");
    }
    // The request fields a choice reads besides `Accept`.
    for field in [SAVE_DATA, SEC_CH_PREFERS_REDUCED_DATA, ECT, RTT, DOWNLINK] {
        add_field(&mut instance.headers, field.as_str());
    }

    let coding = client_coding(
        codings,
        &request.accept_encoding,
        original_len >= compression.min_size as u64,
    );
    let usable = usable_rungs(
        &ladder,
        own_format,
        &request.headers,
        coding,
        config.text_min_saving,
    );
    // What the client pays: bytes after its coding for text, raw for images.
    let lengths: Vec<u64> =
        std::iter::once(ladder.original_sizes.get(coding).unwrap_or(original_len))
            .chain(usable.iter().map(|r| r.sizes.get(coding).unwrap_or(r.len)))
            .collect();
    let hints = &request.client_hints;
    let page = match (referer, &own_url) {
        (Some(page_url), Some(url)) => Some(PageOf {
            manifest: manifests.latest(page_url).await,
            page_url: page_url.into(),
            url: url.clone(),
        }),
        _ => None,
    };
    let choice = Choice {
        variants: variants.clone(),
        manifests: manifests.clone(),
        lengths,
        save_data: hints.save_data || hints.prefers_reduced_data,
        from_hints: LinkEstimate::from_hints(hints),
        page,
        target_time: config.target_time(),
        save_data_fraction: config.save_data_fraction,
    };
    let (decision, passive) = choice.make(&ctx.conn, &ctx.link);
    let chosen = decision.chosen.checked_sub(1).and_then(|i| usable.get(i));
    tracing::debug!(
        resource = %ctx.resource,
        save_data = choice.save_data,
        ect = ?hints.ect,
        rtt_ms = ?hints.rtt_ms,
        downlink_kbps = ?hints.downlink_kbps,
        passive = ?passive,
        original_len,
        chosen_len = choice.lengths[decision.chosen],
        reason = decision.reason.label(),
        "fidelity decision"
    );
    let body = match chosen {
        Some(rung) => variants.body(rung).await,
        None => None,
    };
    let counted = match (chosen, &body) {
        (Some(_), Some(_)) => Counted {
            reason: decision.reason.label(),
            saved: choice.lengths[0].saturating_sub(choice.lengths[decision.chosen]),
        },
        // Evicted since the ladder was read, or unreadable: the original is never
        // wrong, but not the answer to repeat (a read that failed may not again).
        (Some(_), None) => {
            ctx.repeat.rule_out();
            Counted {
                reason: "original",
                saved: 0,
            }
        }
        (None, _) => Counted {
            reason: decision.reason.label(),
            saved: 0,
        },
    };
    variants.count_decision(counted.reason, counted.saved);
    // A choice no request field explains (the network's passive estimate, the
    // server's egress) must not be reused by a shared cache for other clients.
    let chosen_by_server = match decision.reason {
        Reason::SaveData => false,
        Reason::SlowLink => choice.from_hints.is_none(),
        Reason::Egress | Reason::Original => true,
    };
    ctx.repeat.rechoose(Arc::new(ChoiceMade {
        choice,
        decision,
        counted,
    }));
    let (Some(rung), Some(body)) = (chosen, body) else {
        return instance;
    };
    become_variant(&mut instance, original, rung, body, chosen_by_server);
    instance
}

/// The page a subresource is weighed with: the one its `Referer` names, by the
/// manifest the server read from it (none yet: weighed alone).
struct PageOf {
    page_url: Box<str>,
    manifest: Option<Arc<PageManifest>>,
    url: Arc<str>,
}

/// A choice among an original (first) and the rungs a client can use, with what
/// stays the same for a repeat of the request (its fields, the ladder, the
/// configuration); [`Choice::make`] adds what moves (the link, the egress share, the
/// page's weight), and [`ChoiceMade::holds`] checks the page's manifest.
struct Choice {
    variants: Arc<Variants>,
    manifests: Arc<Manifests>,
    /// What the client pays for each candidate.
    lengths: Vec<u64>,
    save_data: bool,
    from_hints: Option<LinkEstimate>,
    page: Option<PageOf>,
    target_time: Duration,
    save_data_fraction: f64,
}

impl Choice {
    /// The choice now: by the client's hints, else the passive estimate of its
    /// network (read once per response, through `link`), with the page's weight as
    /// its other responses' sizes are now and the egress controller's share now.
    /// Also returns the passive estimate.
    fn make(&self, conn: &ConnInfo, link: &LinkRead) -> (Decision, Option<LinkEstimate>) {
        let passive = link.get_or_read(|| {
            self.variants
                .network_link(conn.peer.ip(), LinkSample::measure(conn.socket))
        });
        let link = self.from_hints.or(passive);
        let page = match (link, &self.page) {
            (
                Some(_),
                Some(PageOf {
                    page_url,
                    manifest: Some(manifest),
                    url,
                }),
            ) => self
                .variants
                .pages
                .around(page_url, manifest, url)
                .unwrap_or_default(),
            _ => PageWeight::default(),
        };
        let inputs = Inputs {
            save_data: self.save_data,
            link,
            page,
            target_time: self.target_time,
            max_fraction: self.variants.max_fraction(),
            save_data_fraction: self.save_data_fraction,
        };
        (choose(&self.lengths, &inputs), passive)
    }
}

/// A decision as the metrics count it.
#[derive(Clone, Copy, Debug)]
struct Counted {
    reason: &'static str,
    /// Bytes saved against the original.
    saved: u64,
}

/// A choice an answer was made with, for its repeats: it holds while the page's
/// manifest is the one it was weighed with and the same candidate is chosen for the
/// same reason (which decides the answer's `Cache-Control`), and is counted again as
/// it was.
struct ChoiceMade {
    choice: Choice,
    decision: Decision,
    counted: Counted,
}

impl ChoiceMade {
    /// Whether the page's latest manifest, as remembered now, is the one the choice
    /// read: the memo may move to another without a store write (a page back at a
    /// version already stored), and one forgotten is read from the store again.
    fn same_manifest(&self) -> bool {
        let Some(page) = &self.choice.page else {
            return true;
        };
        match (
            self.choice.manifests.latest_remembered(&page.page_url),
            &page.manifest,
        ) {
            (Some(Some(now)), Some(then)) => Arc::ptr_eq(&now, then),
            (Some(None), None) => true,
            _ => false,
        }
    }
}

impl Rechoose for ChoiceMade {
    fn holds(&self, conn: &ConnInfo, link: &LinkRead) -> bool {
        self.same_manifest() && self.choice.make(conn, link).0 == self.decision
    }

    fn count_again(&self) {
        self.choice
            .variants
            .count_decision(self.counted.reason, self.counted.saved);
    }
}

impl std::fmt::Debug for ChoiceMade {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChoiceMade")
            .field("lengths", &self.choice.lengths)
            .field("decision", &self.decision)
            .finish_non_exhaustive()
    }
}

/// Remembers the size of a page or of a subresource, served at `url`, when it is the
/// same for everyone, for the weight of the pages that name it.
fn remember_size(
    variants: &Variants,
    ctx: &RequestContext,
    instance: &Instance,
    kind: Option<OriginalKind>,
    url: &Arc<str>,
) {
    if instance.status != StatusCode::OK || !instance.reusable || !ctx.profile.is_get_or_head() {
        return;
    }
    let InstanceBody::Whole { bytes, .. } = &instance.body else {
        return;
    };
    let negotiable = match kind {
        Some(OriginalKind::Image(_)) => true,
        Some(OriginalKind::Text(_)) => fidelity::text::MINIFIERS,
        None => false,
    };
    variants.pages.record(url, bytes.len() as u64, negotiable);
    ctx.repeat
        .redo_page_size(url, bytes.len() as u64, negotiable);
}

/// The coding a client gets for a text body: the first of the profile's `cached`
/// codings it accepts (as `encode` negotiates), `None` for identity (no profile, none
/// accepted, or a body too small to compress).
fn client_coding(
    codings: &[(ContentCoding, u32)],
    accept: &AcceptEncoding,
    compressible: bool,
) -> Option<ContentCoding> {
    if !compressible || codings.is_empty() {
        return None;
    }
    accept.negotiate(codings.iter().map(|(c, _)| *c))
}

/// Image formats that not every client shows, most compact first.
const COMPACT_FORMATS: [ImageFormat; 2] = [ImageFormat::Avif, ImageFormat::Webp];

/// The variants a client can show: for an image, the rungs in the most compact
/// format the ladder has and the client shows (its `Accept` names it, or the
/// original is in it), else in the universally shown one; for text, the rungs that
/// save at least `text_min_saving` after the client's `coding`.
fn usable_rungs<'a>(
    ladder: &'a Ladder,
    own: Option<ImageFormat>,
    request: &HeaderMap,
    coding: Option<ContentCoding>,
    text_min_saving: f64,
) -> Vec<&'a Rung> {
    let formats = || ladder.rungs.iter().filter_map(Rung::image_format);
    let image_format = COMPACT_FORMATS
        .into_iter()
        .find(|&f| formats().any(|r| r == f) && (own == Some(f) || accepts_image(request, f)))
        .or_else(|| formats().find(|f| !COMPACT_FORMATS.contains(f)));
    ladder
        .rungs
        .iter()
        .filter(|r| match r.image_format() {
            Some(format) => Some(format) == image_format,
            None => ladder
                .saving(r, coding)
                .is_some_and(|saving| saving >= text_min_saving),
        })
        .collect()
}

/// The RFC 2295 variant list (`Alternates`): the original at `path` first, at
/// source quality 1, then the ladder's rungs (listed once per ladder).
fn variant_list(
    path: &str,
    headers: &HeaderMap,
    original: Hash,
    original_len: u64,
    ladder: &Ladder,
) -> String {
    let own_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(wirefold_http::media_type_essence)
        .unwrap_or_default();
    let mut list = alternates(&[VariantDescription {
        url: path,
        source_quality: 1.0,
        media_type: &own_type,
        length: original_len,
    }]);
    let rungs = ladder.listed_rungs(&original);
    if !list.is_empty() && !rungs.is_empty() {
        list.push_str(", ");
    }
    list.push_str(&rungs);
    list
}

/// `300 Multiple Choices` with the list in `Alternates` and as links in a page,
/// `TCN: list` (RFC 2295 §10.2). Not stored: it answers one request's wish.
fn list_response(instance: Instance, list: String, urls: impl Iterator<Item = String>) -> Instance {
    let mut page = String::from("<!DOCTYPE html>\n<title>Variants</title>\n<ul>\n");
    // Paths of the request and of wirefold's own URLs: no markup characters.
    for url in urls.filter(|u| !u.contains(['"', '<', '>', '&'])) {
        let _ = writeln!(page, "<li><a href=\"{url}\">{url}</a></li>");
    }
    page.push_str("</ul>\n");
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(TCN, HeaderValue::from_static("list"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Ok(value) = HeaderValue::from_str(&list) {
        headers.insert(ALTERNATES, value);
    }
    add_field(&mut headers, "negotiate");
    let bytes = Bytes::from(page);
    Instance {
        status: StatusCode::MULTIPLE_CHOICES,
        headers,
        body: InstanceBody::Whole {
            hash: Hash::of(&bytes),
            bytes,
        },
        provenance: instance.provenance,
        reusable: false,
        last_modified: None,
        origin_coded: None,
    }
}

/// Turns the original's instance into the chosen variant's: its body, type,
/// validator and URL.
fn become_variant(
    instance: &mut Instance,
    original: Hash,
    rung: &Rung,
    body: Bytes,
    chosen_by_server: bool,
) {
    let headers = &mut instance.headers;
    if let Ok(value) = HeaderValue::from_str(&rung.media_type) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    if let Ok(value) = HeaderValue::from_str(&rung.url(&original)) {
        headers.insert(header::CONTENT_LOCATION, value);
    }
    headers.insert(TCN, HeaderValue::from_static("choice"));
    if let Ok(value) = HeaderValue::from_str(&format!("\"{}\"", content_etag(&rung.hash))) {
        headers.insert(header::ETAG, value);
    }
    if chosen_by_server {
        let kept = headers
            .get_all(header::CACHE_CONTROL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|d| {
                let name = d.split('=').next().unwrap_or("").to_ascii_lowercase();
                !matches!(name.as_str(), "public" | "s-maxage" | "private" | "")
            })
            .collect::<Vec<_>>()
            .join(", ");
        let value = if kept.is_empty() {
            "private".to_string()
        } else {
            format!("private, {kept}")
        };
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(header::CACHE_CONTROL, value);
        }
    }
    instance.body = InstanceBody::Whole {
        bytes: body,
        hash: rung.hash,
    };
    instance.origin_coded = None;
}

/// The instance at a variant URL (`<original hex>/<variant hex>.<extension>` after
/// [`VARIANT_PREFIX`]): `None` unless it names a variant of a known ladder whose
/// body is still kept. Immutable: its URL names its content.
pub async fn variant_at(variants: &Variants, rest: &str) -> Option<Instance> {
    let (original, file) = rest.split_once('/')?;
    let (variant, _extension) = file.split_once('.')?;
    let original = Hash::from_hex(original).ok()?;
    let variant = Hash::from_hex(variant).ok()?;
    let ladder = variants.ladder(&original).await?;
    let rung = ladder.rungs.iter().find(|r| r.hash == variant)?;
    if rung.url(&original) != format!("{VARIANT_PREFIX}{rest}") {
        return None;
    }
    let bytes = variants.body(rung).await?;
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&rung.media_type).ok()?,
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    headers.insert(
        header::ETAG,
        HeaderValue::from_str(&format!("\"{}\"", content_etag(&rung.hash))).ok()?,
    );
    Some(Instance {
        status: StatusCode::OK,
        headers,
        body: InstanceBody::Whole {
            bytes,
            hash: rung.hash,
        },
        provenance: Provenance::Hit {
            age: std::time::Duration::ZERO,
        },
        reusable: true,
        last_modified: None,
        origin_coded: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The formats of the rungs a client with `accept` is offered.
    fn offered(ladder: &Ladder, own: ImageFormat, accept: &'static str) -> Vec<ImageFormat> {
        let mut request = HeaderMap::new();
        request.insert(header::ACCEPT, HeaderValue::from_static(accept));
        usable_rungs(ladder, Some(own), &request, None, 0.03)
            .into_iter()
            .filter_map(Rung::image_format)
            .collect()
    }

    #[test]
    fn each_client_gets_the_most_compact_format_it_names() {
        use ImageFormat::{Avif, Jpeg, Webp};
        let chromium = "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8";
        let first_pass = Ladder::of(
            vec![
                Rung::of_image(Webp, 1, 700),
                Rung::of_image(Webp, 2, 490),
                Rung::of_image(Jpeg, 1, 690),
            ],
            vec![Avif],
        );
        // Until the AVIF pass is made, a client naming AVIF gets WebP.
        assert_eq!(offered(&first_pass, Jpeg, chromium), [Webp, Webp]);
        let mut complete = first_pass;
        complete.later.clear();
        complete.rungs.push(Rung::of_image(Avif, 1, 400));
        assert_eq!(offered(&complete, Jpeg, chromium), [Avif]);
        assert_eq!(offered(&complete, Jpeg, "image/webp,*/*"), [Webp, Webp]);
        assert_eq!(
            offered(&complete, Jpeg, "image/avif;q=0, image/webp"),
            [Webp, Webp]
        );
        assert_eq!(offered(&complete, Jpeg, "*/*"), [Jpeg]);
        // A WebP original's own format is shown by whoever asked for it.
        let webp_original = Ladder::of(vec![Rung::of_image(Webp, 1, 700)], Vec::new());
        assert_eq!(offered(&webp_original, Webp, "*/*"), [Webp]);
    }
}
