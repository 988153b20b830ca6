//! Push over the link end to end: curl → `wirefold client` → link → `wirefold serve
//! --link` → origin, on loopback. A page's subresources come with it into the client
//! proxy, which then answers the browser's requests for them without the link.

mod servers;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use servers::*;

/// A site: each path's fields and body; every request counted per path.
struct Site {
    origin: TestOrigin,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

impl Site {
    fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

type Resource = (&'static [(&'static str, &'static str)], Vec<u8>);

async fn site(resources: HashMap<String, Resource>) -> Site {
    slow_site(resources, std::time::Duration::ZERO).await
}

/// A site whose every answer waits `delay`.
async fn slow_site(resources: HashMap<String, Resource>, delay: std::time::Duration) -> Site {
    let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let counted = hits.clone();
    let origin = slow_origin(delay, move |req| {
        let path = req.uri().path().to_string();
        *counted.lock().unwrap().entry(path.clone()).or_default() += 1;
        match resources.get(&path) {
            Some((fields, body)) => response(200, fields, body.clone()),
            None => response(404, &[], "not here"),
        }
    })
    .await;
    Site { origin, hits }
}

const PAGE: &[(&str, &str)] = &[
    ("content-type", "text/html; charset=utf-8"),
    ("cache-control", "no-cache"),
];
const STATIC_CSS: &[(&str, &str)] = &[
    ("content-type", "text/css"),
    ("cache-control", "max-age=3600"),
];
const STATIC_JS: &[(&str, &str)] = &[
    ("content-type", "text/javascript"),
    ("cache-control", "max-age=3600"),
];
const STATIC_PNG: &[(&str, &str)] = &[
    ("content-type", "image/png"),
    ("cache-control", "max-age=3600"),
];

/// Text a stylesheet or script might hold, different per `seed`.
fn text(seed: &str, len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while out.len() < len {
        out.extend_from_slice(
            format!("/* {seed} rule {i} */ .c{i} {{ margin: {i}px }}\n").as_bytes(),
        );
        i += 1;
    }
    out
}

/// A page referencing /s.css, /a.js and /i.png, and the three resources.
fn three_resource_site() -> HashMap<String, Resource> {
    let page = "<!doctype html><html><head><title>p</title>\
                <link rel=stylesheet href=/s.css><script src=/a.js></script></head>\
                <body><img src=/i.png></body></html>";
    HashMap::from([
        ("/page.html".to_string(), (PAGE, page.as_bytes().to_vec())),
        ("/s.css".to_string(), (STATIC_CSS, text("css", 20_000))),
        ("/a.js".to_string(), (STATIC_JS, text("js", 30_000))),
        ("/i.png".to_string(), (STATIC_PNG, vec![7u8; 5_000])),
    ])
}

/// A browser's navigation through the pair.
async fn navigate(pair: &Pair, url: &str) -> Curled {
    curl(
        url,
        &[
            "-x",
            &pair.proxy(),
            "--noproxy",
            "",
            "-H",
            "Accept: text/html",
        ],
    )
    .await
}

async fn get(pair: &Pair, url: &str) -> Curled {
    curl(url, &["-x", &pair.proxy(), "--noproxy", ""]).await
}

fn client_metric(pair: &Pair, name: &str) -> f64 {
    metric(&pair.client.metrics.encode().unwrap(), name)
}

async fn server_pushes(pair: &Pair, result: &str) -> f64 {
    pair.server
        .metric(&format!(
            "wirefold_link_pushes_total{{result=\"{result}\"}}"
        ))
        .await
}

/// The promised pushes the server proxy has ended so far, however each ended.
async fn pushes_ended_in_all(pair: &Pair) -> f64 {
    let mut ended = 0.0;
    for result in ["full", "held", "withdrawn"] {
        ended += server_pushes(pair, result).await;
    }
    ended
}

/// Browser requests the client proxy answered from what it held, fresh: without a
/// round trip over the link.
fn answered_locally(pair: &Pair) -> f64 {
    client_metric(
        pair,
        "wirefold_client_requests_total{outcome=\"local_fresh\"}",
    )
}

/// Waits until the server proxy has ended `expected` promised pushes in all (it
/// counts each as it hands it to the link, which may be just after the client proxy
/// has it); fails after ten seconds.
async fn pushes_ended(pair: &Pair, expected: f64) {
    for _ in 0..200 {
        let ended = pushes_ended_in_all(pair).await;
        if ended >= expected {
            assert_eq!(ended, expected, "more pushes than promised");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the server proxy did not end {expected} pushes");
}

/// Waits for the server proxy to end `pushed` promised pushes in all, checks that it
/// sent each whole, and that the client proxy answered `local` browser requests from
/// what it held: without a round trip over the link.
async fn all_pushed_whole_and_answered_locally(pair: &Pair, pushed: f64, local: f64) {
    pushes_ended(pair, pushed).await;
    assert_eq!(server_pushes(pair, "full").await, pushed);
    assert_eq!(
        answered_locally(pair),
        local,
        "each pushed resource was held when the browser asked"
    );
}

/// The paths of the three resources of `three_resource_site`'s page.
const THREE: [&str; 3] = ["/s.css", "/a.js", "/i.png"];

/// Loads /page.html, then its resources at `paths` as a browser would, checking every
/// body.
async fn load_page(
    pair: &Pair,
    site: &Site,
    resources: &HashMap<String, Resource>,
    paths: &[&str],
) {
    let page = navigate(pair, &site.origin.url("/page.html")).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.body, resources["/page.html"].1);
    for &path in paths {
        let got = get(pair, &site.origin.url(path)).await;
        assert_eq!(got.status, 200, "{path}");
        assert_eq!(got.body, resources[path].1, "{path}");
    }
}

/// The three-resource site behind a pair (tweaked as `start_pair` takes it), its page
/// loaded once with its resources.
async fn three_resources_loaded(
    tweak_server: impl FnOnce(&mut proxy::Config),
    tweak_client: impl FnOnce(&mut client_proxy::ClientConfig),
) -> (HashMap<String, Resource>, Site, Pair) {
    let resources = three_resource_site();
    let site = site(resources.clone()).await;
    let pair = start_pair(tweak_server, tweak_client).await;
    load_page(&pair, &site, &resources, &THREE).await;
    (resources, site, pair)
}

#[tokio::test]
async fn a_pages_resources_are_pushed_and_then_answered_without_the_link() {
    let (resources, site, pair) = three_resources_loaded(|_| {}, |_| {}).await;
    all_pushed_whole_and_answered_locally(&pair, 3.0, 3.0).await;
    assert_eq!(
        client_metric(&pair, "wirefold_client_pushes_total{outcome=\"kept\"}"),
        3.0
    );
    for path in THREE {
        assert_eq!(site.hits(path), 1, "{path}: fetched once, for the push");
    }
    let pushed: usize = THREE.iter().map(|p| resources[*p].1.len()).sum();
    assert_eq!(
        client_metric(&pair, "wirefold_client_push_bytes_total"),
        pushed as f64
    );
}

#[tokio::test]
async fn a_request_for_a_resource_still_being_pushed_waits_for_it() {
    let resources = three_resource_site();
    // The server fetches the pushed resources one after another, 300 ms each: the
    // last arrives well after the page.
    let site = slow_site(resources.clone(), std::time::Duration::from_millis(300)).await;
    let pair = start_pair(|_| {}, |_| {}).await;
    navigate(&pair, &site.origin.url("/page.html")).await;
    let last = get(&pair, &site.origin.url("/i.png")).await;
    assert_eq!(last.body, resources["/i.png"].1);
    assert_eq!(
        answered_locally(&pair),
        1.0,
        "answered from the push it waited for"
    );
    assert_eq!(site.hits("/i.png"), 1, "not fetched a second time");
}

#[tokio::test]
async fn without_push_the_resources_cross_the_link_as_before() {
    let (_, _, pair) = three_resources_loaded(|c| c.link.push = false, |_| {}).await;
    assert_eq!(server_pushes(&pair, "full").await, 0.0);
    assert_eq!(answered_locally(&pair), 0.0);
}

#[tokio::test]
async fn what_the_client_proxy_holds_is_confirmed_not_pushed_again() {
    let (resources, site, pair) = three_resources_loaded(|_| {}, |_| {}).await;
    // The page again (it is no-cache): its resources are announced as held.
    assert_eq!(
        navigate(&pair, &site.origin.url("/page.html")).await.body,
        resources["/page.html"].1
    );
    // Waits for the last push (held requests wait for promised ones).
    assert_eq!(
        get(&pair, &site.origin.url("/i.png")).await.body,
        resources["/i.png"].1
    );
    pushes_ended(&pair, 6.0).await;
    assert_eq!(server_pushes(&pair, "full").await, 3.0, "not sent again");
    assert_eq!(server_pushes(&pair, "held").await, 3.0);
    assert_eq!(
        client_metric(&pair, "wirefold_client_pushes_total{outcome=\"refreshed\"}"),
        3.0
    );
    assert_eq!(
        client_metric(&pair, "wirefold_client_push_bytes_already_held_total"),
        0.0
    );
}

#[tokio::test]
async fn a_client_proxy_that_announces_nothing_gets_what_it_holds_again_and_counts_it() {
    let (resources, site, pair) = three_resources_loaded(|_| {}, |c| c.announce_held = false).await;
    navigate(&pair, &site.origin.url("/page.html")).await;
    get(&pair, &site.origin.url("/i.png")).await;
    pushes_ended(&pair, 6.0).await;
    assert_eq!(server_pushes(&pair, "full").await, 6.0);
    let wasted: usize = THREE.iter().map(|p| resources[*p].1.len()).sum();
    assert_eq!(
        client_metric(&pair, "wirefold_client_push_bytes_already_held_total"),
        wasted as f64
    );
}

#[tokio::test]
async fn nothing_private_personal_or_unfit_to_reuse_is_pushed() {
    let page = "<link rel=stylesheet href=/private.css><script src=/cookie.js></script>\
                <img src=/nostore.png><link rel=stylesheet href=/nocache.css>\
                <link rel=stylesheet href=/vary.css><link rel=stylesheet href=/ok.css>";
    let mine = "<link rel=stylesheet href=/mine.css>";
    let resources = HashMap::from([
        ("/page.html".to_string(), (PAGE, page.as_bytes().to_vec())),
        (
            "/private.css".to_string(),
            (
                &[
                    ("content-type", "text/css"),
                    ("cache-control", "private, max-age=60"),
                ][..],
                text("private", 100),
            ),
        ),
        (
            "/cookie.js".to_string(),
            (
                &[("cache-control", "max-age=60"), ("set-cookie", "id=1")][..],
                text("cookie", 100),
            ),
        ),
        (
            "/nostore.png".to_string(),
            (&[("cache-control", "no-store")][..], vec![1u8; 100]),
        ),
        (
            "/nocache.css".to_string(),
            (&[("cache-control", "no-cache")][..], text("nocache", 100)),
        ),
        (
            "/vary.css".to_string(),
            (
                &[("cache-control", "max-age=60"), ("vary", "accept-language")][..],
                text("vary", 100),
            ),
        ),
        ("/ok.css".to_string(), (STATIC_CSS, text("ok", 100))),
        (
            "/mine.html".to_string(),
            (
                &[("content-type", "text/html"), ("cache-control", "private")][..],
                mine.as_bytes().to_vec(),
            ),
        ),
        ("/mine.css".to_string(), (STATIC_CSS, text("mine", 100))),
    ]);
    let site = site(resources.clone()).await;
    let pair = start_pair(|_| {}, |_| {}).await;
    navigate(&pair, &site.origin.url("/page.html")).await;
    pushes_ended(&pair, 6.0).await;
    assert_eq!(server_pushes(&pair, "full").await, 1.0, "only /ok.css");
    assert_eq!(server_pushes(&pair, "withdrawn").await, 5.0);
    for path in ["/private.css", "/cookie.js", "/nocache.css", "/vary.css"] {
        let got = get(&pair, &site.origin.url(path)).await;
        assert_eq!(got.body, resources[path].1, "{path}: over the link");
    }
    assert_eq!(
        get(&pair, &site.origin.url("/ok.css")).await.body,
        resources["/ok.css"].1
    );
    assert_eq!(
        answered_locally(&pair),
        1.0,
        "only the pushed /ok.css was answered here"
    );
    // A personalised page promises nothing: its manifest never leaves it.
    navigate(&pair, &site.origin.url("/mine.html")).await;
    get(&pair, &site.origin.url("/mine.css")).await;
    assert_eq!(
        site.hits("/mine.css"),
        1,
        "fetched by the browser's request only"
    );
    assert_eq!(
        pushes_ended_in_all(&pair).await,
        6.0,
        "nothing promised for the personalised page"
    );
    // Nor does a page asked for with credentials.
    let authorized = curl(
        &site.origin.url("/page.html"),
        &[
            "-x",
            &pair.proxy(),
            "--noproxy",
            "",
            "-H",
            "Accept: text/html",
            "-H",
            "Authorization: Basic eDp5",
        ],
    )
    .await;
    assert_eq!(authorized.status, 200);
    assert_eq!(
        pushes_ended_in_all(&pair).await,
        6.0,
        "nothing promised for a request with credentials"
    );
}

#[tokio::test]
async fn thousands_of_references_and_garbage_urls_push_a_bounded_few() {
    let mut page = String::from(
        "<link rel=stylesheet href=\"http://[::1\"><script src=\"javascript:alert(1)\"></script>\
         <link rel=stylesheet href=//elsewhere.test/x.css><img src=\"http://a b/\">\
         <img src=\"data:image/png;base64,AAAA\">",
    );
    for i in 0..5000 {
        page.push_str(&format!("<img src=/i{i}.png>"));
    }
    let mut resources =
        HashMap::from([("/page.html".to_string(), (PAGE, page.clone().into_bytes()))]);
    for i in 0..5000 {
        resources.insert(format!("/i{i}.png"), (STATIC_PNG, vec![i as u8; 64]));
    }
    let site = site(resources).await;
    let pair = start_pair(|c| c.link.push_max_resources = 8, |_| {}).await;
    let got = navigate(&pair, &site.origin.url("/page.html")).await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.body,
        page.as_bytes(),
        "the page itself is always served"
    );
    pushes_ended(&pair, 8.0).await;
    assert_eq!(server_pushes(&pair, "full").await, 8.0);
    assert_eq!(
        get(&pair, &site.origin.url("/i7.png")).await.body,
        vec![7u8; 64]
    );
    assert_eq!(
        site.origin.hits(),
        1 + 8,
        "the page and the eight pushed images, nothing more"
    );
}

#[tokio::test]
async fn a_pushed_instance_past_its_freshness_is_revalidated_over_the_link() {
    let page = "<link rel=stylesheet href=/brief.css>";
    let brief = text("brief", 2_000);
    let resources = HashMap::from([
        ("/page.html".to_string(), (PAGE, page.as_bytes().to_vec())),
        (
            "/brief.css".to_string(),
            (
                // Dates have whole seconds: three leave room for rounding.
                &[("content-type", "text/css"), ("cache-control", "max-age=3")][..],
                brief.clone(),
            ),
        ),
    ]);
    let site = site(resources).await;
    let pair = start_pair(|_| {}, |_| {}).await;
    navigate(&pair, &site.origin.url("/page.html")).await;
    assert_eq!(get(&pair, &site.origin.url("/brief.css")).await.body, brief);
    assert_eq!(
        answered_locally(&pair),
        1.0,
        "fresh: answered from the push"
    );
    // Past its three seconds of freshness (and the server's copy's too).
    tokio::time::sleep(std::time::Duration::from_millis(4100)).await;
    assert_eq!(get(&pair, &site.origin.url("/brief.css")).await.body, brief);
    assert_eq!(answered_locally(&pair), 1.0, "stale: not answered locally");
    assert_eq!(
        client_metric(&pair, "wirefold_client_requests_total{outcome=\"confirm\"}"),
        1.0,
        "revalidated over the link: the pushed instance is confirmed"
    );
}

#[tokio::test]
async fn a_stylesheets_imports_and_fonts_are_pushed_from_the_next_load_on() {
    let page = "<!doctype html><html><head><link rel=stylesheet href=/s.css></head>\
                <body>text</body></html>";
    let css = "@import url(/base.css);\n\
               @font-face { font-family: F; src: url(/f.woff2) format(\"woff2\"); }\n\
               body { font-family: F }\n";
    let font: &[(&str, &str)] = &[
        ("content-type", "font/woff2"),
        ("cache-control", "max-age=3600"),
    ];
    let resources = HashMap::from([
        ("/page.html".to_string(), (PAGE, page.as_bytes().to_vec())),
        ("/s.css".to_string(), (STATIC_CSS, css.as_bytes().to_vec())),
        ("/base.css".to_string(), (STATIC_CSS, text("base", 3_000))),
        ("/f.woff2".to_string(), (font, vec![9u8; 4_000])),
    ]);
    let site = site(resources.clone()).await;
    let pair = start_pair(|_| {}, |_| {}).await;
    let first = navigate(&pair, &site.origin.url("/page.html")).await;
    assert_eq!(first.body, page.as_bytes());
    pushes_ended(&pair, 1.0).await;
    assert_eq!(
        server_pushes(&pair, "full").await,
        1.0,
        "the first load pushes what the page itself names: /s.css"
    );
    // The page's one entry, then the import and the font its stylesheet adds once
    // read in the background (counted once the manifest with them is in force).
    metric_reaches(&pair.server, "wirefold_manifest_entries_total", 3.0).await;
    let pair = pair.with_fresh_client().await;
    let read_resources = ["/s.css", "/base.css", "/f.woff2"];
    load_page(&pair, &site, &resources, &read_resources).await;
    // The stylesheet, its import and its font.
    all_pushed_whole_and_answered_locally(&pair, 4.0, 3.0).await;
    for path in read_resources {
        assert_eq!(
            site.hits(path),
            1,
            "{path}: fetched once, then from the cache"
        );
    }
}
