//! HTML pages: the inline references a page makes.
//!
//! [`inline_references`] lists what a browser fetches by itself while it renders a page
//! (stylesheets, scripts, images, frames, media, …), each with the byte range of the tag
//! that makes the reference. The `hint` stage announces these (`Link: rel=preload`,
//! 103 Early Hints, push) and the lab's AID model asks when the client learns of them.
//!
//! [`manifest`] turns them into a page's manifest: what a browser at a default viewport
//! fetches, with the destination a preload needs and the order that helps rendering.
//!
//! Extraction streams with lol_html: [`InlineScanner`] takes the document in chunks of
//! any size, as they arrive from an origin. Byte offsets are exact — they are lol_html's
//! source locations, counted in the input bytes in their original encoding, and do not
//! depend on how the input was cut into chunks.

pub mod css;
pub mod manifest;
mod sizes;
mod srcset;

use std::sync::{Arc, Mutex, PoisonError};

use lol_html::element;
use lol_html::send::{Element, HtmlRewriter, Settings};
use url::Url;

/// What a reference is, as far as fetching goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReferenceKind {
    /// `<link href>` whose `rel` holds `stylesheet`, `preload`, `modulepreload` or `icon`;
    /// `destination` is its `as` attribute (what a preload fetches).
    Link {
        rel: String,
        destination: Option<String>,
    },
    /// `<script src>`.
    Script,
    /// `<img src>`.
    Image,
    /// One URL of an `<img srcset>` or `<source srcset>`: a browser fetches only one
    /// candidate per element, chosen by viewport and pixel density.
    SrcsetCandidate,
    /// `<iframe src>`.
    Frame,
    /// `<video poster>`.
    Poster,
    /// `<audio src>`, `<video src>`, `<source src>`.
    Media,
    /// `<object data>`.
    Object,
    /// `<embed src>`.
    Embed,
    /// `<input type=image src>`.
    ImageInput,
}

/// One URL a page makes the browser fetch while rendering it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InlineReference {
    pub kind: ReferenceKind,
    /// The absolute URL: resolved against the page URL, or against the page's first
    /// `<base href>` for references after it.
    pub url: String,
    /// Byte offset in the document where the reference's start tag begins (`<`).
    pub offset: usize,
    /// Byte offset just past the start tag's `>`: a client knows the reference once the
    /// bytes up to here have arrived.
    pub tag_end: usize,
    /// Whether a browser with the [`Viewport::DEFAULT`] fetches this URL for its
    /// element: false for the candidates of an `srcset` (or of a `<picture>`) that it
    /// does not pick. Every other reference is selected.
    pub selected: bool,
    /// What the element says about how to fetch it.
    pub fetch: FetchAttributes,
}

/// The attributes of a referencing element that decide how and when a browser
/// fetches it, as written (lowercased where HTML treats them case-insensitively).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FetchAttributes {
    /// The element comes before `<body>` (or anything only a body holds): a classic
    /// script here blocks the first render.
    pub in_head: bool,
    /// A script with `async` or `defer`: it does not block the parser.
    pub deferred: bool,
    /// `<script type=module>`: fetched in CORS mode, deferred.
    pub module: bool,
    /// `loading=lazy`: fetched only when near the viewport.
    pub lazy: bool,
    /// `media` of a stylesheet or a `<source>`.
    pub media: Option<String>,
    /// `crossorigin`: `anonymous` (also for an empty or unknown value) or
    /// `use-credentials`.
    pub crossorigin: Option<String>,
    /// `type`: the media type a `<link>` or `<source>` declares.
    pub media_type: Option<String>,
}

/// The screen a page's images are chosen for when no client says otherwise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Viewport {
    /// Width in CSS pixels.
    pub width: f32,
    /// Device pixels per CSS pixel.
    pub pixel_ratio: f32,
}

impl Viewport {
    /// A desktop browser window: 1280 CSS pixels at one device pixel each (headless
    /// Chromium's and the most common desktop width).
    pub const DEFAULT: Viewport = Viewport {
        width: 1280.0,
        pixel_ratio: 1.0,
    };
}

/// Every inline reference of `html`, in document order, with relative URLs resolved
/// against `base` (the page's own URL). Invalid UTF-8 and truncated documents yield
/// the references found in what could be read; this never panics.
///
/// References a browser would not fetch are left out: empty values, URLs that do not
/// resolve (including every relative URL when `base` is not a valid absolute URL),
/// and `data:`, `javascript:`, `about:` and `blob:` URLs.
pub fn inline_references(html: &[u8], base: &str) -> Vec<InlineReference> {
    let mut scanner = InlineScanner::new(base);
    scanner.feed(html);
    scanner.finish()
}

/// Streaming form of [`inline_references`]: feed the document in chunks as it arrives.
/// It is `Send`, so a scan of a page streaming to a client may move between the
/// threads that feed it.
pub struct InlineScanner {
    rewriter: HtmlRewriter<'static, fn(&[u8])>,
    state: Arc<Mutex<ScanState>>,
    /// Set once lol_html reports an error; the rest of the input is then ignored.
    stopped: bool,
}

impl InlineScanner {
    /// A scanner for the page at `base`.
    pub fn new(base: &str) -> Self {
        let state = Arc::new(Mutex::new(ScanState {
            base: Url::parse(base).ok(),
            saw_base_element: false,
            in_head: true,
            picture: None,
            found: Vec::new(),
        }));
        let on_element = Arc::clone(&state);
        let settings = Settings::new_send()
            // Best effort over ambiguous markup instead of an error: a browser renders it too.
            .with_strict(false)
            .append_element_content_handler(element!(
                "base[href], link[href], script[src], img, source, iframe[src], video, \
                 audio[src], object[data], embed[src], input[src], body, picture",
                move |el| {
                    on_element
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .visit(el);
                    Ok(())
                }
            ));
        // The rewritten output is not needed; a no-op sink costs nothing.
        let discard: fn(&[u8]) = |_| {};
        Self {
            rewriter: HtmlRewriter::new(settings, discard),
            state,
            stopped: false,
        }
    }

    /// Parses the next chunk of the document.
    pub fn feed(&mut self, chunk: &[u8]) {
        if !self.stopped && self.rewriter.write(chunk).is_err() {
            self.stopped = true;
        }
    }

    /// How many references were found so far: a caller bounding its memory may stop
    /// feeding past a count.
    pub fn found(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .found
            .len()
    }

    /// Ends the document (a truncated one included) and returns the references found.
    pub fn finish(self) -> Vec<InlineReference> {
        if !self.stopped {
            // An error at the end only means the document was cut short; what was
            // found before it stands.
            let _ = self.rewriter.end();
        }
        std::mem::take(
            &mut self
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .found,
        )
    }
}

struct ScanState {
    base: Option<Url>,
    saw_base_element: bool,
    /// No body content seen yet.
    in_head: bool,
    /// Inside a `<picture>`: whether one of its `<source>`s was already picked (its
    /// `<img>` then only supplies the element, not the URL).
    picture: Option<bool>,
    found: Vec<InlineReference>,
}

/// `<source>` media types a browser decodes (others are skipped when picking one).
const SUPPORTED_IMAGE_TYPES: [&str; 8] = [
    "image/avif",
    "image/webp",
    "image/jpeg",
    "image/png",
    "image/gif",
    "image/svg+xml",
    "image/apng",
    "image/bmp",
];

impl ScanState {
    fn visit(&mut self, el: &Element<'_, '_>) {
        let tag = el.tag_name();
        let head_element = matches!(tag.as_str(), "base" | "link" | "script");
        if !head_element {
            self.in_head = false;
        }
        let attr = |name: &str| el.get_attribute(name);
        let lowered = |name: &str| attr(name).map(|v| v.trim().to_ascii_lowercase());
        let fetch = FetchAttributes {
            in_head: self.in_head,
            deferred: attr("async").is_some() || attr("defer").is_some(),
            module: lowered("type").is_some_and(|t| t == "module"),
            lazy: lowered("loading").is_some_and(|l| l == "lazy"),
            media: lowered("media").filter(|m| !m.is_empty()),
            crossorigin: lowered("crossorigin").map(|c| {
                if c == "use-credentials" {
                    c
                } else {
                    "anonymous".to_string()
                }
            }),
            media_type: lowered("type").filter(|t| !t.is_empty()),
        };
        let location = el.source_location().bytes();
        let mut add = |kind: ReferenceKind, value: &str, selected: bool| {
            if let Some(url) = resolve(self.base.as_ref(), value) {
                self.found.push(InlineReference {
                    kind,
                    url,
                    offset: location.start,
                    tag_end: location.end,
                    selected,
                    fetch: fetch.clone(),
                });
            }
        };
        match tag.as_str() {
            // Only the first <base href> counts (HTML: "frozen base URL").
            "base" if !self.saw_base_element => {
                self.saw_base_element = true;
                if let Some(new_base) = attr("href").and_then(|h| join(self.base.as_ref(), &h)) {
                    self.base = Some(new_base);
                }
            }
            "link" => {
                let rel = attr("rel").unwrap_or_default();
                let fetched = rel.split_ascii_whitespace().any(|token| {
                    ["stylesheet", "preload", "modulepreload", "icon"]
                        .iter()
                        .any(|r| token.eq_ignore_ascii_case(r))
                });
                if fetched {
                    let kind = ReferenceKind::Link {
                        rel: rel.trim().to_ascii_lowercase(),
                        destination: attr("as").map(|a| a.trim().to_ascii_lowercase()),
                    };
                    add(kind, &attr("href").unwrap_or_default(), true);
                }
            }
            "script" => add(
                ReferenceKind::Script,
                &attr("src").unwrap_or_default(),
                true,
            ),
            "picture" => self.picture = Some(false),
            "img" => {
                // A picture's <img> ends its choice; a source already picked wins.
                let source_picked = self.picture.take().unwrap_or(false);
                let src = attr("src");
                let srcset = attr("srcset").unwrap_or_default();
                let mut candidates = srcset::candidates(&srcset);
                // `src` is the 1x candidate unless srcset names one or uses widths.
                let src_is_candidate = src.is_some()
                    && !candidates.iter().any(|c| {
                        c.descriptor == srcset::Descriptor::Density(1.0)
                            || matches!(c.descriptor, srcset::Descriptor::Width(_))
                    });
                if let Some(src) = src.as_deref().filter(|_| src_is_candidate) {
                    candidates.push(srcset::Candidate {
                        url: src,
                        descriptor: srcset::Descriptor::Density(1.0),
                    });
                }
                let sizes = attr("sizes");
                let slot = sizes::slot_width(sizes.as_deref(), &Viewport::DEFAULT);
                let picked = (!source_picked)
                    .then(|| srcset::select(&candidates, slot, Viewport::DEFAULT.pixel_ratio))
                    .flatten();
                if let Some(src) = &src {
                    let is_picked = src_is_candidate && picked == Some(candidates.len() - 1);
                    add(ReferenceKind::Image, src, is_picked);
                }
                for (i, candidate) in srcset::candidates(&srcset).iter().enumerate() {
                    add(
                        ReferenceKind::SrcsetCandidate,
                        candidate.url,
                        picked == Some(i),
                    );
                }
            }
            "source" => {
                let in_picture = self.picture.is_some();
                let eligible = self.picture == Some(false)
                    && fetch
                        .media_type
                        .as_deref()
                        .is_none_or(|t| SUPPORTED_IMAGE_TYPES.contains(&t))
                    && fetch
                        .media
                        .as_deref()
                        .is_none_or(|m| sizes::media_matches(m, &Viewport::DEFAULT));
                if let Some(src) = attr("src") {
                    add(ReferenceKind::Media, &src, !in_picture);
                }
                if let Some(srcset) = attr("srcset") {
                    let candidates = srcset::candidates(&srcset);
                    let sizes = attr("sizes");
                    let slot = sizes::slot_width(sizes.as_deref(), &Viewport::DEFAULT);
                    let picked = eligible
                        .then(|| srcset::select(&candidates, slot, Viewport::DEFAULT.pixel_ratio))
                        .flatten();
                    if picked.is_some() {
                        self.picture = Some(true);
                    }
                    for (i, candidate) in candidates.iter().enumerate() {
                        add(
                            ReferenceKind::SrcsetCandidate,
                            candidate.url,
                            picked == Some(i),
                        );
                    }
                }
            }
            "iframe" => add(ReferenceKind::Frame, &attr("src").unwrap_or_default(), true),
            "video" | "audio" => {
                if let Some(poster) = attr("poster").filter(|_| tag == "video") {
                    add(ReferenceKind::Poster, &poster, true);
                }
                if let Some(src) = attr("src") {
                    add(ReferenceKind::Media, &src, true);
                }
            }
            "object" => add(
                ReferenceKind::Object,
                &attr("data").unwrap_or_default(),
                true,
            ),
            "embed" => add(ReferenceKind::Embed, &attr("src").unwrap_or_default(), true),
            "input" if attr("type").is_some_and(|t| t.trim().eq_ignore_ascii_case("image")) => {
                add(
                    ReferenceKind::ImageInput,
                    &attr("src").unwrap_or_default(),
                    true,
                );
            }
            _ => {}
        }
    }
}

/// The absolute URL a browser would fetch for attribute `value`, if any.
fn resolve(base: Option<&Url>, value: &str) -> Option<String> {
    let url = join(base, value)?;
    let never_fetched = ["data", "javascript", "about", "blob"].contains(&url.scheme());
    (!never_fetched).then(|| url.into())
}

/// `value` (surrounding ASCII whitespace ignored, as browsers do) resolved against `base`.
fn join(base: Option<&Url>, value: &str) -> Option<Url> {
    let value = value.trim_matches(|c: char| c.is_ascii_whitespace());
    if value.is_empty() {
        return None;
    }
    match base {
        Some(base) => base.join(value).ok(),
        None => Url::parse(value).ok(),
    }
}

#[cfg(test)]
mod tests;
