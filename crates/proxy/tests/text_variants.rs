//! Minified text variants end to end (cargo feature `minify`): real pages, styles and
//! scripts from the shared corpus are minified in the background on first sight and
//! offered to `Save-Data` clients with the negotiation fields images get; hostile
//! text (deep nesting, invalid CSS, a page whose script never ends) and variants
//! that save too little after compression keep their original.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::*;
use wirefold_http::fidelity::TextKind;
use wirefold_http::ContentCoding;

/// `Accept-Encoding` as curl's `--compressed` sends it, and `Save-Data`.
const SAVE_DATA: [&str; 3] = ["--compressed", "-H", "Save-Data: on"];

fn corpus(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/corpus")
        .join(relative)
}

/// A page, a stylesheet and a script no one on the team wrote.
fn site(dir: &Path) {
    for (from, to) in [
        (
            "html/google__styleguide/javaguide-html/013.html",
            "guide.html",
        ),
        (
            "assets/whatwg__whatwg.org/resources-whatwg-org_standard-css/030.css",
            "standard.css",
        ),
        ("assets/w3c__aria/common_script_aria-js/029.js", "aria.js"),
    ] {
        std::fs::copy(corpus(from), dir.join(to)).expect("the shared corpus");
    }
}

/// Waits until the maker has judged `count` originals (kept or refused).
async fn until_judged(proxy: &Proxy, count: f64) {
    for _ in 0..1200 {
        let made = proxy
            .metric("wirefold_fidelity_variants_made_total{kind=\"text\"}")
            .await;
        let metrics = curl(&proxy.admin_url("/metrics"), &[]).await;
        let refused: f64 = String::from_utf8_lossy(&metrics.body)
            .lines()
            .filter(|l| l.starts_with("wirefold_fidelity_refused_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if made + refused >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the maker did not judge {count} originals");
}

fn fast_maker(config: &mut proxy::config::Config) {
    config.fidelity.cpu_share = 1.0;
}

#[tokio::test]
async fn save_data_clients_get_minified_text_that_still_parses() {
    let root = tempfile::tempdir().unwrap();
    site(root.path());
    let proxy = start_root(root.path(), fast_maker).await;
    for name in ["guide.html", "standard.css", "aria.js"] {
        let original = std::fs::read(root.path().join(name)).unwrap();
        let first = curl(&proxy.url(&format!("/{name}")), &SAVE_DATA).await;
        assert_eq!((first.status, &first.body), (200, &original), "{name}");
        assert_eq!(first.header("tcn"), None, "first sight is served whole");
    }
    until_judged(&proxy, 3.0).await;

    for (name, media_type, extension) in [
        ("guide.html", "text/html", "html"),
        ("standard.css", "text/css", "css"),
        ("aria.js", "text/javascript", "js"),
    ] {
        let original = std::fs::read(root.path().join(name)).unwrap();
        let path = format!("/{name}");
        let r = curl(&proxy.url(&path), &SAVE_DATA).await;
        assert_eq!(r.status, 200, "{name}");
        assert_eq!(r.header("tcn"), Some("choice"), "{name}");
        assert!(
            r.header("content-type")
                .is_some_and(|t| t.starts_with(media_type)),
            "{name}: {:?}",
            r.header("content-type")
        );
        assert!(
            r.body.len() < original.len(),
            "{name}: {} of {}",
            r.body.len(),
            original.len()
        );
        let location = r.header("content-location").expect("content-location");
        assert!(
            location.starts_with("/.wirefold/v/") && location.ends_with(&format!(".{extension}")),
            "{location}"
        );
        let vary = r.header("vary").expect("vary").to_ascii_lowercase();
        for field in ["save-data", "ect", "rtt", "downlink", "accept-encoding"] {
            assert!(vary.contains(field), "{name}: {vary}");
        }
        let alternates = r.header("alternates").expect("alternates");
        assert!(
            alternates.starts_with(&format!("{{\"{path}\" 1.000 {{type {media_type}}}")),
            "{alternates}"
        );
        assert!(alternates.contains(location), "{alternates}");
        // The variant's own URL: the same bytes, immutable.
        let own = curl(&proxy.url(location), &["--compressed"]).await;
        assert_eq!((own.status, &own.body), (200, &r.body), "{name}");
        assert!(own
            .header("cache-control")
            .is_some_and(|c| c.contains("immutable")));
        // Without Save-Data or hints: the original, with the list.
        let plain = curl(&proxy.url(&path), &["--compressed"]).await;
        assert_eq!(plain.body, original, "{name}");
        assert_eq!(plain.header("tcn"), None, "{name}");
        assert!(plain.header("alternates").is_some(), "{name}");
        check_still_valid(name, &original, &r.body);
    }
    // The page has variants: it asks for the hints that choose them.
    let page = curl(&proxy.url("/guide.html"), &["--compressed"]).await;
    assert!(page.header("accept-ch").is_some());
    assert!(page
        .header("critical-ch")
        .is_some_and(|c| c.contains("Save-Data")));
    assert!(
        proxy
            .metric("wirefold_fidelity_decisions_total{reason=\"save_data\"}")
            .await
            >= 3.0
    );
    proxy.running.shutdown().await;
}

/// The minified body is still what it was: JavaScript that node parses, a page with
/// its title and scripts, a stylesheet with its rules.
fn check_still_valid(name: &str, original: &[u8], minified: &[u8]) {
    let text = String::from_utf8(minified.to_vec()).expect("UTF-8");
    match name.rsplit('.').next() {
        Some("js") => {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("min.js");
            std::fs::write(&file, minified).unwrap();
            match std::process::Command::new("node")
                .arg("--check")
                .arg(&file)
                .output()
            {
                Ok(out) => assert!(
                    out.status.success(),
                    "node --check: {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
                Err(e) => eprintln!("node not run ({e}): the script's syntax is not checked"),
            }
            for name in ["ariaAttributeReferences", "restrictReferences"] {
                let in_original = String::from_utf8_lossy(original).contains(name);
                assert_eq!(text.contains(name), in_original, "{name}");
            }
        }
        Some("html") => {
            let lower = text.to_ascii_lowercase();
            assert!(text.contains("Google Java Style Guide"), "the title");
            assert_eq!(
                lower.matches("<script").count(),
                lower.matches("</script").count()
            );
        }
        _ => {
            assert_eq!(text.matches('{').count(), text.matches('}').count());
            assert!(!text.contains("/*"), "comments are gone");
            assert!(
                text.contains("body{") || text.contains("body,"),
                "{}",
                &text[..200]
            );
        }
    }
}

#[tokio::test]
async fn hostile_text_is_served_as_it_came() {
    let root = tempfile::tempdir().unwrap();
    // 5 MB on one line, nested deeper than any parser's stack would survive.
    let deep = format!(
        "var x = {}1{};",
        "[".repeat(2_500_000),
        "]".repeat(2_500_000)
    );
    std::fs::write(root.path().join("deep.js"), &deep).unwrap();
    std::fs::write(
        root.path().join("bad.css"),
        "body { color: red; }\n/* fine so far */\np { color: ] blue; }\n".repeat(50),
    )
    .unwrap();
    std::fs::write(
        root.path().join("open.html"),
        format!(
            "<!DOCTYPE html>\n<title>open</title>\n<p>{}</p>\n<script>\n  var a = 1;\n",
            "some words, ".repeat(200)
        ),
    )
    .unwrap();
    std::fs::write(
        root.path().join("latin.css"),
        b"p { content: \"\xe9\"; }\n".repeat(100),
    )
    .unwrap();
    let proxy = start_root(root.path(), fast_maker).await;
    let names = ["deep.js", "bad.css", "open.html", "latin.css"];
    for name in names {
        let original = std::fs::read(root.path().join(name)).unwrap();
        let first = curl(&proxy.url(&format!("/{name}")), &SAVE_DATA).await;
        assert_eq!((first.status, &first.body), (200, &original), "{name}");
    }
    until_judged(&proxy, names.len() as f64).await;
    assert_eq!(
        proxy
            .metric("wirefold_fidelity_refused_total{reason=\"too_deep\"}")
            .await,
        1.0
    );
    assert_eq!(
        proxy
            .metric("wirefold_fidelity_refused_total{reason=\"invalid\"}")
            .await,
        3.0,
        "invalid CSS, the open script, and text that is not UTF-8"
    );
    for name in names {
        let original = std::fs::read(root.path().join(name)).unwrap();
        let r = curl(&proxy.url(&format!("/{name}")), &SAVE_DATA).await;
        assert_eq!((r.status, &r.body), (200, &original), "{name}");
        assert_eq!(r.header("tcn"), None, "{name}");
        assert_eq!(r.header("alternates"), None, "{name}");
    }
    proxy.running.shutdown().await;
}

#[tokio::test]
async fn a_variant_saving_too_little_after_compression_is_not_kept() {
    let root = tempfile::tempdir().unwrap();
    site(root.path());
    let original = std::fs::read(root.path().join("aria.js")).unwrap();
    // What the variant saves raw and after brotli 11 (the default profile's first
    // cached coding): compression already removes much of what minifying does.
    let js = "text/javascript; charset=utf-8";
    let minified = fidelity::text::minify(TextKind::Javascript, js, &original).expect("minifies");
    let br = |b: &[u8]| codec::compress(ContentCoding::Br, 11, b).len() as u64;
    let raw_saving = fidelity::text::saving(original.len() as u64, minified.len() as u64);
    let br_saving = fidelity::text::saving(br(&original), br(&minified));
    assert!(
        br_saving + 0.02 < raw_saving,
        "raw {raw_saving}, after br {br_saving}"
    );

    // Above every coding's saving: not kept at all.
    let proxy = start_root(root.path(), |c| {
        fast_maker(c);
        c.fidelity.text_min_saving = raw_saving + 0.01;
    })
    .await;
    let first = curl(&proxy.url("/aria.js"), &SAVE_DATA).await;
    assert_eq!(first.body, original);
    until_judged(&proxy, 1.0).await;
    assert_eq!(
        proxy
            .metric("wirefold_fidelity_refused_total{reason=\"no_saving\"}")
            .await,
        1.0
    );
    assert_eq!(
        proxy
            .metric("wirefold_fidelity_variants_made_total{kind=\"text\"}")
            .await,
        0.0
    );
    let r = curl(&proxy.url("/aria.js"), &SAVE_DATA).await;
    assert_eq!(r.body, original);
    assert_eq!(r.header("alternates"), None);
    proxy.running.shutdown().await;

    // Between the two: kept, but offered only to a client that takes no coding; a
    // brotli client would pay nearly as much for it as for the original.
    let proxy = start_root(root.path(), |c| {
        fast_maker(c);
        c.fidelity.text_min_saving = (raw_saving + br_saving) / 2.0;
    })
    .await;
    curl(&proxy.url("/aria.js"), &SAVE_DATA).await;
    until_judged(&proxy, 1.0).await;
    let brotli = curl(&proxy.url("/aria.js"), &SAVE_DATA).await;
    assert_eq!(brotli.header("content-encoding"), Some("br"));
    assert_eq!(brotli.header("tcn"), None);
    assert!(brotli.body == original, "the original for a brotli client");
    let identity = curl(&proxy.url("/aria.js"), &["-H", "Save-Data: on"]).await;
    assert_eq!(identity.header("content-encoding"), None);
    assert_eq!(identity.header("tcn"), Some("choice"));
    assert!(
        identity.body == minified,
        "the variant for an identity client"
    );
    proxy.running.shutdown().await;
}
