//! The candidates of a `srcset` attribute, after the HTML standard's "parse a srcset
//! attribute", and the one a browser picks for a viewport ("select an image source").
//!
//! Splitting on `,` alone is wrong: commas may sit inside a URL (`a.jpg?w=1,2`) or inside
//! a descriptor's parentheses. The standard's rule: a candidate's URL runs to the next
//! ASCII whitespace (trailing commas stripped), then its descriptors run to the next
//! comma outside parentheses.

/// One image candidate, as written (its URL unresolved).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate<'a> {
    pub url: &'a str,
    /// Image pixels per CSS pixel once laid out: `2x` is 2, `640w` is 640 over the
    /// element's width from `sizes`; 1 when no descriptor is given.
    pub descriptor: Descriptor,
}

/// A candidate's descriptor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Descriptor {
    /// `Nx`, or none (which means `1x`).
    Density(f32),
    /// `Nw`: the image's intrinsic width in pixels.
    Width(u32),
}

/// The candidates of `srcset`, in order. A candidate whose descriptors do not parse
/// is dropped, as browsers drop it.
pub fn candidates(srcset: &str) -> Vec<Candidate<'_>> {
    let mut found = Vec::new();
    let mut rest = srcset;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_ascii_whitespace() || c == ',');
        if rest.is_empty() {
            return found;
        }
        let url_end = rest
            .find(|c: char| c.is_ascii_whitespace())
            .unwrap_or(rest.len());
        let (url, after) = rest.split_at(url_end);
        let trimmed = url.trim_end_matches(',');
        let (descriptors, next) = if trimmed.len() < url.len() {
            // A comma ended the URL: no descriptors follow.
            ("", after)
        } else {
            split_descriptors(after)
        };
        if let Some(descriptor) = parse_descriptor(descriptors).filter(|_| !trimmed.is_empty()) {
            found.push(Candidate {
                url: trimmed,
                descriptor,
            });
        }
        rest = next;
    }
}

/// The index of the candidate a browser picks for an element `slot_width` CSS pixels
/// wide on a screen of `pixel_ratio` device pixels per CSS pixel: the smallest density
/// at least `pixel_ratio`, else the largest (Chromium's choice without a cached one).
pub fn select(candidates: &[Candidate<'_>], slot_width: f32, pixel_ratio: f32) -> Option<usize> {
    let density = |c: &Candidate<'_>| match c.descriptor {
        Descriptor::Density(d) => d,
        Descriptor::Width(w) => w as f32 / slot_width.max(1.0),
    };
    let mut enough: Option<(usize, f32)> = None;
    let mut largest: Option<(usize, f32)> = None;
    for (i, c) in candidates.iter().enumerate() {
        let d = density(c);
        if d >= pixel_ratio && enough.is_none_or(|(_, best)| d < best) {
            enough = Some((i, d));
        }
        if largest.is_none_or(|(_, best)| d > best) {
            largest = Some((i, d));
        }
    }
    enough.or(largest).map(|(i, _)| i)
}

/// The descriptors up to (not including) the comma that ends them, and what follows.
fn split_descriptors(s: &str) -> (&str, &str) {
    let mut in_parens = false;
    for (i, c) in s.char_indices() {
        match c {
            '(' => in_parens = true,
            ')' => in_parens = false,
            ',' if !in_parens => return (&s[..i], &s[i..]),
            _ => {}
        }
    }
    (s, "")
}

/// `2x`, `640w`, nothing (1x); a height (`480h`) alongside a width is allowed and
/// ignored. Anything else (`0w`, `-1x`, two widths, `foo`) is invalid.
fn parse_descriptor(descriptors: &str) -> Option<Descriptor> {
    let mut found = None;
    for token in descriptors.split_ascii_whitespace() {
        let (number, unit) = token.split_at(token.len().saturating_sub(1));
        let parsed = match unit {
            "x" => number
                .parse::<f32>()
                .ok()
                .filter(|d| d.is_finite() && *d > 0.0)
                .map(Descriptor::Density),
            "w" => number
                .parse::<u32>()
                .ok()
                .filter(|w| *w > 0)
                .map(Descriptor::Width),
            "h" if number.parse::<u32>().is_ok_and(|h| h > 0) => continue,
            _ => None,
        };
        if found.is_some() || parsed.is_none() {
            return None;
        }
        found = parsed;
    }
    Some(found.unwrap_or(Descriptor::Density(1.0)))
}

#[cfg(test)]
mod tests {
    use super::{candidates, select};

    fn candidate_urls(srcset: &str) -> Vec<&str> {
        candidates(srcset).into_iter().map(|c| c.url).collect()
    }

    #[test]
    fn descriptors_and_commas_in_urls() {
        assert_eq!(candidate_urls("a.jpg 1x, b.jpg 2x"), ["a.jpg", "b.jpg"]);
        assert_eq!(
            candidate_urls("a.jpg?w=1,2 100w,b.jpg"),
            ["a.jpg?w=1,2", "b.jpg"]
        );
        // The URL runs to whitespace, so this is one candidate.
        assert_eq!(candidate_urls("a.jpg,b.jpg,,"), ["a.jpg,b.jpg"]);
        assert_eq!(candidate_urls("a.jpg, b.jpg"), ["a.jpg", "b.jpg"]);
        // Parentheses do not end descriptors, but are no descriptor either: the
        // candidate is dropped, not split.
        assert_eq!(candidate_urls(" a.jpg (x, y) 2x , b.jpg"), ["b.jpg"]);
        assert!(candidate_urls(" , ,").is_empty());
        assert!(candidate_urls("").is_empty());
    }

    #[test]
    fn invalid_descriptors_drop_their_candidate() {
        assert_eq!(
            candidate_urls("a.jpg 0w, b.jpg foo, c.jpg 1x 2x, d.jpg 300w 200h, e.jpg -1x"),
            ["d.jpg"]
        );
    }

    #[test]
    fn the_smallest_density_covering_the_screen_is_picked() {
        let widths = candidates("s.jpg 480w, m.jpg 960w, l.jpg 1920w");
        // A 640 px slot at 1x: 960w (1.5) is the smallest at least 1.
        assert_eq!(select(&widths, 640.0, 1.0), Some(1));
        // At 2x, 1920w (3) is needed; for a 1280 px slot nothing covers 2x: the largest.
        assert_eq!(select(&widths, 640.0, 2.0), Some(2));
        assert_eq!(select(&widths, 1280.0, 2.0), Some(2));
        let densities = candidates("a.jpg, b.jpg 2x, c.jpg 1.5x");
        assert_eq!(select(&densities, 1.0, 1.0), Some(0));
        assert_eq!(select(&densities, 1.0, 1.2), Some(2));
        assert_eq!(select(&[], 1.0, 1.0), None);
    }
}
