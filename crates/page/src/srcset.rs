//! The URLs of a `srcset` attribute, after the HTML standard's "parse a srcset attribute".
//!
//! Splitting on `,` alone is wrong: commas may sit inside a URL (`a.jpg?w=1,2`) or inside
//! a descriptor's parentheses. The standard's rule: a candidate's URL runs to the next
//! ASCII whitespace (trailing commas stripped), then its descriptors run to the next
//! comma outside parentheses.

/// The candidate URLs of `srcset`, as written (unresolved), in order.
pub fn candidate_urls(srcset: &str) -> Vec<&str> {
    let mut urls = Vec::new();
    let mut rest = srcset;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_ascii_whitespace() || c == ',');
        if rest.is_empty() {
            return urls;
        }
        let url_end = rest
            .find(|c: char| c.is_ascii_whitespace())
            .unwrap_or(rest.len());
        let (url, after) = rest.split_at(url_end);
        let trimmed = url.trim_end_matches(',');
        if !trimmed.is_empty() {
            urls.push(trimmed);
        }
        rest = if trimmed.len() < url.len() {
            // A comma ended the URL: no descriptors follow.
            after
        } else {
            skip_descriptors(after)
        };
    }
}

/// What follows the descriptors up to (not including) the comma that ends them.
fn skip_descriptors(s: &str) -> &str {
    let mut in_parens = false;
    for (i, c) in s.char_indices() {
        match c {
            '(' => in_parens = true,
            ')' => in_parens = false,
            ',' if !in_parens => return &s[i..],
            _ => {}
        }
    }
    ""
}

#[cfg(test)]
mod tests {
    use super::candidate_urls;

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
        assert_eq!(
            candidate_urls(" a.jpg (x, y) 2x , b.jpg"),
            ["a.jpg", "b.jpg"]
        );
        assert!(candidate_urls(" , ,").is_empty());
        assert!(candidate_urls("").is_empty());
    }
}
