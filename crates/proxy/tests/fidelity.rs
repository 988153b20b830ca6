//! Adaptive fidelity end to end: variants made in the background on first sight,
//! chosen by Client Hints, `Save-Data` and the egress controller, served under their
//! own immutable URLs with RFC 2295 negotiation fields; hostile images and garbage
//! hints get the original, never an error.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

mod support;

use std::path::Path;
use std::time::Duration;

use fidelity::image::{encode, probe, ImageLimits, Pixels};
use support::*;
use wirefold_http::fidelity::ImageFormat;

const CHROMIUM_ACCEPT: &str =
    "Accept: image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8";

const PREPARED_SENT: &str = "wirefold_prepared_responses_total{result=\"sent\"}";

const LIMITS: ImageLimits = ImageLimits {
    max_side: 16_383,
    max_pixels: 40_000_000,
    max_input_bytes: 16 << 20,
};

/// A photograph-like JPEG at quality 92.
fn photo_jpeg(width: u32, height: u32) -> Vec<u8> {
    fidelity::image::sample_photo_jpeg(width, height, 0x9e37_79b9, 92).expect("a JPEG")
}

/// A PNG whose header claims 20,000 × 20,000 pixels, in a few dozen bytes.
fn png_bomb() -> Vec<u8> {
    let small = Pixels::from_rgba(1, 1, vec![0, 0, 0, 255]).expect("pixels");
    let mut png = encode(&small, ImageFormat::Png, 100).expect("png");
    // IHDR's width and height at bytes 16..24, its CRC (of type and data) at 29..33.
    png[16..20].copy_from_slice(&20_000u32.to_be_bytes());
    png[20..24].copy_from_slice(&20_000u32.to_be_bytes());
    let mut crc = flate2::Crc::new();
    crc.update(&png[12..29]);
    png[29..33].copy_from_slice(&crc.sum().to_be_bytes());
    png
}

fn site(dir: &Path) -> Vec<u8> {
    let photo = photo_jpeg(640, 480);
    std::fs::write(dir.join("photo.jpg"), &photo).unwrap();
    std::fs::write(dir.join("bomb.png"), png_bomb()).unwrap();
    std::fs::write(dir.join("truncated.jpg"), &photo[..photo.len() / 2]).unwrap();
    let garbage: Vec<u8> = (0..5_000u32).map(|i| (i * 7919 % 251) as u8).collect();
    std::fs::write(dir.join("garbage.png"), garbage).unwrap();
    photo
}

/// Asks for `path` until its response carries `Alternates` (its ladder is made), at
/// most `tries` times.
async fn until_negotiable(proxy: &Proxy, path: &str, tries: usize) -> bool {
    for _ in 0..tries {
        let r = curl(&proxy.url(path), &["-H", CHROMIUM_ACCEPT]).await;
        if r.header("alternates").is_some() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Asks for `url` until a variant is chosen for it (`TCN: choice`), at most 100 times
/// 100 ms apart; every answer is a 200.
async fn until_variant(url: &str, args: &[&str]) -> Option<Curled> {
    for _ in 0..100 {
        let r = curl(url, args).await;
        assert_eq!(r.status, 200);
        if r.header("tcn") == Some("choice") {
            return Some(r);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

#[tokio::test]
async fn slow_links_get_smaller_variants_and_fast_ones_the_original() {
    let root = tempfile::tempdir().unwrap();
    let photo = site(root.path());
    // WebP for Chromium's `Accept` (AVIF's later pass is tested on its own).
    let proxy = start_root(root.path(), |c| c.fidelity.avif = false).await;
    let url = proxy.url("/photo.jpg");

    // First sight: the original, whole; its ladder is made in the background.
    let first = curl(&url, &["-H", CHROMIUM_ACCEPT, "-H", "Downlink: 0.2"]).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body, photo);
    assert!(
        until_negotiable(&proxy, "/photo.jpg", 600).await,
        "no ladder made"
    );

    // A 200 kbit/s, 300 ms link: a WebP variant, negotiated transparently.
    let slow = curl(
        &url,
        &[
            "-H",
            CHROMIUM_ACCEPT,
            "-H",
            "Downlink: 0.2",
            "-H",
            "RTT: 300",
        ],
    )
    .await;
    assert_eq!(slow.status, 200);
    assert_eq!(slow.header("tcn"), Some("choice"));
    assert_eq!(slow.header("content-type"), Some("image/webp"));
    assert!(
        slow.body.len() * 10 < photo.len() * 7,
        "{}",
        slow.body.len()
    );
    let found = probe(&slow.body, &LIMITS).expect("a WebP body");
    assert_eq!(found.format, ImageFormat::Webp);
    let vary = slow.header("vary").expect("vary").to_ascii_lowercase();
    for field in ["accept", "save-data", "ect", "rtt", "downlink"] {
        assert!(vary.contains(field), "{vary}");
    }
    let alternates = slow.header("alternates").expect("alternates");
    assert!(
        alternates.starts_with(&format!(
            "{{\"/photo.jpg\" 1.000 {{type image/jpeg}} {{length {}}}}}",
            photo.len()
        )),
        "{alternates}"
    );
    let location = slow.header("content-location").expect("content-location");
    assert!(location.starts_with("/.wirefold/v/"), "{location}");
    assert!(alternates.contains(location), "{alternates}");

    // The variant's own URL: the same body, immutable.
    let own = curl(&proxy.url(location), &[]).await;
    assert_eq!(own.status, 200);
    assert_eq!(own.body, slow.body);
    assert!(own
        .header("cache-control")
        .is_some_and(|c| c.contains("immutable")));

    // A client that does not name WebP gets a JPEG variant.
    let jpeg = curl(
        &url,
        &[
            "-H",
            "Accept: image/jpeg",
            "-H",
            "Downlink: 0.2",
            "-H",
            "RTT: 300",
        ],
    )
    .await;
    assert_eq!(jpeg.header("content-type"), Some("image/jpeg"));
    assert!(jpeg.body.len() < photo.len());
    decode_ok(&jpeg.body, ImageFormat::Jpeg);

    // Save-Data: at most 35% of the original.
    let saver = curl(&url, &["-H", CHROMIUM_ACCEPT, "-H", "Save-Data: on"]).await;
    assert!(
        saver.body.len() * 100 <= photo.len() * 35,
        "{}",
        saver.body.len()
    );
    assert_eq!(saver.header("tcn"), Some("choice"));

    // A fast link, no hints, garbage hints: the original.
    for hints in [
        &["-H", "Downlink: 10", "-H", "RTT: 0"][..],
        &[],
        &[
            "-H",
            "Downlink: fast",
            "-H",
            "RTT: -5",
            "-H",
            "ECT: 9g",
            "-H",
            "Save-Data: maybe",
        ],
        &["-H", "Downlink: 0", "-H", "RTT: 99999999999999999999"],
    ] {
        let mut args = vec!["-H", CHROMIUM_ACCEPT];
        args.extend_from_slice(hints);
        let r = curl(&url, &args).await;
        assert_eq!(r.status, 200, "{hints:?}");
        assert_eq!(r.body, photo, "{hints:?}");
        assert_eq!(r.header("tcn"), None, "{hints:?}");
    }

    // Negotiate: vlist gets the list itself.
    let list = curl(&url, &["-H", "Negotiate: vlist"]).await;
    assert_eq!(list.status, 300);
    assert_eq!(list.header("tcn"), Some("list"));
    assert!(String::from_utf8_lossy(&list.body).contains(location));

    // Made-up variant URLs are not found.
    for bad in [
        "/.wirefold/v/".to_string(),
        "/.wirefold/v/zz/zz.webp".to_string(),
        format!("{}x", location),
        location.replace(".webp", ".jpg"),
    ] {
        assert_eq!(curl(&proxy.url(&bad), &[]).await.status, 404, "{bad}");
    }

    let slow_decisions = proxy
        .metric("wirefold_fidelity_decisions_total{reason=\"slow_link\"}")
        .await;
    assert!(slow_decisions >= 2.0, "{slow_decisions}");
    proxy.running.shutdown().await;
}

/// AVIF rungs (feature `avif`) come in a pass after the WebP and JPEG ones, and a
/// restart between the passes only delays them: the server that finds the ladder
/// unfinished makes the rest. Then a client naming `image/avif` gets an AVIF rung, one
/// naming only WebP still gets WebP.
#[cfg(feature = "avif")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avif_rungs_come_after_the_first_pass_even_across_a_restart() {
    let root = tempfile::tempdir().unwrap();
    let photo = site(root.path());
    let data = tempfile::tempdir().unwrap();
    let config = |cpu_share: f64| {
        let mut config = test_config(data.path());
        config.root = Some(root.path().to_path_buf());
        config.fidelity.cpu_share = cpu_share;
        config
    };
    let slow = ["-H", "Downlink: 0.2", "-H", "RTT: 300"];

    // The first server makes the first pass, then pauses 99 times as long (its CPU
    // share is 1%) and is stopped in the pause, its runtime with it.
    let first = config(0.01);
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let running = proxy::start(first).await.expect("server starts");
            let proxy = Proxy {
                running,
                data: tempfile::tempdir().unwrap(),
            };
            assert!(until_negotiable(&proxy, "/photo.jpg", 600).await);
            let r = curl(&proxy.url("/photo.jpg"), &["-H", CHROMIUM_ACCEPT]).await;
            let alternates = r.header("alternates").expect("alternates");
            assert!(!alternates.contains("image/avif"), "{alternates}");
            proxy.running.shutdown().await;
        });
        runtime.shutdown_timeout(Duration::from_secs(30));
    })
    .join()
    .unwrap();

    let running = proxy::start(config(0.5)).await.expect("server restarts");
    let proxy = Proxy {
        running,
        data: tempfile::tempdir().unwrap(),
    };
    let url = proxy.url("/photo.jpg");
    let mut complete = false;
    for _ in 0..1200 {
        let r = curl(&url, &["-H", CHROMIUM_ACCEPT]).await;
        if r.header("alternates")
            .is_some_and(|a| a.contains("image/avif"))
        {
            complete = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(complete, "the AVIF pass was not made after the restart");

    let mut args = vec!["-H", CHROMIUM_ACCEPT];
    args.extend_from_slice(&slow);
    let avif = curl(&url, &args).await;
    assert_eq!(avif.header("content-type"), Some("image/avif"));
    assert_eq!(&avif.body[4..12], b"ftypavif");
    assert!(
        avif.body.len() * 10 < photo.len() * 7,
        "{}",
        avif.body.len()
    );
    let location = avif.header("content-location").expect("content-location");
    assert!(location.ends_with(".avif"), "{location}");
    let own = curl(&proxy.url(location), &[]).await;
    assert_eq!(own.header("content-type"), Some("image/avif"));
    assert_eq!(own.body, avif.body);

    let mut args = vec!["-H", "Accept: image/webp,*/*"];
    args.extend_from_slice(&slow);
    let webp = curl(&url, &args).await;
    assert_eq!(webp.header("content-type"), Some("image/webp"));
    let made = proxy
        .metric("wirefold_fidelity_variants_made_total{kind=\"image\"}")
        .await;
    assert!(
        made >= 1.0,
        "the second server counts the AVIF rungs it made: {made}"
    );
    proxy.running.shutdown().await;
}

/// The paper's estimate is for a page with its subresources: an image that alone
/// would arrive within the target time gets a variant when, with the rest of the page
/// it belongs to (its `Referer`, whose manifest names it), the page would not.
#[tokio::test]
async fn an_image_is_weighed_with_the_rest_of_its_page() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (photo_jpeg(640, 480), photo_jpeg(800, 600));
    std::fs::write(root.path().join("a.jpg"), &a).unwrap();
    std::fs::write(root.path().join("b.jpg"), &b).unwrap();
    std::fs::write(
        root.path().join("page.html"),
        "<!doctype html><title>two photos</title><img src=a.jpg><img src=b.jpg>",
    )
    .unwrap();
    std::fs::write(
        root.path().join("other.html"),
        "<!doctype html><p>no images",
    )
    .unwrap();
    let proxy = start_root(root.path(), |_| {}).await;
    let page = proxy.url("/page.html");
    // The page (its manifest and size), then its images as a browser asks for them
    // (b.jpg by HEAD: its size is learnt all the same).
    assert_eq!(curl(&page, &[]).await.status, 200);
    assert_eq!(curl(&proxy.url("/other.html"), &[]).await.status, 200);
    let referer = format!("Referer: {page}");
    for (image, head) in [("/a.jpg", false), ("/b.jpg", true)] {
        let mut args = vec!["-H", CHROMIUM_ACCEPT, "-H", &referer];
        if head {
            args.push("-I");
        }
        assert_eq!(curl(&proxy.url(image), &args).await.status, 200, "{image}");
        assert!(
            until_negotiable(&proxy, image, 600).await,
            "no ladder for {image}"
        );
    }
    // A link on which a.jpg alone takes 2 s (no round trips), the page over 3 s.
    let kbps = (a.len() as u64 * 8 / 2).div_ceil(1000);
    let downlink = format!("Downlink: {}", kbps as f64 / 1000.0);
    let ask = |referer: Option<String>| {
        let (url, downlink) = (proxy.url("/a.jpg"), downlink.clone());
        async move {
            let mut args = vec![
                "-H".to_string(),
                CHROMIUM_ACCEPT.to_string(),
                "-H".to_string(),
                downlink,
                "-H".to_string(),
                "RTT: 0".to_string(),
            ];
            if let Some(referer) = referer {
                args.extend(["-H".to_string(), format!("Referer: {referer}")]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            curl(&url, &args).await
        }
    };
    let alone = ask(None).await;
    assert_eq!(alone.body, a, "alone, the original meets the target");
    let with_page = ask(Some(page.clone())).await;
    assert_eq!(with_page.header("tcn"), Some("choice"));
    assert!(with_page.body.len() < a.len(), "{}", with_page.body.len());
    // A Referer whose manifest does not name the image adds nothing.
    let elsewhere = ask(Some(proxy.url("/other.html"))).await;
    assert_eq!(elsewhere.body, a);
    proxy.running.shutdown().await;
}

fn decode_ok(bytes: &[u8], format: ImageFormat) {
    fidelity::image::decode(bytes, format, &LIMITS).expect("decodes");
}

#[tokio::test]
async fn hostile_images_are_served_as_they_came() {
    let root = tempfile::tempdir().unwrap();
    site(root.path());
    // The bomb is a few dozen bytes: judge it however small.
    let proxy = start_root(root.path(), |c| c.fidelity.min_image_bytes = 0).await;
    for name in ["bomb.png", "truncated.jpg", "garbage.png"] {
        let original = std::fs::read(root.path().join(name)).unwrap();
        let first = curl(&proxy.url(&format!("/{name}")), &["-H", CHROMIUM_ACCEPT]).await;
        assert_eq!((first.status, &first.body), (200, &original), "{name}");
    }
    // Each is judged in the background; wait until all three are.
    let mut judged = false;
    for _ in 0..600 {
        let bombs = proxy
            .metric("wirefold_fidelity_refused_total{reason=\"pixels\"}")
            .await;
        let broken = proxy
            .metric("wirefold_fidelity_refused_total{reason=\"undecodable\"}")
            .await;
        let mislabelled = proxy
            .metric("wirefold_fidelity_refused_total{reason=\"format\"}")
            .await;
        if (bombs, broken, mislabelled) == (1.0, 1.0, 1.0) {
            judged = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(judged, "the three images were not all judged");
    for name in ["bomb.png", "truncated.jpg", "garbage.png"] {
        let original = std::fs::read(root.path().join(name)).unwrap();
        let r = curl(
            &proxy.url(&format!("/{name}")),
            &[
                "-H",
                CHROMIUM_ACCEPT,
                "-H",
                "Save-Data: on",
                "-H",
                "ECT: slow-2g",
            ],
        )
        .await;
        assert_eq!((r.status, &r.body), (200, &original), "{name}");
        assert_eq!(r.header("tcn"), None, "{name}");
    }
    proxy.running.shutdown().await;
}

#[tokio::test]
async fn the_egress_controller_caps_fidelity_when_egress_is_high() {
    let root = tempfile::tempdir().unwrap();
    let photo = site(root.path());
    // 64 kbit/s: a few requests a second exceed it.
    let proxy = start_root(root.path(), |c| c.fidelity.egress_limit_bps = 64_000).await;
    curl(&proxy.url("/photo.jpg"), &["-H", CHROMIUM_ACCEPT]).await;
    assert!(
        until_negotiable(&proxy, "/photo.jpg", 600).await,
        "no ladder made"
    );
    let capped = until_variant(&proxy.url("/photo.jpg"), &["-H", CHROMIUM_ACCEPT])
        .await
        .expect("the controller never capped fidelity");
    assert!(capped.body.len() < photo.len());
    // Chosen by the server's state, which no request field names: not for sharing.
    assert!(capped
        .header("cache-control")
        .is_some_and(|c| c.contains("private")));
    let fraction = proxy.metric("wirefold_fidelity_max_fraction").await;
    assert!(fraction > 0.0 && fraction < 1.0, "{fraction}");
    let egress = proxy
        .metric("wirefold_fidelity_decisions_total{reason=\"egress\"}")
        .await;
    assert!(egress >= 1.0, "{egress}");
    proxy.running.shutdown().await;
}

#[tokio::test]
async fn a_prepared_image_answer_stands_only_while_the_choice_is_the_same() {
    let root = tempfile::tempdir().unwrap();
    let photo = site(root.path());
    let big: Vec<u8> = (0..photo.len() * 40)
        .map(|i| (i * 7919 % 251) as u8)
        .collect();
    std::fs::write(root.path().join("big.bin"), &big).unwrap();
    // Eight photos a second: two stay well under the controller's 90 %.
    let limit = photo.len() as u64 * 8 * 8;
    let proxy = start_root(root.path(), |c| {
        c.fidelity.avif = false;
        c.fidelity.egress_limit_bps = limit;
    })
    .await;
    let url = proxy.url("/photo.jpg");
    // `HEAD` until the ladder is made: no egress meanwhile.
    let mut negotiable = false;
    for _ in 0..600 {
        let r = curl(&url, &["-I", "-H", CHROMIUM_ACCEPT]).await;
        if r.header("alternates").is_some() {
            negotiable = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(negotiable, "no ladder made");
    let ask = ["-H", CHROMIUM_ACCEPT];
    assert_eq!(curl(&url, &ask).await.body, photo, "the stages' answer");
    let sent = proxy.metric(PREPARED_SENT).await;
    assert_eq!(curl(&url, &ask).await.body, photo, "the prepared answer");
    assert_eq!(proxy.metric(PREPARED_SENT).await, sent + 1.0);
    // Egress far above the limit: the controller caps fidelity, and the very same
    // request gets a smaller variant although its original's answer was prepared.
    for _ in 0..3 {
        assert_eq!(
            curl(&proxy.url("/big.bin"), &[]).await.body.len(),
            big.len()
        );
    }
    let capped = until_variant(&url, &ask)
        .await
        .expect("the prepared original stood in the cap's way");
    assert!(capped.body.len() < photo.len());
    proxy.running.shutdown().await;
}

#[tokio::test]
async fn a_prepared_image_answer_matches_the_stages_and_reads_the_link_once() {
    let root = tempfile::tempdir().unwrap();
    let photo = site(root.path());
    let proxy = start_root(root.path(), |c| {
        c.fidelity.avif = false;
        c.cache.prepared_verify = true;
    })
    .await;
    let url = proxy.url("/photo.jpg");
    curl(&url, &["-H", CHROMIUM_ACCEPT]).await;
    assert!(
        until_negotiable(&proxy, "/photo.jpg", 600).await,
        "no ladder made"
    );
    let samples = "wirefold_fidelity_network_samples_total";
    let before = proxy.metric(samples).await;
    let asks: [&[&str]; 3] = [
        &["-H", CHROMIUM_ACCEPT],
        &["-H", CHROMIUM_ACCEPT, "-H", "ECT: 2g"],
        &["-H", CHROMIUM_ACCEPT, "-H", "Save-Data: on"],
    ];
    for _ in 0..6 {
        for args in asks {
            let r = curl(&url, args).await;
            assert_eq!(r.status, 200);
            let variant = r.header("tcn") == Some("choice");
            // Loopback is fast: only the hints choose a smaller variant.
            assert_eq!(variant, args.len() > 2, "{args:?}");
            assert_eq!(r.body == photo, !variant, "{args:?}");
        }
    }
    let verified = proxy
        .metric("wirefold_prepared_responses_total{result=\"verified\"}")
        .await;
    assert!(verified > 0.0, "prepared answers were checked");
    assert_eq!(
        proxy
            .metric("wirefold_prepared_responses_total{result=\"mismatch\"}")
            .await,
        0.0
    );
    // One passive sample per response: a verified answer's check reads the link,
    // and the stages run after it use that reading instead of taking another.
    assert_eq!(proxy.metric(samples).await - before, 18.0);
    proxy.running.shutdown().await;
}
