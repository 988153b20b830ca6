use super::*;

const SIBLINGS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/corpus/siblings/httpwg__httpwg.github.io"
);

fn corpus_pages() -> Vec<(String, Vec<u8>)> {
    let mut pages: Vec<(String, Vec<u8>)> = std::fs::read_dir(SIBLINGS)
        .expect("the shared corpus is present")
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "html"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    pages.sort();
    pages
}

fn urls(refs: &[InlineReference]) -> Vec<&str> {
    refs.iter().map(|r| r.url.as_str()).collect()
}

#[test]
fn corpus_page_references_in_document_order() {
    let html = std::fs::read(format!("{SIBLINGS}/rfc7230.html")).unwrap();
    let refs = inline_references(&html, "https://httpwg.org/specs/rfc7230.html");
    assert_eq!(
        urls(&refs),
        [
            "https://httpwg.org/assets/node_modules/bootstrap/dist/css/bootstrap.min.css",
            "https://httpwg.org/assets/site.css",
            "https://httpwg.org/assets/http.svg",
            "https://httpwg.org/assets/node_modules/jquery/dist/jquery.min.js",
            "https://httpwg.org/assets/node_modules/bootstrap/dist/js/bootstrap.min.js",
        ]
    );
    assert_eq!(
        refs[0].kind,
        ReferenceKind::Link {
            rel: "stylesheet".into(),
            destination: None
        }
    );
    assert_eq!(refs[2].kind, ReferenceKind::Image);
    assert_eq!(refs[4].kind, ReferenceKind::Script);
    // The last reference sits near the end of a 350 KB page: the case AID is about.
    assert!(refs[4].offset > html.len() * 9 / 10);
}

#[test]
fn offsets_span_the_start_tag_on_every_corpus_page() {
    for (name, html) in corpus_pages() {
        let refs = inline_references(&html, "https://httpwg.org/specs/");
        assert!(refs.len() >= 5, "{name}: {} references", refs.len());
        for r in &refs {
            let tag = String::from_utf8_lossy(&html[r.offset..r.tag_end]);
            assert!(tag.starts_with('<') && tag.ends_with('>'), "{name}: {tag}");
            let path = r.url.trim_start_matches("https://httpwg.org");
            assert!(tag.contains(path), "{name}: {tag} does not name {}", r.url);
        }
    }
}

#[test]
fn chunked_input_gives_the_same_references_and_offsets() {
    for (name, html) in corpus_pages().into_iter().take(8) {
        let whole = inline_references(&html, "https://httpwg.org/specs/");
        let mut scanner = InlineScanner::new("https://httpwg.org/specs/");
        for chunk in html.chunks(7) {
            scanner.feed(chunk);
        }
        assert_eq!(scanner.finish(), whole, "{name}");
    }
}

#[test]
fn every_kind_of_inline_reference() {
    let html = br#"<!doctype html><html><head>
<link rel="stylesheet" href="a.css"><link rel=preload as=font href="/f.woff2">
<link rel="modulepreload" href="m.js"><link rel="shortcut icon" href="/favicon.ico">
<link rel="next" href="page2.html"><link rel="alternate" href="feed.xml">
<script src="s.js"></script><script>var inline = "<img src=no.png>";</script>
</head><body>
<img src="i.png" srcset="i-1x.png 1x, i-2x.png 2x">
<picture><source srcset="p.webp" type="image/webp"><img src="p.jpg"></picture>
<iframe src="//other.example/frame"></iframe>
<video poster="v.jpg" src="v.mp4"><source src="v.webm"></video><audio src="a.ogg"></audio>
<object data="o.svg"></object><embed src="e.swf">
<input type=IMAGE src="go.png"><input type=text src="not-fetched.png">
<a href="link.html">a link is not inline</a>
</body></html>"#;
    let refs = inline_references(html, "https://example.com/dir/page.html");
    let got: Vec<(ReferenceKind, &str)> = refs
        .iter()
        .map(|r| {
            (
                r.kind.clone(),
                r.url.trim_start_matches("https://example.com"),
            )
        })
        .collect();
    let link = |rel: &str, dest: Option<&str>| ReferenceKind::Link {
        rel: rel.into(),
        destination: dest.map(Into::into),
    };
    use ReferenceKind::*;
    assert_eq!(
        got,
        [
            (link("stylesheet", None), "/dir/a.css"),
            (link("preload", Some("font")), "/f.woff2"),
            (link("modulepreload", None), "/dir/m.js"),
            (link("shortcut icon", None), "/favicon.ico"),
            (Script, "/dir/s.js"),
            (Image, "/dir/i.png"),
            (SrcsetCandidate, "/dir/i-1x.png"),
            (SrcsetCandidate, "/dir/i-2x.png"),
            (SrcsetCandidate, "/dir/p.webp"),
            (Image, "/dir/p.jpg"),
            (Frame, "https://other.example/frame"),
            (Poster, "/dir/v.jpg"),
            (Media, "/dir/v.mp4"),
            (Media, "/dir/v.webm"),
            (Media, "/dir/a.ogg"),
            (Object, "/dir/o.svg"),
            (Embed, "/dir/e.swf"),
            (ImageInput, "/dir/go.png"),
        ]
    );
}

#[test]
fn base_element_rebases_later_references() {
    let html = br#"<link rel=stylesheet href="before.css"><base href="https://cdn.example/x/">
<base href="https://ignored.example/"><script src="after.js"></script>"#;
    let refs = inline_references(html, "https://example.com/page.html");
    assert_eq!(
        urls(&refs),
        [
            "https://example.com/before.css",
            "https://cdn.example/x/after.js"
        ]
    );
}

#[test]
fn urls_never_fetched_are_left_out() {
    let html = br#"<img src=""><img src="   "><img src="data:image/png;base64,AAAA">
<iframe src="about:blank"></iframe><script src="javascript:void(0)"></script>
<img src="  spaced.png  "><img src="http://[bad">"#;
    let refs = inline_references(html, "https://example.com/");
    assert_eq!(urls(&refs), ["https://example.com/spaced.png"]);
}

#[test]
fn relative_references_need_a_valid_base() {
    let html = br#"<img src="rel.png"><img src="https://abs.example/a.png">"#;
    let refs = inline_references(html, "not a url");
    assert_eq!(urls(&refs), ["https://abs.example/a.png"]);
}

#[test]
fn offsets_are_bytes_not_characters() {
    let html = "<p>é漢字</p><img src=x.png>".as_bytes();
    let refs = inline_references(html, "https://example.com/");
    assert_eq!(refs[0].offset, "<p>é漢字</p>".len());
    assert_eq!(refs[0].tag_end, html.len());
}

#[test]
fn bad_input_never_panics() {
    let truncated = b"<html><img src=a.png><script src=\"b.js";
    assert_eq!(
        urls(&inline_references(truncated, "https://e.com/")),
        ["https://e.com/a.png"]
    );

    let not_utf8 = b"\xff\xfe<img src=\"\xe9t\xe9.png\"><link rel=stylesheet href=\xc3(.css>";
    let refs = inline_references(not_utf8, "https://e.com/");
    assert_eq!(refs.len(), 2);
    assert_eq!(refs[0].offset, 2);

    // Every prefix of a real page, and pseudo-random bytes.
    let page = std::fs::read(format!("{SIBLINGS}/rfc5789.html")).unwrap();
    for cut in (0..page.len()).step_by(997) {
        inline_references(&page[..cut], "https://e.com/");
    }
    let mut noise = Vec::with_capacity(1 << 16);
    let mut x: u32 = 0x9e37_79b9;
    for _ in 0..noise.capacity() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        noise.push(b"<>=\"' /abcimgsrc\x00\xff"[x as usize % 18]);
    }
    inline_references(&noise, "https://e.com/");
}
