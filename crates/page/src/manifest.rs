//! A page's manifest: the subresources a browser fetches while rendering it, each
//! with what a preload needs (the destination, CORS mode, media type) and ranked by
//! how much the first render waits for it.
//!
//! Ranking, after what browsers themselves prioritise: render-blocking first
//! (stylesheets that apply, classic scripts in the head, fonts), then images in
//! document order (a page's first images are the likeliest to be above the fold),
//! then scripts that do not block, then the rest. References a browser may never
//! fetch (lazy images, a stylesheet's background images) are kept last and marked
//! speculative: pushing them may pay, hinting them may not.

use serde::{Deserialize, Serialize};
use url::Url;

use crate::css::{CssReference, CssReferenceKind};
use crate::{sizes, InlineReference, ReferenceKind, Viewport};

/// What a browser fetches a resource as: the `as` of a preload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Destination {
    Style,
    Script,
    Font,
    Image,
    /// A frame's document: never preloaded (`as=document` is not a preload
    /// destination), but pushable.
    Document,
    Audio,
    Video,
}

impl Destination {
    /// The `as` token of a `Link: rel=preload`.
    pub fn as_token(self) -> &'static str {
        match self {
            Destination::Style => "style",
            Destination::Script => "script",
            Destination::Font => "font",
            Destination::Image => "image",
            Destination::Document => "document",
            Destination::Audio => "audio",
            Destination::Video => "video",
        }
    }

    /// The destination named by an `as` token, if a preload may use it.
    pub fn from_as_token(token: &str) -> Option<Destination> {
        Some(match token {
            "style" => Destination::Style,
            "script" => Destination::Script,
            "font" => Destination::Font,
            "image" => Destination::Image,
            "audio" => Destination::Audio,
            "video" => Destination::Video,
            _ => return None,
        })
    }
}

/// How much the first render waits for a resource; entries are ordered by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Priority {
    /// Stylesheets that apply, classic scripts in the head, fonts, imports.
    RenderBlocking,
    /// Eager images, in document order.
    EagerImage,
    /// Scripts that do not block the first render.
    NonBlockingScript,
    /// Everything else a browser fetches for sure: icons, frames, posters, media.
    Later,
    /// What a browser may not fetch at all: lazy images, stylesheet images.
    Speculative,
}

/// One resource of a page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// Absolute URL.
    pub url: String,
    pub destination: Destination,
    pub priority: Priority,
    /// A module script (`rel=modulepreload` fetches it the way the page will).
    pub module: bool,
    /// The CORS mode the page fetches it in: `anonymous` or `use-credentials`; fonts
    /// and modules are always fetched with CORS. A preload in another mode is wasted.
    pub crossorigin: Option<String>,
    /// The media type declared by the page, else known from the URL for fonts
    /// (`font/woff2`): a browser skips a preload of a type it cannot use.
    pub media_type: Option<String>,
    /// How many stylesheets deep it was found (0: in the page itself).
    pub depth: u8,
}

impl ManifestEntry {
    /// An entry found in the page itself (depth 0), fetched without CORS, with no
    /// declared type and not a module; the other fields are set where they differ.
    pub fn new(url: impl Into<String>, destination: Destination, priority: Priority) -> Self {
        ManifestEntry {
            url: url.into(),
            destination,
            priority,
            module: false,
            crossorigin: None,
            media_type: None,
            depth: 0,
        }
    }
}

/// What the manifest keeps.
#[derive(Clone, Debug)]
pub struct ManifestRules {
    /// Keep references to other sites (other scheme, host or port). Off, only the
    /// page's own origin's resources are kept: those the server can speak for.
    pub cross_site: bool,
    /// At most this many entries per page.
    pub max_entries: usize,
}

/// The manifest of the page at `page_url` from its inline references (as
/// [`crate::inline_references`] lists them), ranked, each URL once, at most
/// `rules.max_entries`.
pub fn page_manifest(
    references: &[InlineReference],
    page_url: &str,
    rules: &ManifestRules,
) -> Vec<ManifestEntry> {
    let Ok(page) = Url::parse(page_url) else {
        return Vec::new();
    };
    let mut entries: Vec<ManifestEntry> = references
        .iter()
        .filter(|r| r.selected)
        .filter_map(entry_of)
        .filter(|e| rules.cross_site || same_origin(&page, &e.url))
        .collect();
    finish(&mut entries, rules.max_entries);
    entries
}

/// Adds what the stylesheet entry `sheet` of `manifest` references (its `@import`s,
/// fonts and images) at the stylesheet's priority or below, then ranks again.
pub fn add_stylesheet_references(
    manifest: &mut Vec<ManifestEntry>,
    sheet: &ManifestEntry,
    found: &[CssReference],
    page_url: &str,
    rules: &ManifestRules,
) {
    let Ok(page) = Url::parse(page_url) else {
        return;
    };
    for reference in found {
        let (destination, priority) = match reference.kind {
            CssReferenceKind::Import => (Destination::Style, sheet.priority),
            CssReferenceKind::Font => (Destination::Font, Priority::RenderBlocking),
            CssReferenceKind::Image => (Destination::Image, Priority::Speculative),
        };
        if !rules.cross_site && !same_origin(&page, &reference.url) {
            continue;
        }
        let font = destination == Destination::Font;
        manifest.push(ManifestEntry {
            url: reference.url.clone(),
            destination,
            priority,
            module: false,
            // A stylesheet's fonts are fetched with CORS; its other resources as it was.
            crossorigin: if font {
                Some("anonymous".into())
            } else {
                sheet.crossorigin.clone()
            },
            media_type: font.then(|| font_type(&reference.url)).flatten(),
            depth: sheet.depth.saturating_add(1),
        });
    }
    finish(manifest, rules.max_entries);
}

/// Sorts by priority (document order kept within one), drops repeated URLs (keeping
/// the first, highest ranked) and bounds the length.
fn finish(entries: &mut Vec<ManifestEntry>, max_entries: usize) {
    entries.sort_by_key(|e| e.priority);
    let mut seen = std::collections::HashSet::new();
    entries.retain(|e| seen.insert(e.url.clone()));
    entries.truncate(max_entries);
}

fn same_origin(page: &Url, url: &str) -> bool {
    Url::parse(url).is_ok_and(|u| u.origin() == page.origin())
}

/// The entry for one selected reference, if a browser fetches it as a subresource.
fn entry_of(reference: &InlineReference) -> Option<ManifestEntry> {
    let fetch = &reference.fetch;
    let (destination, priority, module) = match &reference.kind {
        ReferenceKind::Link { rel, destination } => {
            let has = |token: &str| rel.split_ascii_whitespace().any(|t| t == token);
            if has("stylesheet") {
                let applies = fetch
                    .media
                    .as_deref()
                    .is_none_or(|m| sizes::media_matches(m, &Viewport::DEFAULT));
                let blocking = applies && !has("alternate");
                let priority = if blocking {
                    Priority::RenderBlocking
                } else {
                    Priority::Later
                };
                (Destination::Style, priority, false)
            } else if has("modulepreload") {
                (Destination::Script, Priority::NonBlockingScript, true)
            } else if has("preload") {
                let destination = Destination::from_as_token(destination.as_deref()?)?;
                let priority = match destination {
                    Destination::Style | Destination::Font => Priority::RenderBlocking,
                    Destination::Image => Priority::EagerImage,
                    Destination::Script => Priority::NonBlockingScript,
                    _ => Priority::Later,
                };
                (destination, priority, false)
            } else if has("icon") {
                (Destination::Image, Priority::Later, false)
            } else {
                return None;
            }
        }
        ReferenceKind::Script => {
            let priority = if fetch.in_head && !fetch.deferred && !fetch.module {
                Priority::RenderBlocking
            } else {
                Priority::NonBlockingScript
            };
            (Destination::Script, priority, fetch.module)
        }
        ReferenceKind::Image | ReferenceKind::SrcsetCandidate | ReferenceKind::ImageInput => {
            let priority = if fetch.lazy {
                Priority::Speculative
            } else {
                Priority::EagerImage
            };
            (Destination::Image, priority, false)
        }
        ReferenceKind::Poster => (Destination::Image, Priority::Later, false),
        ReferenceKind::Frame => {
            let priority = if fetch.lazy {
                Priority::Speculative
            } else {
                Priority::Later
            };
            (Destination::Document, priority, false)
        }
        // Media streams by ranges and objects or embeds by plugins: nothing to preload.
        ReferenceKind::Media | ReferenceKind::Object | ReferenceKind::Embed => return None,
    };
    let cors = module || destination == Destination::Font;
    let crossorigin = match &fetch.crossorigin {
        Some(mode) => Some(mode.clone()),
        None if cors => Some("anonymous".to_string()),
        None => None,
    };
    let media_type = match destination {
        Destination::Font => fetch
            .media_type
            .clone()
            .or_else(|| font_type(&reference.url)),
        _ => None,
    };
    Some(ManifestEntry {
        url: reference.url.clone(),
        destination,
        priority,
        module,
        crossorigin,
        media_type,
        depth: 0,
    })
}

/// A font's media type from its URL's extension.
fn font_type(url: &str) -> Option<String> {
    let path = Url::parse(url).ok()?.path().to_ascii_lowercase();
    let extension = path.rsplit_once('.')?.1.to_string();
    let media_type = match extension.as_str() {
        "woff2" => "font/woff2",
        "woff" => "font/woff",
        "ttf" => "font/ttf",
        "otf" => "font/otf",
        _ => return None,
    };
    Some(media_type.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inline_references;

    const RULES: ManifestRules = ManifestRules {
        cross_site: false,
        max_entries: 64,
    };

    fn manifest(html: &str) -> Vec<(String, Destination, Priority)> {
        let page = "https://e.com/dir/page.html";
        page_manifest(&inline_references(html.as_bytes(), page), page, &RULES)
            .into_iter()
            .map(|e| {
                let path = e.url.trim_start_matches("https://e.com").to_string();
                (path, e.destination, e.priority)
            })
            .collect()
    }

    use Destination::*;
    use Priority::*;

    #[test]
    fn ranked_render_blocking_then_images_then_scripts() {
        let html = r#"<html><head>
<link rel=icon href=/favicon.ico>
<script src=/async.js async></script>
<link rel=stylesheet href=/site.css>
<link rel=stylesheet href=/print.css media=print>
<script src=/head.js></script>
<script type=module src=/app.mjs></script>
<link rel=preload as=font href=/f.woff2>
<link rel=preload as=fetch href=/data.json>
<link rel=prefetch href=/next.html>
</head><body>
<script src=/body.js></script>
<img src=/hero.jpg>
<img src=/below.jpg loading=lazy>
<img src=/hero.jpg>
<iframe src=/frame.html></iframe>
<video poster=/poster.jpg src=/movie.mp4></video>
<img src=https://cdn.example/x.png>
</body></html>"#;
        assert_eq!(
            manifest(html),
            [
                ("/site.css".to_string(), Style, RenderBlocking),
                ("/head.js".into(), Script, RenderBlocking),
                ("/f.woff2".into(), Font, RenderBlocking),
                ("/hero.jpg".into(), Image, EagerImage),
                ("/async.js".into(), Script, Priority::NonBlockingScript),
                ("/app.mjs".into(), Script, Priority::NonBlockingScript),
                ("/body.js".into(), Script, Priority::NonBlockingScript),
                ("/favicon.ico".into(), Image, Later),
                ("/print.css".into(), Style, Later),
                ("/frame.html".into(), Document, Later),
                ("/poster.jpg".into(), Image, Later),
                ("/below.jpg".into(), Image, Speculative),
            ]
        );
    }

    #[test]
    fn cors_modes_and_font_types() {
        let page = "https://e.com/";
        let html =
            br#"<link rel=preload as=font href=/a.woff2><script type=module src=/m.js></script>
<link rel=stylesheet href=/s.css crossorigin=use-credentials><script src=/c.js crossorigin></script>
<link rel=preload as=font type=font/ttf href=/b.bin crossorigin=anonymous>"#;
        let entries = page_manifest(&inline_references(html, page), page, &RULES);
        let modes: Vec<_> = entries
            .iter()
            .map(|e| (e.crossorigin.as_deref(), e.media_type.as_deref(), e.module))
            .collect();
        assert_eq!(
            modes,
            [
                (Some("anonymous"), Some("font/woff2"), false),
                (Some("use-credentials"), None, false),
                (Some("anonymous"), None, false),
                (Some("anonymous"), Some("font/ttf"), false),
                (Some("anonymous"), None, true),
            ]
        );
    }

    #[test]
    fn srcset_sizes_and_picture_pick_one_candidate() {
        let html = r#"<body>
<img src=a-small.jpg srcset="a-480.jpg 480w, a-1280.jpg 1280w, a-2560.jpg 2560w" sizes="(max-width: 600px) 100vw, 50vw">
<img src=b.jpg srcset="b-2x.jpg 2x">
<img srcset="c-1x.jpg, c-2x.jpg 2x" src=c-fallback.jpg>
<picture>
  <source media="(max-width: 600px)" srcset="p-phone.webp">
  <source type="image/jxl" srcset="p.jxl">
  <source type="image/webp" srcset="p.webp 1x, p@2.webp 2x">
  <img src="p.jpg">
</picture>
<picture><source media="print" srcset="q-print.jpg"><img src="q.jpg"></picture>
</body>"#;
        let paths: Vec<String> = manifest(html).into_iter().map(|(p, _, _)| p).collect();
        assert_eq!(
            paths,
            [
                "/dir/a-1280.jpg",
                "/dir/b.jpg",
                "/dir/c-1x.jpg",
                "/dir/p.webp",
                "/dir/q.jpg"
            ]
        );
    }

    #[test]
    fn cross_site_only_when_configured_and_bounded() {
        let page = "https://e.com/";
        let html = br#"<script src=https://cdn.example/a.js></script><script src=/b.js></script>
<script src=http://e.com/c.js></script><script src=https://e.com:8443/d.js></script>"#;
        let refs = inline_references(html, page);
        let urls = |rules: &ManifestRules| -> Vec<String> {
            page_manifest(&refs, page, rules)
                .into_iter()
                .map(|e| e.url)
                .collect()
        };
        assert_eq!(urls(&RULES), ["https://e.com/b.js"]);
        let open = ManifestRules {
            cross_site: true,
            max_entries: 3,
        };
        assert_eq!(
            urls(&open),
            [
                "https://cdn.example/a.js",
                "https://e.com/b.js",
                "http://e.com/c.js"
            ]
        );
    }

    #[test]
    fn stylesheet_references_join_at_their_rank() {
        let page = "https://e.com/";
        let refs = inline_references(
            br#"<link rel=stylesheet href=/s.css><img src=/i.png>"#,
            page,
        );
        let mut entries = page_manifest(&refs, page, &RULES);
        let sheet = entries[0].clone();
        let css = crate::css::stylesheet_references(
            b"@import 'more.css'; @font-face{src:url(f.woff2)} a{background:url(/i.png)} b{background:url(bg.png)}",
            &sheet.url,
        );
        add_stylesheet_references(&mut entries, &sheet, &css, page, &RULES);
        let got: Vec<_> = entries
            .iter()
            .map(|e| {
                (
                    e.url.as_str(),
                    e.priority,
                    e.depth,
                    e.crossorigin.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("https://e.com/s.css", RenderBlocking, 0, None),
                ("https://e.com/more.css", RenderBlocking, 1, None),
                (
                    "https://e.com/f.woff2",
                    RenderBlocking,
                    1,
                    Some("anonymous")
                ),
                ("https://e.com/i.png", EagerImage, 0, None),
                ("https://e.com/bg.png", Speculative, 1, None),
            ]
        );
    }

    #[test]
    fn a_page_with_thousands_of_references_keeps_a_bounded_manifest() {
        let mut html = String::new();
        for i in 0..20_000 {
            html.push_str(&format!(
                "<img src=/i{i}.png><script src='%%{i}:bad'></script>"
            ));
        }
        let page = "https://e.com/";
        let entries = page_manifest(&inline_references(html.as_bytes(), page), page, &RULES);
        assert_eq!(entries.len(), 64);
    }
}
