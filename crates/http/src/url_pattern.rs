//! The `match` patterns of `Use-As-Dictionary` (RFC 9842 §2.1.1): a WHATWG URL
//! Pattern, of which wirefold emits only absolute pathnames with `*` wildcards.
//!
//! [`infer`] turns a versioned asset path into a pattern covering its other versions,
//! so the old file is the dictionary for the new one with no configuration:
//! `/static/app.3f9a2c1b.js` → `/static/app.*.js`, `/assets/index-B7x_k2Qa.js` →
//! `/assets/index-*.js`, `/lib/moment-2.30.0.min.js` → `/lib/moment-*.min.js`,
//! `/v2/app.js` → `/v*/app.js`. A path with nothing variable in it matches itself.

/// Characters with a meaning in URL Pattern syntax, escaped in literal parts.
const SPECIAL: &[char] = &['*', ':', '(', ')', '{', '}', '?', '+', '\\'];

/// The pattern for a request path (without query). Query-bearing resources get
/// `?*` appended by the caller when they want to cover every query.
pub fn infer(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').collect();
    let last = segments.len() - 1;
    let mut out = Vec::with_capacity(segments.len());
    for (i, segment) in segments.iter().enumerate() {
        let generalized = if i == last {
            generalize_file_name(segment)
        } else {
            generalize_directory(segment)
        };
        out.push(generalized.unwrap_or_else(|| escape(segment)));
    }
    out.join("/")
}

/// Whether a path names one version among others (a version or content hash in a
/// file or directory name), so that the URL never changes content.
pub fn is_versioned(path: &str) -> bool {
    infer(path).replace("\\*", "").contains('*')
}

/// Whether a request path matches a pattern made of literal text and `*`.
pub fn matches(pattern: &str, path: &str) -> bool {
    let tokens = tokenize(pattern);
    glob(&tokens, path.as_bytes())
}

/// A literal for a pattern: URL Pattern syntax characters escaped.
pub fn escape(literal: &str) -> String {
    let mut s = String::with_capacity(literal.len());
    for c in literal.chars() {
        if SPECIAL.contains(&c) {
            s.push('\\');
        }
        s.push(c);
    }
    s
}

/// `v2`, `2.3.1`, or a content hash as a whole directory name.
fn generalize_directory(segment: &str) -> Option<String> {
    if let Some(digits) = segment
        .strip_prefix('v')
        .or_else(|| segment.strip_prefix('V'))
    {
        if !digits.is_empty()
            && digits
                .split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        {
            return Some(format!("{}*", &segment[..1]));
        }
    }
    let tokens: Vec<&str> = segment.split('.').collect();
    if tokens.iter().all(|t| is_number(t)) || is_hash(segment) {
        return Some("*".into());
    }
    None
}

/// Replaces each run of version or hash tokens in a file name with `*`; `None` when
/// nothing is variable or nothing stable would remain.
fn generalize_file_name(name: &str) -> Option<String> {
    // Split into tokens, keeping the separators ('.' and '-') as their own pieces.
    let mut pieces: Vec<&str> = Vec::new();
    let mut start = 0;
    for (i, c) in name.char_indices() {
        if c == '.' || c == '-' {
            pieces.push(&name[start..i]);
            pieces.push(&name[i..i + 1]);
            start = i + 1;
        }
    }
    pieces.push(&name[start..]);
    let variable: Vec<bool> = pieces
        .iter()
        .enumerate()
        .map(|(i, p)| i % 2 == 0 && (is_number(p) || is_version_tag(p) || is_hash(p)))
        .collect();
    if !variable.iter().any(|v| *v) {
        return None;
    }
    let mut out = String::new();
    let mut i = 0;
    let mut stable = false;
    while i < pieces.len() {
        if variable[i] {
            // Extend the run across separators joining further variable tokens.
            let mut end = i;
            while end + 2 < pieces.len() && variable[end + 2] && pieces[end + 1] == "." {
                end += 2;
            }
            out.push('*');
            i = end + 1;
        } else {
            if i % 2 == 0 && !pieces[i].is_empty() && !is_extension_only(&pieces, i) {
                stable = true;
            }
            out.push_str(&escape(pieces[i]));
            i += 1;
        }
    }
    stable.then_some(out)
}

/// The final token after the last dot (the extension) does not make a name stable
/// on its own: `3f9a2c1b.js` must not become `*.js`.
fn is_extension_only(pieces: &[&str], i: usize) -> bool {
    i == pieces.len() - 1 && i > 0 && pieces[i - 1] == "."
}

fn is_number(token: &str) -> bool {
    !token.is_empty() && token.len() <= 12 && token.bytes().all(|b| b.is_ascii_digit())
}

fn is_version_tag(token: &str) -> bool {
    token.len() > 1 && (token.starts_with('v') || token.starts_with('V')) && is_number(&token[1..])
}

/// A content hash as bundlers write them: 8+ hex digits with at least one digit and
/// one letter, or 6+ base64url characters mixing digits, upper and lower case.
fn is_hash(token: &str) -> bool {
    let b = token.as_bytes();
    let has_digit = b.iter().any(u8::is_ascii_digit);
    let hex = b.len() >= 8
        && b.iter().all(u8::is_ascii_hexdigit)
        && has_digit
        && b.iter().any(u8::is_ascii_alphabetic);
    let base64url = b.len() >= 6
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
        && has_digit
        && b.iter().any(u8::is_ascii_uppercase)
        && b.iter().any(u8::is_ascii_lowercase);
    hex || base64url
}

enum Token {
    Literal(u8),
    Any,
}

fn tokenize(pattern: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut bytes = pattern.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'\\' => tokens.extend(bytes.next().map(Token::Literal)),
            b'*' => tokens.push(Token::Any),
            other => tokens.push(Token::Literal(other)),
        }
    }
    tokens
}

/// Wildcard matching with backtracking to the last `*`: linear in practice.
fn glob(tokens: &[Token], text: &[u8]) -> bool {
    let (mut t, mut s) = (0, 0);
    let mut resume: Option<(usize, usize)> = None;
    while s < text.len() {
        match tokens.get(t) {
            Some(Token::Literal(c)) if *c == text[s] => {
                t += 1;
                s += 1;
            }
            Some(Token::Any) => {
                resume = Some((t, s));
                t += 1;
            }
            _ => match resume {
                Some((rt, rs)) => {
                    t = rt + 1;
                    s = rs + 1;
                    resume = Some((rt, rs + 1));
                }
                None => return false,
            },
        }
    }
    tokens[t..].iter().all(|tok| matches!(tok, Token::Any))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioned_names_get_a_wildcard() {
        let cases = [
            ("/static/app.3f9a2c1b.js", "/static/app.*.js"),
            ("/assets/index-B7x_k2Qa.js", "/assets/index-*.js"),
            ("/lib/moment-2.30.0.min.js", "/lib/moment-*.min.js"),
            ("/v2/app.js", "/v*/app.js"),
            ("/static/app.0.js", "/static/app.*.js"),
            ("/dist/jquery-3.7.1.js", "/dist/jquery-*.js"),
            (
                "/npm/bootstrap@5.3.3/dist/css/bootstrap.css",
                "/npm/bootstrap@5.3.3/dist/css/bootstrap.css",
            ),
            ("/chunk.1a2b3c4d.5e6f7a8b.js", "/chunk.*.js"),
        ];
        for (path, pattern) in cases {
            assert_eq!(infer(path), pattern, "{path}");
            assert_eq!(is_versioned(path), pattern.contains('*'), "{path}");
            assert!(
                matches(&infer(path), path),
                "{path} matches its own pattern"
            );
        }
    }

    #[test]
    fn stable_names_match_themselves() {
        for path in [
            "/",
            "/index.html",
            "/css/style.css",
            "/html5shiv.js",
            "/3f9a2c1b.js",
            "/a(b).js",
        ] {
            let p = infer(path);
            assert!(matches(&p, path), "{path} → {p}");
            assert!(!p.contains('*') || path == "/3f9a2c1b.js", "{path} → {p}");
        }
        assert_eq!(infer("/3f9a2c1b.js"), "/3f9a2c1b.js");
        assert_eq!(infer("/a(b).js"), "/a\\(b\\).js");
        assert!(!is_versioned("/a*b.js"));
    }

    #[test]
    fn patterns_cover_other_versions_only() {
        let p = infer("/static/app.3f9a2c1b.js");
        assert!(matches(&p, "/static/app.99aa77bb.js"));
        assert!(!matches(&p, "/static/vendor.99aa77bb.js"));
        assert!(!matches(&p, "/static/app.99aa77bb.css"));
        assert!(matches("/a/*", "/a/b/c"));
        assert!(matches("*", ""));
        assert!(!matches("/a", "/ab"));
        assert!(matches("/x\\*y", "/x*y"));
    }
}
