//! The sample site of `wirefold demo`: an origin whose page and script change while it
//! runs, with the caching fields a real site sends. It knows nothing of wirefold; the
//! demo puts the accelerator in front of it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::net::TcpListener;

use crate::serve;

/// The page changes every this many seconds; the script's version every `ASSET_PERIOD`.
pub const PAGE_PERIOD: u64 = 5;
const ASSET_PERIOD: u64 = 30;

/// Prose the sample pages are made of: real sentences compress like real pages.
const PROSE: &str = include_str!("sample_site_prose.txt");

/// The sample site, started on a free loopback port. Returns its address.
pub async fn start() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let site = Arc::new(SampleSite {
        started: Instant::now(),
        photo: photo_png(),
    });
    tokio::spawn(serve::accept_loop(listener, move |req| {
        std::future::ready(site.answer(&req))
    }));
    Ok(addr)
}

struct SampleSite {
    started: Instant,
    photo: Vec<u8>,
}

impl SampleSite {
    fn tick(&self, period: u64) -> u64 {
        self.started.elapsed().as_secs() / period
    }

    fn answer(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path();
        let version = self.tick(ASSET_PERIOD);
        let script = format!("/static/app.{version}.js");
        match path {
            "/" | "/index.html" => self.page(req, &script),
            "/static/style.css" => reply(
                "text/css",
                "public, max-age=3600",
                STYLE.as_bytes().to_vec(),
            ),
            p if p.starts_with("/static/app.") && p.ends_with(".js") => {
                let v: u64 = p["/static/app.".len()..p.len() - 3].parse().unwrap_or(0);
                reply(
                    "application/javascript",
                    "public, max-age=31536000, immutable",
                    script_text(v).into_bytes(),
                )
            }
            "/img/logo.svg" => reply(
                "image/svg+xml",
                "public, max-age=86400",
                LOGO.as_bytes().to_vec(),
            ),
            "/img/photo.png" => reply("image/png", "public, max-age=86400", self.photo.clone()),
            "/search" => {
                let q = req
                    .uri()
                    .query()
                    .and_then(|q| q.strip_prefix("q="))
                    .unwrap_or("");
                let hits: Vec<String> = PROSE
                    .split(". ")
                    .filter(|s| !q.is_empty() && s.to_lowercase().contains(&q.to_lowercase()))
                    .take(50)
                    .map(|s| format!("{:?}", s.trim()))
                    .collect();
                let json = format!("{{\"q\":{q:?},\"results\":[{}]}}", hits.join(","));
                reply("application/json", "public, max-age=10", json.into_bytes())
            }
            "/api/now" => {
                let now = httpdate::fmt_http_date(SystemTime::now());
                reply(
                    "application/json",
                    "no-store",
                    format!("{{\"now\":{now:?},\"filler\":{:?}}}", &PROSE[..2000]).into_bytes(),
                )
            }
            _ => {
                let mut r = reply("text/plain", "no-cache", b"not found\n".to_vec());
                *r.status_mut() = StatusCode::NOT_FOUND;
                r
            }
        }
    }

    /// The page: mostly stable prose with a news block that changes every few seconds.
    /// `no-cache` + ETag: the accelerator revalidates each time and gets 304 while it
    /// has not changed.
    fn page(&self, req: &Request<Incoming>, script: &str) -> Response<Full<Bytes>> {
        let tick = self.tick(PAGE_PERIOD);
        let etag = format!("\"page-{tick}\"");
        #[allow(
            clippy::expect_used,
            reason = "a quoted `page-` and digits are a valid field value"
        )]
        let etag_value = HeaderValue::from_str(&etag).expect("valid etag");
        if req
            .headers()
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            == Some(etag.as_str())
        {
            let mut r = Response::new(Full::new(Bytes::new()));
            *r.status_mut() = StatusCode::NOT_MODIFIED;
            r.headers_mut().insert(header::ETAG, etag_value);
            return r;
        }
        let paragraphs: Vec<&str> = PROSE.split("\n\n").collect();
        let news = paragraphs[(tick as usize) % paragraphs.len()];
        let mut html = format!(
            "<!doctype html><html><head><meta charset=utf-8><title>wirefold sample site</title>\
             <link rel=stylesheet href=/static/style.css><script defer src={script}></script></head><body>\
             <header><img src=/img/logo.svg alt=logo width=64><h1>The sample site</h1></header>\
             <section id=news><h2>News, update {tick}</h2><p>{news}</p></section>\
             <img src=/img/photo.png alt=photo width=256><p><a href=/search?q=delta>search for delta</a></p><main>"
        );
        for (i, p) in paragraphs.iter().enumerate() {
            html.push_str(&format!("<h2>Section {}</h2><p>{p}</p>", i + 1));
        }
        html.push_str("</main></body></html>");
        let mut r = reply("text/html; charset=utf-8", "no-cache", html.into_bytes());
        r.headers_mut().insert(header::ETAG, etag_value);
        r
    }
}

fn reply(
    content_type: &'static str,
    cache_control: &'static str,
    body: Vec<u8>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(cache_control),
    );
    r
}

fn script_text(version: u64) -> String {
    let mut s = format!("// sample application, build {version}\nconst BUILD = {version};\n");
    for (i, sentence) in PROSE.split(". ").enumerate().take(120) {
        s.push_str(&format!(
            "function section{i}() {{ return {:?}; }}\n",
            sentence.trim()
        ));
    }
    s.push_str("document.addEventListener('DOMContentLoaded', () => { document.title += ' (build ' + BUILD + ')'; });\n");
    s
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:48rem;margin:2rem auto;line-height:1.5;color:#222}\
header{display:flex;gap:1rem;align-items:center}h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2rem}\
#news{background:#f4f7fb;border-left:4px solid #3a6ea5;padding:.5rem 1rem}a{color:#3a6ea5}\
main p{text-align:justify}img{max-width:100%}\n";

const LOGO: &str = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 64 64\" width=\"64\" height=\"64\">\
<rect width=\"64\" height=\"64\" rx=\"12\" fill=\"#3a6ea5\"/><path d=\"M12 20 L22 44 L32 26 L42 44 L52 20\" \
fill=\"none\" stroke=\"#fff\" stroke-width=\"5\" stroke-linejoin=\"round\" stroke-linecap=\"round\"/></svg>\n";

/// A 256×160 gradient as a PNG: an already-compressed type the accelerator must
/// leave alone.
fn photo_png() -> Vec<u8> {
    let (w, h) = (256u32, 160u32);
    let mut raw = Vec::with_capacity(((w * 3 + 1) * h) as usize);
    for y in 0..h {
        raw.push(0); // filter: none
        for x in 0..w {
            let noise = ((x * 7919 + y * 104729) % 23) as u8;
            raw.extend_from_slice(&[
                (x as u8).wrapping_add(noise),
                (y as u8).wrapping_mul(3),
                200u8.wrapping_sub(noise),
            ]);
        }
    }
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB
    png_chunk(&mut png, b"IHDR", &ihdr);
    png_chunk(
        &mut png,
        b"IDAT",
        &codec::compress(wirefold_http::ContentCoding::Deflate, 9, &raw),
    );
    png_chunk(&mut png, b"IEND", &[]);
    png
}

fn png_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// CRC-32 (IEEE), bitwise: a few kilobytes once at start-up.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(super::crc32(b"123456789"), 0xCBF4_3926);
    }
}
