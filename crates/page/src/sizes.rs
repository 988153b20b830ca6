//! The width an image occupies, from its `sizes` attribute and a viewport (the HTML
//! standard's "parse a sizes attribute", with the media conditions pages use).

use crate::Viewport;

/// CSS pixels per `em` in a media query and a `sizes` length (the initial font size).
const EM_PX: f32 = 16.0;

/// The slot width in CSS pixels: the length of the first entry of `sizes` whose media
/// condition holds for `viewport` (the last entry has none), or `100vw` when `sizes`
/// is absent or nothing in it parses. Conditions this does not understand are false,
/// as a browser's are when they do not parse.
pub fn slot_width(sizes: Option<&str>, viewport: &Viewport) -> f32 {
    let full_width = viewport.width;
    let Some(sizes) = sizes else {
        return full_width;
    };
    for entry in split_top_level(sizes) {
        let entry = entry.trim();
        // The length is the last component; what precedes it is the condition.
        let (condition, length) = match entry.rfind(|c: char| c.is_ascii_whitespace() || c == ')') {
            Some(i) => (entry[..=i].trim(), entry[i + 1..].trim()),
            None => ("", entry),
        };
        let Some(width) = length_px(length, viewport) else {
            continue;
        };
        if condition.is_empty() || condition_holds(condition, viewport) {
            return width;
        }
    }
    full_width
}

/// The comma-separated parts of `s`, commas inside parentheses kept.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// A `px`, `em`, `rem` or `vw` length (`0` too); `calc()` and the rest are not read.
fn length_px(length: &str, viewport: &Viewport) -> Option<f32> {
    let length = length.to_ascii_lowercase();
    let (number, scale) = if let Some(n) = length.strip_suffix("px") {
        (n, 1.0)
    } else if let Some(n) = length.strip_suffix("rem") {
        (n, EM_PX)
    } else if let Some(n) = length.strip_suffix("em") {
        (n, EM_PX)
    } else if let Some(n) = length.strip_suffix("vw") {
        (n, viewport.width / 100.0)
    } else if length == "0" {
        ("0", 1.0)
    } else {
        return None;
    };
    let value = number
        .parse::<f32>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)?;
    Some(value * scale)
}

/// Whether a `media` attribute (a media query list) holds for `viewport`: `all`,
/// `screen` and width features do; `print`, other types and features not understood
/// do not.
pub fn media_matches(media: &str, viewport: &Viewport) -> bool {
    split_top_level(media).into_iter().any(|query| {
        let query = query.trim().to_ascii_lowercase();
        match query.as_str() {
            "" | "all" | "screen" | "only screen" => true,
            _ => condition_holds(&query, viewport),
        }
    })
}

/// `(min-width: L)` and `(max-width: L)` features joined by `and`, optionally behind
/// `not` or `only screen and`.
fn condition_holds(condition: &str, viewport: &Viewport) -> bool {
    let lowered = condition.to_ascii_lowercase();
    let (negated, rest) = match lowered.trim().strip_prefix("not ") {
        Some(rest) => (true, rest.trim().to_string()),
        None => (false, lowered.trim().to_string()),
    };
    let rest = rest
        .strip_prefix("only screen and")
        .or_else(|| rest.strip_prefix("screen and"))
        .or_else(|| rest.strip_prefix("all and"))
        .unwrap_or(&rest);
    let mut holds = true;
    for feature in rest.split(" and ") {
        let Some(inner) = feature
            .trim()
            .strip_prefix('(')
            .and_then(|f| f.strip_suffix(')'))
        else {
            return false;
        };
        let Some((name, value)) = inner.split_once(':') else {
            return false;
        };
        let Some(value) = length_px(value.trim(), viewport) else {
            return false;
        };
        holds &= match name.trim() {
            "min-width" => viewport.width >= value,
            "max-width" => viewport.width <= value,
            _ => return false,
        };
    }
    holds != negated
}

#[cfg(test)]
mod tests {
    use super::*;

    const DESKTOP: Viewport = Viewport {
        width: 1280.0,
        pixel_ratio: 1.0,
    };

    #[test]
    fn the_first_matching_entry_gives_the_width() {
        assert_eq!(slot_width(None, &DESKTOP), 1280.0);
        assert_eq!(slot_width(Some("50vw"), &DESKTOP), 640.0);
        let sizes = "(max-width: 600px) 100vw, (min-width: 1000px) 33vw, 600px";
        assert!((slot_width(Some(sizes), &DESKTOP) - 422.4).abs() < 0.01);
        let phone = Viewport {
            width: 400.0,
            pixel_ratio: 2.0,
        };
        assert_eq!(slot_width(Some(sizes), &phone), 400.0);
        assert_eq!(
            slot_width(Some("(min-width: 40em) 20em, 10em"), &DESKTOP),
            320.0
        );
        assert_eq!(
            slot_width(Some("not (max-width: 600px) 300px, 1px"), &DESKTOP),
            300.0
        );
    }

    #[test]
    fn media_attributes() {
        for media in ["all", "screen", "", "(min-width: 800px)", "print, screen"] {
            assert!(media_matches(media, &DESKTOP), "{media}");
        }
        for media in [
            "print",
            "(max-width: 600px)",
            "speech",
            "(prefers-color-scheme: dark)",
        ] {
            assert!(!media_matches(media, &DESKTOP), "{media}");
        }
    }

    #[test]
    fn what_does_not_parse_is_skipped() {
        assert_eq!(
            slot_width(Some("calc(100vw - 2em), 500px"), &DESKTOP),
            500.0
        );
        assert_eq!(
            slot_width(Some("(orientation: landscape) 10px, 20px"), &DESKTOP),
            20.0
        );
        assert_eq!(slot_width(Some("garbage, (((, -5px"), &DESKTOP), 1280.0);
        assert_eq!(slot_width(Some(""), &DESKTOP), 1280.0);
    }
}
