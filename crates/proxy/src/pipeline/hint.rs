//! Stage 5, hint: tells the client what the page it asked for will need next —
//! `Link: rel=preload` fields on the final response, built from the page's manifest
//! (`crate::manifests`), and the same links for 103 Early Hints before the origin
//! answers (sent by the HTTP/2 listener, `crate::h2_server`). Owns the `[hints]`
//! configuration.

use std::sync::{Arc, Weak};

use http::header::LINK;
use http::{HeaderMap, HeaderValue, StatusCode};
use serde::{Deserialize, Serialize};
use store::memo::Bounded;
use store::Hash;
use wirefold_page::manifest::{Destination, ManifestEntry, ManifestRules, Priority};

use crate::config_error::ConfigError;
use crate::manifests::PageManifest;
use crate::model::{Instance, InstanceBody, RequestContext};

/// The `[hints]` section.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HintConfig {
    /// Announce a page's subresources: `Link: rel=preload` on HTML responses (and 103
    /// Early Hints when `early_hints` is on).
    pub enabled: bool,
    /// Send 103 Early Hints on HTTP/2 connections for a page already seen, before the
    /// origin answers (browsers act on 103 over HTTP/2 and HTTP/3 only).
    pub early_hints: bool,
    /// A 103 announces only render-blocking entries (stylesheets, head scripts,
    /// fonts); the rest waits for the final response's `Link`. Off by default: with
    /// Chromium acting on the 103, naming images too cost nothing when the origin
    /// answers at once and saved the most when it thinks (docs/benchmarks.md, inline
    /// download); on, for links where preloads would compete with the page itself
    /// (the HTTP/2 listener does not prioritise streams).
    pub early_hints_render_blocking_only: bool,
    /// Links per response, at most: the best-ranked entries of the manifest.
    pub max_links: usize,
    /// Bytes of the `Link` field value per response, at most (the links are one
    /// comma-separated field).
    pub max_link_bytes: usize,
    /// Also announce resources on other sites (scheme, host or port). Off, only the
    /// page's own origin's.
    pub cross_site: bool,
    /// Push the announced same-origin resources to HTTP/2 clients that enable push
    /// (`SETTINGS_ENABLE_PUSH=1`: nghttp, a client proxy; browsers no longer do),
    /// right after the page's head, unless the request says `Save-Data: on`.
    pub push: bool,
    /// Entries kept in a page's manifest (stored with the page), at most.
    pub max_manifest_entries: usize,
    /// How deep a page's stylesheets are read for their imports and fonts (fetched
    /// through the cache like any request, after the page is served): 0 reads none,
    /// 1 the page's own stylesheets, 2 also what they import.
    pub stylesheet_depth: u8,
    /// Bytes of a streamed page (one over `limits.max_buffered_body`) read for its
    /// manifest as it passes to the client (`crate::page_stream`): its first this
    /// many, decoded. 0 reads none.
    pub stream_scan_bytes: usize,
}

impl Default for HintConfig {
    fn default() -> Self {
        HintConfig {
            enabled: true,
            early_hints: true,
            early_hints_render_blocking_only: false,
            max_links: 16,
            max_link_bytes: 2048,
            cross_site: false,
            push: false,
            max_manifest_entries: 64,
            stylesheet_depth: 2,
            stream_scan_bytes: 1024 * 1024,
        }
    }
}

/// The most links a response may carry: beyond this a browser gains nothing and the
/// field only grows.
pub const MAX_LINKS: usize = 64;
/// The most bytes of `Link` values: well inside every client's header limits.
pub const MAX_LINK_BYTES: usize = 16 * 1024;
/// The deepest `hints.stylesheet_depth`.
pub const MAX_STYLESHEET_DEPTH: u8 = 4;
/// The most manifest entries per page.
pub const MAX_MANIFEST_ENTRIES: usize = 1024;
/// The most of a streamed page read for its manifest: twice what a buffered page may
/// be, so a stream costs no more parsing than the pages that are read whole.
pub const MAX_STREAM_SCAN_BYTES: usize = 16 * 1024 * 1024;

impl HintConfig {
    /// Every problem in the section, each naming its key.
    pub fn problems(&self) -> Vec<ConfigError> {
        let mut problems = Vec::new();
        let mut bound = |key, value: usize, low: usize, high: usize| {
            if !(low..=high).contains(&value) {
                problems.push(ConfigError::Invalid {
                    key,
                    message: format!("must be between {low} and {high}"),
                });
            }
        };
        bound("hints.max_links", self.max_links, 1, MAX_LINKS);
        bound(
            "hints.max_link_bytes",
            self.max_link_bytes,
            64,
            MAX_LINK_BYTES,
        );
        bound(
            "hints.max_manifest_entries",
            self.max_manifest_entries,
            1,
            MAX_MANIFEST_ENTRIES,
        );
        bound(
            "hints.stylesheet_depth",
            self.stylesheet_depth.into(),
            0,
            MAX_STYLESHEET_DEPTH.into(),
        );
        bound(
            "hints.stream_scan_bytes",
            self.stream_scan_bytes,
            0,
            MAX_STREAM_SCAN_BYTES,
        );
        problems
    }

    /// What a page's manifest keeps.
    pub fn manifest_rules(&self) -> ManifestRules {
        ManifestRules {
            cross_site: self.cross_site,
            max_entries: self.max_manifest_entries,
        }
    }
}

/// Whether `instance` is a page whose manifest hints are made from: a whole 200
/// HTML body.
pub fn is_page(instance: &Instance) -> bool {
    is_html_200(instance) && matches!(instance.body, InstanceBody::Whole { .. })
}

/// Whether `instance` is a 200 HTML answer, whatever form its body has.
pub fn is_html_200(instance: &Instance) -> bool {
    // The status first: a number compared before a field is parsed.
    instance.status == StatusCode::OK
        && instance
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| {
                let essence = wirefold_http::media_type_essence(t);
                essence == "text/html" || essence == "application/xhtml+xml"
            })
}

/// What the hint stage did to a response.
pub struct Hinted {
    pub instance: Instance,
    /// `Link: rel=preload` values added.
    pub links: usize,
    /// Paths (with query) of the same-origin resources to push after the page's head,
    /// best first; empty unless `hints.push` is on and the client did not ask to save
    /// data.
    pub pushes: Vec<String>,
}

/// The resources an HTTP/2 listener is to push with a response, carried in the
/// response's extensions from the hint stage to the listener.
#[derive(Clone, Debug, Default)]
pub struct PushPromises(pub Vec<String>);

/// Preload links of pages answered lately, so that a page served again is not
/// formatted again: by content, carrier and the bounds that shaped them. A hit must
/// be of the very manifest (its stylesheets read since, or rebuilt under other rules,
/// a page's content has a new one) and origin (the same content may be served under
/// two names).
pub struct PreloadMemo(Bounded<PreloadKey, Arc<Preloads>>);

/// Page contents whose links are remembered.
const PAGES_MEMOIZED: usize = 4096;

#[derive(Clone, PartialEq, Eq, Hash)]
struct PreloadKey {
    content: Hash,
    carrier: Carrier,
    max_links: usize,
    max_link_bytes: usize,
    render_blocking_only: bool,
}

struct Preloads {
    /// What the links were made from: weak, so that the memo keeps no manifest's
    /// entries alive (the allocation it points at stays, so no other manifest can
    /// take its address while this is kept).
    manifest: Weak<PageManifest>,
    origin: Box<str>,
    links: Vec<PreloadLink>,
    /// The links as the one field value that carries them all.
    field: Option<HeaderValue>,
}

impl Preloads {
    fn new(manifest: &Arc<PageManifest>, origin: &str, links: Vec<PreloadLink>) -> Self {
        Preloads {
            manifest: Arc::downgrade(manifest),
            origin: origin.into(),
            field: one_field(&links),
            links,
        }
    }
}

/// Whether `text` is a media type without parameters: two RFC 9110 tokens around `/`.
fn is_media_type(text: &str) -> bool {
    let token = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    text.split_once('/')
        .is_some_and(|(kind, subtype)| token(kind) && token(subtype))
}

/// `links` comma-separated in one field value: one field line per response, where
/// one per link cost HTTP/2's header compression a table lookup each (and a shared
/// reference count each as the response's head is copied).
fn one_field(links: &[PreloadLink]) -> Option<HeaderValue> {
    let mut joined = Vec::new();
    for link in links {
        if !joined.is_empty() {
            joined.extend_from_slice(LINK_SEPARATOR.as_bytes());
        }
        joined.extend_from_slice(link.value.as_bytes());
    }
    HeaderValue::from_maybe_shared(bytes::Bytes::from(joined))
        .ok()
        .filter(|v| !v.is_empty())
}

const LINK_SEPARATOR: &str = ", ";

impl Default for PreloadMemo {
    fn default() -> Self {
        PreloadMemo(Bounded::with_entries(PAGES_MEMOIZED))
    }
}

impl PreloadMemo {
    /// The links `carrier` announces for `manifest`'s page reached at `origin`.
    fn links(
        &self,
        config: &HintConfig,
        origin: &str,
        manifest: &Arc<PageManifest>,
        carrier: Carrier,
    ) -> Arc<Preloads> {
        let render_blocking_only =
            carrier == Carrier::EarlyHints && config.early_hints_render_blocking_only;
        let key = PreloadKey {
            content: manifest.hash,
            carrier,
            max_links: config.max_links,
            max_link_bytes: config.max_link_bytes,
            render_blocking_only,
        };
        let same = |p: &Arc<Preloads>| {
            std::ptr::eq(p.manifest.as_ptr(), Arc::as_ptr(manifest)) && *p.origin == *origin
        };
        if let Some(hit) = self.0.get(&key).filter(same) {
            return hit;
        }
        let render_blocking: Vec<ManifestEntry>;
        let entries = if render_blocking_only {
            render_blocking = manifest
                .entries
                .iter()
                .filter(|e| e.priority == Priority::RenderBlocking)
                .cloned()
                .collect();
            &render_blocking
        } else {
            &manifest.entries
        };
        let links = preload_links(config, origin, entries, carrier, |_| false);
        let made = Arc::new(Preloads::new(manifest, origin, links));
        self.0.insert(key, made.clone());
        made
    }
}

/// Runs on every instance, after `adapt`. For a page with a manifest (of this very
/// content: a changed page never announces what it no longer references), appends
/// `Link: rel=preload` fields for its best-ranked entries, within `config`'s bounds,
/// skipping URLs the origin's own `Link` fields already name; with `hints.push` on
/// (and no `Save-Data: on`), the same-origin ones among them are also to be pushed,
/// and their links lose `nopush`. May change only the instance's head, never its
/// body. Every other instance passes through unchanged, as it does with
/// `hints.enabled` off.
pub fn hint(
    config: &HintConfig,
    memo: &PreloadMemo,
    ctx: &RequestContext,
    manifest: Option<&Arc<PageManifest>>,
    mut instance: Instance,
) -> Hinted {
    let Some(manifest) = manifest.filter(|_| config.enabled) else {
        return Hinted {
            instance,
            links: 0,
            pushes: Vec::new(),
        };
    };
    let origin = ctx.origin();
    let pushing = config.push && !ctx.profile.client_hints.save_data;
    let carrier = Carrier::FinalResponse { pushing };
    let named: Vec<&str> = instance
        .headers
        .get_all(LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let links = if named.is_empty() {
        memo.links(config, origin, manifest, carrier)
    } else {
        let links = preload_links(config, origin, &manifest.entries, carrier, |target| {
            named.iter().any(|n| n.contains(&format!("<{target}>")))
        });
        Arc::new(Preloads::new(manifest, origin, links))
    };
    let pushes = links
        .links
        .iter()
        .filter_map(|l| l.pushed.clone())
        .collect();
    if let Some(field) = &links.field {
        instance.headers.append(LINK, field.clone());
    }
    Hinted {
        instance,
        links: links.links.len(),
        pushes,
    }
}

/// A 103 Early Hints response's fields, and the links they name.
pub struct EarlyHints {
    pub fields: HeaderMap,
    pub links: usize,
}

/// The 103 Early Hints response for a page whose latest manifest is `manifest`, or
/// `None` when there is nothing to announce or hints are off.
pub fn early_hints(
    config: &HintConfig,
    memo: &PreloadMemo,
    ctx: &RequestContext,
    manifest: &Arc<PageManifest>,
) -> Option<EarlyHints> {
    if !(config.enabled && config.early_hints) {
        return None;
    }
    let preloads = memo.links(config, ctx.origin(), manifest, Carrier::EarlyHints);
    let mut fields = HeaderMap::new();
    fields.insert(LINK, preloads.field.clone()?);
    Some(EarlyHints {
        fields,
        links: preloads.links.len(),
    })
}

/// The response a preload link goes out in, which decides its push attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Carrier {
    /// The final response: links to what is not pushed say `nopush`, so that an
    /// intermediary that pushes from `Link` fields (h2o, nghttpx) leaves them alone;
    /// with `pushing`, same-origin resources are pushed and their links lose it.
    FinalResponse { pushing: bool },
    /// A 103 Early Hints response: no `nopush`. Chromium acts on a 103's link only
    /// when it knows each of its attributes, and ignores the whole link otherwise
    /// (`nopush` made it ignore every preload wirefold hinted; docs/benchmarks.md,
    /// inline download). A 103 is never a push, so there is nothing to say.
    EarlyHints,
}

/// One announced resource: its `Link` value, and its path when it is to be pushed.
struct PreloadLink {
    value: HeaderValue,
    pushed: Option<String>,
}

/// The preload links for `entries`, best first, skipping what a browser would not
/// use (frames, speculative resources) and what `already_named`, within the bounds.
/// Their push attributes are those of `carrier`.
fn preload_links(
    config: &HintConfig,
    origin: &str,
    entries: &[ManifestEntry],
    carrier: Carrier,
    already_named: impl Fn(&str) -> bool,
) -> Vec<PreloadLink> {
    let mut links = Vec::new();
    let mut bytes = 0;
    for entry in entries {
        if links.len() == config.max_links {
            break;
        }
        let Some(link) = preload_link(origin, entry, carrier, &already_named) else {
            continue;
        };
        let separated = if links.is_empty() {
            0
        } else {
            LINK_SEPARATOR.len()
        };
        let added = separated + link.value.len();
        if bytes + added > config.max_link_bytes {
            // A shorter one further down may still fit.
            continue;
        }
        bytes += added;
        links.push(link);
    }
    links
}

/// One `Link` value: `</app.css>; rel=preload; as=style; nopush`, with `crossorigin`
/// when the page fetches it with CORS (fonts, modules, `crossorigin` elements) and
/// `type` for fonts; in a final response, `nopush` unless it is pushed (`pushing`,
/// same origin). Same-origin URLs are written as paths (right whatever name the
/// client used for us); a URL that cannot be a field value is skipped.
fn preload_link(
    origin: &str,
    entry: &ManifestEntry,
    carrier: Carrier,
    already_named: impl Fn(&str) -> bool,
) -> Option<PreloadLink> {
    let preloadable =
        entry.destination != Destination::Document && entry.priority != Priority::Speculative;
    if !preloadable {
        return None;
    }
    let same_origin = entry
        .url
        .strip_prefix(origin)
        .filter(|path| path.starts_with('/'));
    let target = same_origin.unwrap_or(&entry.url);
    if already_named(target) || already_named(&entry.url) {
        return None;
    }
    let mut link = if entry.module {
        format!("<{target}>; rel=modulepreload")
    } else {
        format!(
            "<{target}>; rel=preload; as={}",
            entry.destination.as_token()
        )
    };
    // Only a bare `type/subtype` goes between the quotes: a page's stray `"` or `,`
    // there would end the value early and take the links after it along.
    if let Some(media_type) = entry.media_type.as_deref().filter(|t| is_media_type(t)) {
        link.push_str(&format!("; type=\"{media_type}\""));
    }
    match entry.crossorigin.as_deref() {
        Some("use-credentials") => link.push_str("; crossorigin=use-credentials"),
        // A module preload is CORS by default.
        Some(_) if !entry.module => link.push_str("; crossorigin"),
        _ => {}
    }
    let pushing = carrier == Carrier::FinalResponse { pushing: true };
    let pushed = same_origin.filter(|_| pushing).map(str::to_string);
    if pushed.is_none() && carrier != Carrier::EarlyHints {
        link.push_str("; nopush");
    }
    Some(PreloadLink {
        value: HeaderValue::from_str(&link).ok()?,
        pushed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FINAL: Carrier = Carrier::FinalResponse { pushing: false };

    fn entry(url: &str, destination: Destination, priority: Priority) -> ManifestEntry {
        ManifestEntry::new(url, destination, priority)
    }

    /// The links of `entries` on `https://e.com` with the default bounds.
    fn links_of(entries: &[ManifestEntry], carrier: Carrier) -> Vec<PreloadLink> {
        preload_links(
            &HintConfig::default(),
            "https://e.com",
            entries,
            carrier,
            |_| false,
        )
    }

    fn values(links: &[PreloadLink]) -> Vec<&str> {
        links.iter().map(|l| l.value.to_str().unwrap()).collect()
    }

    #[test]
    fn links_carry_what_the_browser_matches_on() {
        let font = ManifestEntry {
            crossorigin: Some("anonymous".into()),
            media_type: Some("font/woff2".into()),
            ..entry(
                "https://e.com/f.woff2",
                Destination::Font,
                Priority::RenderBlocking,
            )
        };
        let module = ManifestEntry {
            module: true,
            crossorigin: Some("anonymous".into()),
            ..entry(
                "https://e.com/m.js",
                Destination::Script,
                Priority::NonBlockingScript,
            )
        };
        let credentialed = ManifestEntry {
            crossorigin: Some("use-credentials".into()),
            ..entry(
                "https://cdn.example/s.css",
                Destination::Style,
                Priority::RenderBlocking,
            )
        };
        let entries = [
            entry(
                "https://e.com/a.css?v=1",
                Destination::Style,
                Priority::RenderBlocking,
            ),
            font,
            module,
            credentialed,
            entry(
                "https://e.com/frame",
                Destination::Document,
                Priority::Later,
            ),
            entry(
                "https://e.com/lazy.png",
                Destination::Image,
                Priority::Speculative,
            ),
            entry(
                "https://e.com/i.png",
                Destination::Image,
                Priority::EagerImage,
            ),
        ];
        let links = links_of(&entries, FINAL);
        assert_eq!(
            values(&links),
            [
                "</a.css?v=1>; rel=preload; as=style; nopush",
                "</f.woff2>; rel=preload; as=font; type=\"font/woff2\"; crossorigin; nopush",
                "</m.js>; rel=modulepreload; nopush",
                "<https://cdn.example/s.css>; rel=preload; as=style; crossorigin=use-credentials; nopush",
                "</i.png>; rel=preload; as=image; nopush",
            ]
        );
    }

    #[test]
    fn bounded_in_count_and_bytes() {
        let entries: Vec<_> = (0..100)
            .map(|i| {
                let url = format!("https://e.com/{}.png", "x".repeat(i % 7 * 40 + 1));
                entry(&url, Destination::Image, Priority::EagerImage)
            })
            .collect();
        let count = HintConfig {
            max_links: 3,
            ..HintConfig::default()
        };
        assert_eq!(
            preload_links(&count, "https://e.com", &entries, FINAL, |_| false).len(),
            3
        );
        let bytes = HintConfig {
            max_links: MAX_LINKS,
            max_link_bytes: 300,
            ..HintConfig::default()
        };
        let links = preload_links(&bytes, "https://e.com", &entries, FINAL, |_| false);
        let field = one_field(&links).unwrap();
        assert!(field.len() <= 300, "the field, separators included");
        assert!(
            field.len() > 300 - 48,
            "filled: a 48-byte link would still fit"
        );
        assert!(links.len() >= 2, "short links further down still fit");
    }

    #[test]
    fn urls_already_named_and_unrepresentable_are_skipped() {
        let entries = [
            entry(
                "https://e.com/a.css",
                Destination::Style,
                Priority::RenderBlocking,
            ),
            entry(
                "https://e.com/b\u{7f}.css",
                Destination::Style,
                Priority::RenderBlocking,
            ),
            entry(
                "https://e.com/c.css",
                Destination::Style,
                Priority::RenderBlocking,
            ),
        ];
        let links = preload_links(
            &HintConfig::default(),
            "https://e.com",
            &entries,
            FINAL,
            |t| t == "/a.css",
        );
        assert_eq!(values(&links), ["</c.css>; rel=preload; as=style; nopush"]);
    }

    #[test]
    fn one_field_keeps_each_link_whole() {
        let font = |url: &str, media_type: &str| ManifestEntry {
            media_type: Some(media_type.into()),
            crossorigin: Some("anonymous".into()),
            ..entry(url, Destination::Font, Priority::RenderBlocking)
        };
        let entries = [
            // A stray quote in the page's `type` would open a string to the end.
            font("https://e.com/a.woff2", "font/woff2\", x=\""),
            font("https://e.com/b.woff2", "font/woff2"),
            // A comma in a URL stays inside its `<…>`.
            entry(
                "https://e.com/img/w_100,h_50/x.jpg",
                Destination::Image,
                Priority::EagerImage,
            ),
        ];
        let links = links_of(&entries, FINAL);
        assert_eq!(
            one_field(&links).unwrap(),
            "</a.woff2>; rel=preload; as=font; crossorigin; nopush, \
             </b.woff2>; rel=preload; as=font; type=\"font/woff2\"; crossorigin; nopush, \
             </img/w_100,h_50/x.jpg>; rel=preload; as=image; nopush"
        );
    }

    #[test]
    fn pushed_links_are_same_origin_and_lose_nopush() {
        let entries = [
            entry(
                "https://e.com/a.css",
                Destination::Style,
                Priority::RenderBlocking,
            ),
            entry(
                "https://cdn.example/b.js",
                Destination::Script,
                Priority::RenderBlocking,
            ),
        ];
        let links = links_of(&entries, Carrier::FinalResponse { pushing: true });
        assert_eq!(
            values(&links),
            [
                "</a.css>; rel=preload; as=style",
                "<https://cdn.example/b.js>; rel=preload; as=script; nopush"
            ]
        );
        let pushed: Vec<_> = links.iter().map(|l| l.pushed.as_deref()).collect();
        assert_eq!(pushed, [Some("/a.css"), None]);
    }

    #[test]
    fn early_hints_links_carry_only_attributes_chromium_knows() {
        let font = ManifestEntry {
            crossorigin: Some("anonymous".into()),
            media_type: Some("font/woff2".into()),
            ..entry(
                "https://e.com/f.woff2",
                Destination::Font,
                Priority::RenderBlocking,
            )
        };
        let entries = [
            entry(
                "https://e.com/a.css",
                Destination::Style,
                Priority::RenderBlocking,
            ),
            font,
        ];
        let links = links_of(&entries, Carrier::EarlyHints);
        assert_eq!(
            values(&links),
            [
                "</a.css>; rel=preload; as=style",
                "</f.woff2>; rel=preload; as=font; type=\"font/woff2\"; crossorigin",
            ]
        );
        assert!(
            links.iter().all(|l| l.pushed.is_none()),
            "a 103 pushes nothing"
        );
    }

    #[test]
    fn remembered_links_follow_the_origin_the_bounds_and_the_carrier() {
        let manifest = Arc::new(PageManifest {
            hash: Hash::of(b"page"),
            entries: vec![
                entry(
                    "https://e.com/a.css",
                    Destination::Style,
                    Priority::RenderBlocking,
                ),
                entry(
                    "https://e.com/b.js",
                    Destination::Script,
                    Priority::RenderBlocking,
                ),
            ],
            stylesheets_read: false,
        });
        let memo = PreloadMemo::default();
        let config = HintConfig::default();
        let first = memo.links(&config, "https://e.com", &manifest, FINAL);
        assert_eq!(
            values(&first.links),
            [
                "</a.css>; rel=preload; as=style; nopush",
                "</b.js>; rel=preload; as=script; nopush"
            ]
        );
        assert_eq!(
            first.field.as_ref().unwrap(),
            "</a.css>; rel=preload; as=style; nopush, </b.js>; rel=preload; as=script; nopush",
            "one field carries them all"
        );
        assert!(Arc::ptr_eq(
            &first,
            &memo.links(&config, "https://e.com", &manifest, FINAL)
        ));
        assert_eq!(
            Arc::strong_count(&manifest),
            1,
            "the memo keeps no manifest alive"
        );
        // The same content under another name: its own links, absolute.
        let other = memo.links(&config, "https://f.org", &manifest, FINAL);
        assert_eq!(
            values(&other.links)[0],
            "<https://e.com/a.css>; rel=preload; as=style; nopush"
        );
        let one = HintConfig {
            max_links: 1,
            ..HintConfig::default()
        };
        assert_eq!(
            memo.links(&one, "https://e.com", &manifest, FINAL)
                .links
                .len(),
            1
        );
        assert_eq!(
            values(
                &memo
                    .links(&config, "https://e.com", &manifest, Carrier::EarlyHints)
                    .links
            )[0],
            "</a.css>; rel=preload; as=style"
        );
        // The same content's manifest with its stylesheets read: its own links.
        let read = Arc::new(PageManifest {
            entries: vec![entry(
                "https://e.com/f.woff2",
                Destination::Font,
                Priority::RenderBlocking,
            )],
            stylesheets_read: true,
            ..(*manifest).clone()
        });
        assert_eq!(
            values(&memo.links(&config, "https://e.com", &read, FINAL).links),
            ["</f.woff2>; rel=preload; as=font; nopush"]
        );
    }

    #[test]
    fn the_section_checks_its_bounds() {
        assert!(HintConfig::default().problems().is_empty());
        let bad = HintConfig {
            max_links: 0,
            max_link_bytes: 1 << 20,
            max_manifest_entries: 0,
            stream_scan_bytes: MAX_STREAM_SCAN_BYTES + 1,
            ..HintConfig::default()
        };
        let keys: Vec<String> = bad.problems().iter().map(|p| p.to_string()).collect();
        assert_eq!(keys.len(), 4, "{keys:?}");
        assert!(keys[3].starts_with("`hints.stream_scan_bytes`"));
        assert!(keys[0].starts_with("`hints.max_links`"));
    }
}
