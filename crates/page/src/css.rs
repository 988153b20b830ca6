//! The URLs a stylesheet makes the browser fetch: `@import` rules, the first `url()`
//! of each `@font-face` `src` (a browser fetches the first format it supports, and
//! authors list the best first), and other `url()` values (images, fetched only when
//! an element uses the rule: speculative).
//!
//! A small scanner over CSS tokens, not a parser: it skips comments and strings,
//! tracks which block it is in, and never fails. Work is linear in the input.

use url::Url;

/// What a stylesheet reference is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CssReferenceKind {
    /// `@import`: another stylesheet, render-blocking like this one.
    Import,
    /// The preferred source of an `@font-face`.
    Font,
    /// Any other `url()`: a background, a cursor, a mask, a later font source.
    Image,
}

/// One URL a stylesheet references, resolved against the stylesheet's own URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CssReference {
    pub kind: CssReferenceKind,
    pub url: String,
}

/// At most this many references are read from one stylesheet.
pub const MAX_REFERENCES: usize = 256;

/// The references of `css` (any bytes; invalid UTF-8 is replaced) served at
/// `sheet_url`, in order, each URL once, at most [`MAX_REFERENCES`]. URLs that do not
/// resolve and `data:` URLs are left out.
pub fn stylesheet_references(css: &[u8], sheet_url: &str) -> Vec<CssReference> {
    let Ok(base) = Url::parse(sheet_url) else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(css);
    let mut scanner = Scanner {
        rest: &text,
        found: Vec::new(),
        base,
    };
    scanner.run();
    scanner.found
}

struct Scanner<'a> {
    rest: &'a str,
    found: Vec<CssReference>,
    base: Url,
}

impl Scanner<'_> {
    fn run(&mut self) {
        // Block depth, and the depth of the @font-face block we are in (if any).
        let mut depth = 0usize;
        let mut font_face_at: Option<usize> = None;
        let mut pending_font_face = false;
        // Inside a font face, whether its `src` already gave its preferred source.
        let mut font_source_taken = false;
        let mut after_import = false;
        while self.found.len() < MAX_REFERENCES {
            let Some(c) = self.rest.chars().next() else {
                return;
            };
            if self.rest.starts_with("/*") {
                self.rest = self.rest[2..]
                    .find("*/")
                    .map_or("", |end| &self.rest[2 + end + 2..]);
                continue;
            }
            match c {
                '"' | '\'' => {
                    let value = self.string(c);
                    if after_import {
                        self.add(CssReferenceKind::Import, &value);
                        after_import = false;
                    }
                }
                '{' => {
                    depth += 1;
                    if pending_font_face {
                        font_face_at = Some(depth);
                        font_source_taken = false;
                        pending_font_face = false;
                    }
                    self.advance(1);
                }
                '}' => {
                    if font_face_at == Some(depth) {
                        font_face_at = None;
                    }
                    depth = depth.saturating_sub(1);
                    self.advance(1);
                }
                ';' => {
                    after_import = false;
                    self.advance(1);
                }
                '@' => {
                    let name = self.identifier_after(1);
                    after_import = name.eq_ignore_ascii_case("import");
                    pending_font_face = name.eq_ignore_ascii_case("font-face");
                    self.advance(1 + name.len());
                }
                'u' | 'U' if self.starts_url() => {
                    let value = self.url_token();
                    let kind = if after_import {
                        after_import = false;
                        CssReferenceKind::Import
                    } else if font_face_at.is_some() && !font_source_taken {
                        font_source_taken = true;
                        CssReferenceKind::Font
                    } else {
                        CssReferenceKind::Image
                    };
                    self.add(kind, &value);
                }
                c if c.is_alphanumeric() || c == '-' || c == '_' => {
                    // Skip a whole identifier, so `myurl(` is not `url(`.
                    let name = self.identifier_after(0);
                    self.advance(name.len().max(c.len_utf8()));
                }
                c => self.advance(c.len_utf8()),
            }
        }
    }

    fn advance(&mut self, bytes: usize) {
        self.rest = self.rest.get(bytes..).unwrap_or("");
    }

    /// The identifier starting `skip` bytes in (ASCII letters, digits, `-`, `_`).
    fn identifier_after(&self, skip: usize) -> &str {
        let tail = self.rest.get(skip..).unwrap_or("");
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .unwrap_or(tail.len());
        &tail[..end]
    }

    fn starts_url(&self) -> bool {
        self.rest
            .get(..4)
            .is_some_and(|head| head.eq_ignore_ascii_case("url("))
    }

    /// A quoted string starting here (the quote included), escapes kept literally but
    /// an escaped quote does not end it; consumed.
    fn string(&mut self, quote: char) -> String {
        let body = &self.rest[1..];
        let mut escaped = false;
        for (i, c) in body.char_indices() {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == quote || c == '\n' {
                let value = body[..i].to_string();
                self.rest = &body[i + c.len_utf8()..];
                return value;
            }
        }
        self.rest = "";
        String::new()
    }

    /// `url(…)` starting here, quoted or not; consumed to its `)`.
    fn url_token(&mut self) -> String {
        self.advance(4);
        self.rest = self.rest.trim_start();
        let value = match self.rest.chars().next() {
            Some(quote @ ('"' | '\'')) => self.string(quote),
            _ => {
                let end = self.rest.find(')').unwrap_or(self.rest.len());
                let value = self.rest[..end].trim().to_string();
                self.rest = &self.rest[end..];
                value
            }
        };
        let close = self.rest.find(')').map_or(self.rest.len(), |i| i + 1);
        self.advance(close);
        value
    }

    fn add(&mut self, kind: CssReferenceKind, value: &str) {
        let value = value.trim();
        if value.is_empty() || value.starts_with('#') {
            return;
        }
        let Ok(url) = self.base.join(value) else {
            return;
        };
        if !matches!(url.scheme(), "http" | "https") {
            return;
        }
        let url = String::from(url);
        if !self.found.iter().any(|r| r.url == url) {
            self.found.push(CssReference { kind, url });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CssReferenceKind::*;

    fn refs(css: &str) -> Vec<(CssReferenceKind, String)> {
        stylesheet_references(css.as_bytes(), "https://e.com/css/site.css")
            .into_iter()
            .map(|r| {
                (
                    r.kind,
                    r.url.trim_start_matches("https://e.com").to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn imports_fonts_and_images() {
        let css = r#"
@import "base.css";
@import url('print.css') print;
@IMPORT url(/abs.css);
/* url(commented.png) @import "no.css"; */
@font-face { font-family: X; src: local(X), url("../fonts/x.woff2") format("woff2"),
  url(../fonts/x.woff) format("woff"); }
@font-face { font-family: Y; src: url(y.woff2); }
body { background: url( bg.png ) no-repeat; content: "url(not-a-url.png)"; }
.a { mask: url(#mask); cursor: url(data:image/png;base64,AA), auto; }
.b { background-image: myurl(x.png), URL(up.PNG); }
.c { background: url(bg.png); }
"#;
        assert_eq!(
            refs(css),
            [
                (Import, "/css/base.css".to_string()),
                (Import, "/css/print.css".into()),
                (Import, "/abs.css".into()),
                (Font, "/fonts/x.woff2".into()),
                (Image, "/fonts/x.woff".into()),
                (Font, "/css/y.woff2".into()),
                (Image, "/css/bg.png".into()),
                (Image, "/css/up.PNG".into()),
            ]
        );
    }

    #[test]
    fn hostile_stylesheets_are_bounded_and_never_panic() {
        let many: String = (0..10_000)
            .map(|i| format!("a{{b:url(i{i}.png)}}"))
            .collect();
        assert_eq!(refs(&many).len(), MAX_REFERENCES);
        for broken in [
            "url(",
            "@import",
            "@import \"unterminated",
            "/* never closed",
            "}}}}{{{{url('x",
            "@font-face{src:url(",
            "\u{e9}\u{6f22}url(\u{e9}.png)",
            "url(http://[bad)",
        ] {
            refs(broken);
        }
        assert!(stylesheet_references(b"\xff\xfe url(a.png)", "not a url").is_empty());
        assert_eq!(
            stylesheet_references(b"\xff\xfe url(a.png)", "https://e.com/").len(),
            1
        );
    }
}
