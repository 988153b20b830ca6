//! Minified text variants (HTML, CSS, JavaScript) that keep the original's meaning,
//! made by well-kept minifiers (cargo feature `minify`): `minify-html` for pages
//! (with their inline styles and scripts), and the crates it uses for those,
//! `lightningcss` for stylesheets and `oxc` (parser, minifier, code generator) for
//! scripts, at the same versions, so the feature costs one dependency tree.
//!
//! Meaning comes first: input that is not UTF-8, that a minifier rejects, that nests
//! deeper than [`MAX_NESTING`] (recursive parsers would overflow their stack on it,
//! which no `catch_unwind` catches), or a page whose `<script>` or `<style>` never
//! ends, gets no variant; a minifier that panics is caught and gets none either. The
//! caller serves the original then.
//!
//! Without the feature, [`MINIFIERS`] is `false` and [`minify`] always answers
//! [`TextError::Unavailable`]: text originals are not worth queuing.

use wirefold_http::fidelity::TextKind;

/// Whether this build has the minifiers (cargo feature `minify`).
pub const MINIFIERS: bool = cfg!(feature = "minify");

/// Brackets (`(`, `[`, `{`) open at once at most, counted crudely over the whole
/// input (strings and comments too): real code stays far below; a pathological
/// input (a megabyte of `(`) would overflow a recursive parser's stack.
pub const MAX_NESTING: usize = 512;

/// Stack of the thread a minifier runs on: recursive descent over [`MAX_NESTING`]
/// levels in an unoptimised build needs more than a blocking-pool thread's 2 MiB.
/// Reserved address space, touched only as deep as the input goes.
#[cfg(feature = "minify")]
const MINIFIER_STACK: usize = 256 << 20;

/// Why a text original has no minified variant.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TextError {
    #[error("this build has no minifiers (cargo feature `minify`)")]
    Unavailable,
    #[error("not UTF-8")]
    NotUtf8,
    #[error("nested more than {MAX_NESTING} levels deep")]
    TooDeep,
    #[error("a <script> or <style> element never ends")]
    Unterminated,
    #[error("the minifier rejected it: {0}")]
    Invalid(String),
    #[error("the minifier panicked")]
    Panicked,
    #[error("the minified text is not smaller")]
    NotSmaller,
    #[error("not declared UTF-8")]
    Charset,
}

impl TextError {
    /// The reason label in `wirefold_fidelity_refused_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            TextError::Unavailable | TextError::NotSmaller => "no_saving",
            TextError::NotUtf8 | TextError::Unterminated | TextError::Invalid(_) => "invalid",
            TextError::TooDeep => "too_deep",
            TextError::Panicked => "panicked",
            TextError::Charset => "charset",
        }
    }
}

/// The minified form of `bytes`, a text of `kind` served as `content_type`. Runs
/// the minifier on a thread of its own with a large stack, under `catch_unwind`; the
/// result is strictly smaller than the input. Only UTF-8 text declared so is
/// minified (minifiers write characters where the original had escapes or
/// entities, which another charset would read differently): `charset=utf-8` in
/// `content_type`, or, for a page without one, a `<meta charset>` naming UTF-8 in
/// its first 1024 bytes.
pub fn minify(kind: TextKind, content_type: &str, bytes: &[u8]) -> Result<Vec<u8>, TextError> {
    if !MINIFIERS {
        return Err(TextError::Unavailable);
    }
    if !declared_utf8(kind, content_type, bytes) {
        return Err(TextError::Charset);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| TextError::NotUtf8)?;
    if nesting(text) > MAX_NESTING {
        return Err(TextError::TooDeep);
    }
    if kind == TextKind::Html && !raw_text_elements_end(text) {
        return Err(TextError::Unterminated);
    }
    let out = run(kind, text)?;
    if out.len() >= bytes.len() {
        return Err(TextError::NotSmaller);
    }
    Ok(out)
}

/// The share of `original` bytes a variant of `variant` bytes saves (0 when larger).
pub fn saving(original: u64, variant: u64) -> f64 {
    if original == 0 {
        return 0.0;
    }
    original.saturating_sub(variant) as f64 / original as f64
}

/// Whether the text is declared UTF-8 (see [`minify`]).
fn declared_utf8(kind: TextKind, content_type: &str, bytes: &[u8]) -> bool {
    let utf8 = |name: &str| {
        let name = name.trim().trim_matches(['"', '\'']);
        name.eq_ignore_ascii_case("utf-8") || name.eq_ignore_ascii_case("utf8")
    };
    let parameter = content_type.split(';').skip(1).find_map(|p| {
        let (key, value) = p.split_once('=')?;
        key.trim().eq_ignore_ascii_case("charset").then_some(value)
    });
    match parameter {
        Some(charset) => utf8(charset),
        None if kind == TextKind::Html => {
            let head =
                String::from_utf8_lossy(&bytes[..bytes.len().min(1024)]).to_ascii_lowercase();
            head.split("charset=").skip(1).any(|rest| {
                let name: String = rest
                    .trim_start_matches(['"', '\''])
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                utf8(&name)
            })
        }
        None => false,
    }
}

/// The deepest bracket nesting, counted over every byte.
fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for b in text.bytes() {
        match b {
            b'(' | b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Whether every `<script` and `<style` start tag is followed by its end tag
/// (ASCII case-insensitive). A page whose raw text runs to its end would be
/// closed by the minifier: refused rather than reinterpreted.
fn raw_text_elements_end(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    for element in ["script", "style"] {
        let open = format!("<{element}");
        let close = format!("</{element}");
        let mut at = 0;
        while let Some(start) = lower[at..].find(&open) {
            let after = at + start + open.len();
            // `<scripts>` or `<styleguide>` are other elements.
            let is_element = lower[after..]
                .bytes()
                .next()
                .is_none_or(|b| b.is_ascii_whitespace() || b == b'>' || b == b'/');
            if !is_element {
                at = after;
                continue;
            }
            let Some(end) = lower[after..].find(&close) else {
                return false;
            };
            at = after + end + close.len();
        }
    }
    true
}

#[cfg(not(feature = "minify"))]
fn run(_kind: TextKind, _text: &str) -> Result<Vec<u8>, TextError> {
    Err(TextError::Unavailable)
}

#[cfg(feature = "minify")]
fn run(kind: TextKind, text: &str) -> Result<Vec<u8>, TextError> {
    let text = text.to_owned();
    let worker = std::thread::Builder::new()
        .name("minifier".into())
        .stack_size(MINIFIER_STACK)
        .spawn(move || {
            std::panic::catch_unwind(move || match kind {
                TextKind::Html => Ok(minifiers::html(&text)),
                TextKind::Css => minifiers::css(&text),
                TextKind::Javascript => minifiers::javascript(&text),
            })
        })
        .map_err(|e| TextError::Invalid(format!("no minifier thread: {e}")))?;
    match worker.join() {
        Ok(Ok(result)) => result,
        Ok(Err(_)) | Err(_) => Err(TextError::Panicked),
    }
}

#[cfg(feature = "minify")]
mod minifiers {
    use super::TextError;

    /// minify-html, spec-compliant output (no non-compliant shortcuts), comments
    /// removed except SSI, inline CSS and JS minified (each falls back to its own
    /// text when its minifier rejects it).
    pub(super) fn html(text: &str) -> Vec<u8> {
        let mut cfg = minify_html::Cfg::new();
        cfg.minify_css = true;
        cfg.minify_js = true;
        cfg.keep_ssi_comments = true;
        minify_html::minify(text.as_bytes(), &cfg)
    }

    /// lightningcss without error recovery (invalid CSS is refused, not repaired)
    /// and without browser targets (no rewriting for particular browsers).
    pub(super) fn css(text: &str) -> Result<Vec<u8>, TextError> {
        use lightningcss::stylesheet::{MinifyOptions, ParserOptions, PrinterOptions, StyleSheet};
        let invalid = |e: &dyn std::fmt::Display| TextError::Invalid(e.to_string());
        let mut sheet =
            StyleSheet::parse(text, ParserOptions::default()).map_err(|e| invalid(&e))?;
        sheet
            .minify(MinifyOptions::default())
            .map_err(|e| invalid(&e))?;
        let printed = sheet
            .to_css(PrinterOptions {
                minify: true,
                ..PrinterOptions::default()
            })
            .map_err(|e| invalid(&e))?;
        Ok(printed.code.into_bytes())
    }

    /// oxc: parsed as a classic script, else as a module (only a module may import
    /// or export); compressed with its safest options (unused code kept, function
    /// and class names kept), local names mangled (top-level names are globals and
    /// keep theirs).
    pub(super) fn javascript(text: &str) -> Result<Vec<u8>, TextError> {
        use oxc_allocator::Allocator;
        use oxc_codegen::{Codegen, CodegenOptions};
        use oxc_minifier::{CompressOptions, MangleOptions, Minifier, MinifierOptions};
        use oxc_parser::Parser;
        use oxc_span::SourceType;

        let allocator = Allocator::default();
        let mut parsed = Parser::new(&allocator, text, SourceType::cjs()).parse();
        if !parsed.errors.is_empty() || parsed.panicked {
            parsed = Parser::new(&allocator, text, SourceType::mjs()).parse();
        }
        if let Some(error) = parsed.errors.first() {
            return Err(TextError::Invalid(error.to_string()));
        }
        if parsed.panicked {
            return Err(TextError::Invalid("the parser gave up".into()));
        }
        let mut program = parsed.program;
        let minified = Minifier::new(MinifierOptions {
            mangle: Some(MangleOptions {
                top_level: false,
                keep_names: true.into(),
                debug: false,
            }),
            compress: Some(CompressOptions::safest()),
        })
        .minify(&allocator, &mut program);
        let code = Codegen::new()
            .with_options(CodegenOptions {
                minify: true,
                ..CodegenOptions::default()
            })
            .with_scoping(minified.scoping)
            .with_private_member_mappings(minified.class_private_mappings)
            .build(&program)
            .code;
        Ok(code.into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_and_unterminated_elements_are_seen() {
        assert_eq!(nesting("a(b[c{d}])x{}"), 3);
        assert_eq!(nesting(")))((("), 3);
        assert!(raw_text_elements_end(
            "<p><SCRIPT>x()</script><style>p{}</STYLE><scripts>"
        ));
        assert!(!raw_text_elements_end("<p><script>x()"));
        assert!(!raw_text_elements_end("<style type=text/css>p{}"));
        assert!((saving(100, 90) - 0.1).abs() < 1e-12);
        assert_eq!(saving(100, 120), 0.0);
    }

    const U8: &str = "text/plain; charset=utf-8";

    #[test]
    fn only_text_declared_utf8_is_minified() {
        let html = TextKind::Html;
        assert!(declared_utf8(html, "text/html; charset=UTF-8", b""));
        assert!(declared_utf8(html, "text/html;charset=\"utf-8\"", b""));
        assert!(!declared_utf8(
            html,
            "text/html; charset=iso-8859-1",
            b"<meta charset=utf-8>"
        ));
        assert!(declared_utf8(
            html,
            "text/html",
            b"<head><meta charset=\"UTF-8\">"
        ));
        assert!(declared_utf8(
            html,
            "text/html",
            b"<meta http-equiv=content-type content='text/html; charset=utf-8'>"
        ));
        assert!(!declared_utf8(
            html,
            "text/html",
            b"<meta charset=windows-1252>"
        ));
        assert!(!declared_utf8(TextKind::Css, "text/css", b"p{}"));
    }

    #[cfg(not(feature = "minify"))]
    #[test]
    fn without_the_feature_nothing_is_minified() {
        const { assert!(!MINIFIERS) };
        assert_eq!(
            minify(TextKind::Css, U8, b"p { color: red }"),
            Err(TextError::Unavailable)
        );
    }

    #[cfg(feature = "minify")]
    mod with_minifiers {
        use super::super::*;
        use super::U8;

        #[test]
        fn each_kind_gets_smaller_and_keeps_its_parts() {
            let css = minify(
                TextKind::Css,
                U8,
                b"/* a comment */\nbody {\n  color: #ff0000;\n  margin: 0px 0px 0px 0px;\n}\n",
            )
            .unwrap();
            let css = String::from_utf8(css).unwrap();
            assert!(css.starts_with("body{"), "{css}");
            assert!(css.contains("red"), "{css}");

            let js = minify(
                TextKind::Javascript,
                U8,
                b"// adds\nfunction add(first, second) {\n  var total = first + second;\n  return total;\n}\nconsole.log(add(1, 2));\n",
            )
            .unwrap();
            let js = String::from_utf8(js).unwrap();
            assert!(js.contains("function add("), "{js}");
            assert!(!js.contains("total"), "locals are mangled: {js}");

            let module = minify(
                TextKind::Javascript,
                U8,
                b"import { a } from './a.js';\nexport const b = a + 1;\n",
            )
            .unwrap();
            assert!(String::from_utf8(module).unwrap().contains("export"));

            let html = minify(
                TextKind::Html,
                U8,
                b"<!DOCTYPE html>\n<html>\n  <head>\n    <title> Hi </title>\n    <style>\n      p { color: #ff0000; }\n    </style>\n  </head>\n  <body>\n    <!-- note -->\n    <p>Hello,   world</p>\n  </body>\n</html>\n",
            )
            .unwrap();
            let html = String::from_utf8(html).unwrap();
            assert!(html.contains("Hello, world"), "{html}");
            assert!(!html.contains("note"), "{html}");
        }

        #[test]
        fn hostile_text_gets_no_variant() {
            assert!(matches!(
                minify(TextKind::Css, U8, b"p { color: red; ] }"),
                Err(TextError::Invalid(_))
            ));
            assert!(matches!(
                minify(TextKind::Javascript, U8, b"function ( {"),
                Err(TextError::Invalid(_))
            ));
            let deep = "(".repeat(100_000) + &")".repeat(100_000);
            assert_eq!(
                minify(TextKind::Javascript, U8, deep.as_bytes()),
                Err(TextError::TooDeep)
            );
            assert_eq!(
                minify(TextKind::Html, U8, b"<p>hi</p><script>let a = '</p>';"),
                Err(TextError::Unterminated)
            );
            assert_eq!(
                minify(TextKind::Css, U8, b"p{color:red}\xff"),
                Err(TextError::NotUtf8)
            );
            assert_eq!(
                minify(TextKind::Css, U8, b"a{b:c}"),
                Err(TextError::NotSmaller)
            );
        }
    }
}
