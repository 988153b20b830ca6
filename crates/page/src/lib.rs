//! HTML pages: the inline references a page makes.
//!
//! [`inline_references`] lists what a browser fetches by itself while it renders a page
//! (stylesheets, scripts, images, frames, media, …), each with the byte range of the tag
//! that makes the reference. The `hint` stage announces these (`Link: rel=preload`,
//! 103 Early Hints, push) and the lab's AID model asks when the client learns of them.
//!
//! Extraction streams with lol_html: [`InlineScanner`] takes the document in chunks of
//! any size, as they arrive from an origin. Byte offsets are exact — they are lol_html's
//! source locations, counted in the input bytes in their original encoding, and do not
//! depend on how the input was cut into chunks.

mod srcset;

use std::cell::RefCell;
use std::rc::Rc;

use lol_html::html_content::Element;
use lol_html::{element, HtmlRewriter, Settings};
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
pub struct InlineScanner {
    rewriter: HtmlRewriter<'static, fn(&[u8])>,
    state: Rc<RefCell<ScanState>>,
    /// Set once lol_html reports an error; the rest of the input is then ignored.
    stopped: bool,
}

impl InlineScanner {
    /// A scanner for the page at `base`.
    pub fn new(base: &str) -> Self {
        let state = Rc::new(RefCell::new(ScanState {
            base: Url::parse(base).ok(),
            saw_base_element: false,
            found: Vec::new(),
        }));
        let on_element = Rc::clone(&state);
        let settings = Settings::new()
            // Best effort over ambiguous markup instead of an error: a browser renders it too.
            .with_strict(false)
            .append_element_content_handler(element!(
                "base[href], link[href], script[src], img, source, iframe[src], video, \
                 audio[src], object[data], embed[src], input[src]",
                move |el| {
                    on_element.borrow_mut().visit(el);
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

    /// Ends the document (a truncated one included) and returns the references found.
    pub fn finish(self) -> Vec<InlineReference> {
        if !self.stopped {
            // An error at the end only means the document was cut short; what was
            // found before it stands.
            let _ = self.rewriter.end();
        }
        std::mem::take(&mut self.state.borrow_mut().found)
    }
}

struct ScanState {
    base: Option<Url>,
    saw_base_element: bool,
    found: Vec<InlineReference>,
}

impl ScanState {
    fn visit(&mut self, el: &Element) {
        let location = el.source_location().bytes();
        let mut add = |kind: ReferenceKind, value: &str| {
            if let Some(url) = resolve(self.base.as_ref(), value) {
                self.found.push(InlineReference {
                    kind,
                    url,
                    offset: location.start,
                    tag_end: location.end,
                });
            }
        };
        let attr = |name: &str| el.get_attribute(name);
        match el.tag_name().as_str() {
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
                    add(kind, &attr("href").unwrap_or_default());
                }
            }
            "script" => add(ReferenceKind::Script, &attr("src").unwrap_or_default()),
            "img" | "source" => {
                if let Some(src) = attr("src") {
                    let kind = if el.tag_name() == "img" {
                        ReferenceKind::Image
                    } else {
                        ReferenceKind::Media
                    };
                    add(kind, &src);
                }
                if let Some(srcset) = attr("srcset") {
                    for candidate in srcset::candidate_urls(&srcset) {
                        add(ReferenceKind::SrcsetCandidate, candidate);
                    }
                }
            }
            "iframe" => add(ReferenceKind::Frame, &attr("src").unwrap_or_default()),
            "video" | "audio" => {
                if let Some(poster) = attr("poster").filter(|_| el.tag_name() == "video") {
                    add(ReferenceKind::Poster, &poster);
                }
                if let Some(src) = attr("src") {
                    add(ReferenceKind::Media, &src);
                }
            }
            "object" => add(ReferenceKind::Object, &attr("data").unwrap_or_default()),
            "embed" => add(ReferenceKind::Embed, &attr("src").unwrap_or_default()),
            "input" if attr("type").is_some_and(|t| t.trim().eq_ignore_ascii_case("image")) => {
                add(ReferenceKind::ImageInput, &attr("src").unwrap_or_default());
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
