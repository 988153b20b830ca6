//! What adaptive fidelity reads and writes in HTTP terms: the image formats wirefold
//! makes variants in, which of them a request's `Accept` names, the kinds of text it
//! minifies, and the RFC 2295 transparent content negotiation fields (`Alternates`,
//! `TCN`, `Negotiate`).

use http::header::{HeaderMap, HeaderName, ACCEPT};

/// RFC 2295 §8.3: the variant list of a transparently negotiated resource.
pub const ALTERNATES: HeaderName = HeaderName::from_static("alternates");
/// RFC 2295 §8.5: `choice` on a response that carries a variant chosen for the client.
pub const TCN: HeaderName = HeaderName::from_static("tcn");
/// RFC 2295 §8.4: the request's negotiation directives (`vlist`, `trans`, …).
pub const NEGOTIATE: HeaderName = HeaderName::from_static("negotiate");
/// RFC 8942 §3.1: the hints a server asks the browser to send.
pub const ACCEPT_CH: HeaderName = HeaderName::from_static("accept-ch");
/// The hints a server needs for this response: a browser that had them but did not
/// send them retries once with them (draft-davidben-http-client-hint-reliability).
pub const CRITICAL_CH: HeaderName = HeaderName::from_static("critical-ch");

/// A raster image format wirefold decodes or encodes variants in (AVIF: encoded
/// only, in a build with the `avif` feature; never decoded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ImageFormat {
    Jpeg,
    Png,
    Gif,
    Webp,
    Avif,
}

impl ImageFormat {
    /// The format a `Content-Type` names (parameters and case ignored).
    pub fn from_media_type(content_type: &str) -> Option<ImageFormat> {
        match &*crate::media_type_essence(content_type) {
            "image/jpeg" | "image/jpg" | "image/pjpeg" => Some(ImageFormat::Jpeg),
            "image/png" => Some(ImageFormat::Png),
            "image/gif" => Some(ImageFormat::Gif),
            "image/webp" => Some(ImageFormat::Webp),
            "image/avif" => Some(ImageFormat::Avif),
            _ => None,
        }
    }

    pub fn media_type(self) -> &'static str {
        match self {
            ImageFormat::Jpeg => "image/jpeg",
            ImageFormat::Png => "image/png",
            ImageFormat::Gif => "image/gif",
            ImageFormat::Webp => "image/webp",
            ImageFormat::Avif => "image/avif",
        }
    }

    /// Its file name extension, which also names it in variant URLs and store names.
    pub fn extension(self) -> &'static str {
        match self {
            ImageFormat::Jpeg => "jpg",
            ImageFormat::Png => "png",
            ImageFormat::Gif => "gif",
            ImageFormat::Webp => "webp",
            ImageFormat::Avif => "avif",
        }
    }

    pub fn from_extension(extension: &str) -> Option<ImageFormat> {
        [
            ImageFormat::Jpeg,
            ImageFormat::Png,
            ImageFormat::Gif,
            ImageFormat::Webp,
            ImageFormat::Avif,
        ]
        .into_iter()
        .find(|f| f.extension() == extension)
    }
}

/// A kind of text wirefold minifies into a lower-fidelity variant that keeps meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TextKind {
    Html,
    Css,
    Javascript,
}

impl TextKind {
    /// The kind a `Content-Type` names (parameters and case ignored).
    pub fn from_media_type(content_type: &str) -> Option<TextKind> {
        match &*crate::media_type_essence(content_type) {
            "text/html" => Some(TextKind::Html),
            "text/css" => Some(TextKind::Css),
            "text/javascript" | "application/javascript" | "application/x-javascript" => {
                Some(TextKind::Javascript)
            }
            _ => None,
        }
    }

    /// Its file name extension in variant URLs.
    pub fn extension(self) -> &'static str {
        match self {
            TextKind::Html => "html",
            TextKind::Css => "css",
            TextKind::Javascript => "js",
        }
    }
}

/// Whether the request's `Accept` names `format`'s media type with a non-zero
/// quality. Only an explicit media type counts: `*/*` from a tool that decodes
/// nothing is no promise that it can show WebP or AVIF, and every browser that can
/// names them.
pub fn accepts_image(headers: &HeaderMap, format: ImageFormat) -> bool {
    let wanted = format.media_type();
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim();
            if !media.eq_ignore_ascii_case(wanted) {
                return false;
            }
            parts
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                .is_none_or(|(_, q)| q.trim().parse::<f64>().is_ok_and(|q| q > 0.0))
        })
}

/// Whether the request's `Negotiate` (RFC 2295 §8.4) asks for the variant list.
pub fn wants_variant_list(headers: &HeaderMap) -> bool {
    headers
        .get_all(NEGOTIATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|d| d.trim().eq_ignore_ascii_case("vlist"))
}

/// One variant as RFC 2295 §8.3 describes it in `Alternates`:
/// `{"url" source-quality {type media-type} {length n}}`.
#[derive(Clone, Debug, PartialEq)]
pub struct VariantDescription<'a> {
    pub url: &'a str,
    /// In 0..=1, written with at most three decimals.
    pub source_quality: f64,
    pub media_type: &'a str,
    pub length: u64,
}

/// The `Alternates` value for `variants`. URLs are wirefold's own (path characters
/// only), so no quoting of `"` is needed; one that contains it is left out.
pub fn alternates(variants: &[VariantDescription<'_>]) -> String {
    variants
        .iter()
        .filter(|v| !v.url.contains('"'))
        .map(|v| {
            format!(
                "{{\"{}\" {:.3} {{type {}}} {{length {}}}}}",
                v.url,
                v.source_quality.clamp(0.0, 1.0),
                v.media_type,
                v.length
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn accept(value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(ACCEPT, HeaderValue::from_static(value));
        h
    }

    #[test]
    fn an_image_format_counts_only_when_named_with_a_positive_quality() {
        let webp = |h: &HeaderMap| accepts_image(h, ImageFormat::Webp);
        let avif = |h: &HeaderMap| accepts_image(h, ImageFormat::Avif);
        let chromium = "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8";
        assert!(webp(&accept(chromium)) && avif(&accept(chromium)));
        // Safari before 16 and old Firefox name WebP only.
        let webp_only = "image/webp,*/*";
        assert!(webp(&accept(webp_only)) && !avif(&accept(webp_only)));
        assert!(webp(&accept("image/WebP;q=0.5")));
        assert!(!webp(&accept("image/webp;q=0")));
        assert!(!avif(&accept("image/webp, image/avif;q=0")));
        assert!(!webp(&accept("image/webp;q=nonsense")));
        assert!(!webp(&accept("*/*")) && !avif(&accept("image/*")));
        assert!(!webp(&HeaderMap::new()));
    }

    #[test]
    fn formats_round_trip_through_their_names() {
        for f in [
            ImageFormat::Jpeg,
            ImageFormat::Png,
            ImageFormat::Gif,
            ImageFormat::Webp,
            ImageFormat::Avif,
        ] {
            assert_eq!(ImageFormat::from_extension(f.extension()), Some(f));
            assert_eq!(ImageFormat::from_media_type(f.media_type()), Some(f));
        }
        assert_eq!(
            ImageFormat::from_media_type("IMAGE/JPEG; foo=bar"),
            Some(ImageFormat::Jpeg)
        );
        assert_eq!(ImageFormat::from_media_type("image/svg+xml"), None);
        assert_eq!(
            TextKind::from_media_type("text/html; charset=utf-8"),
            Some(TextKind::Html)
        );
    }

    #[test]
    fn alternates_take_rfc_2295_form() {
        let list = alternates(&[
            VariantDescription {
                url: "/a.jpg",
                source_quality: 1.0,
                media_type: "image/jpeg",
                length: 1000,
            },
            VariantDescription {
                url: "/.wirefold/v/ab/cd.webp",
                source_quality: 0.7,
                media_type: "image/webp",
                length: 700,
            },
        ]);
        assert_eq!(
            list,
            "{\"/a.jpg\" 1.000 {type image/jpeg} {length 1000}}, \
             {\"/.wirefold/v/ab/cd.webp\" 0.700 {type image/webp} {length 700}}"
        );
    }

    #[test]
    fn vlist_is_found_among_other_directives() {
        let mut h = HeaderMap::new();
        h.insert(NEGOTIATE, HeaderValue::from_static("trans, VLIST"));
        assert!(wants_variant_list(&h));
        h.insert(NEGOTIATE, HeaderValue::from_static("trans"));
        assert!(!wants_variant_list(&h));
    }
}
