//! What the soak origin serves: a fixed list of resources, each with its caching
//! fields and how often it changes, and the instance names (`soak.R.V`) that tie a
//! response to the one body it may carry.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The shape of a resource's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Html,
    Script,
    Css,
    Json,
    /// Bytes that do not compress (an image, a blob): identity on every path.
    Binary,
}

/// One URL of the origin.
#[derive(Clone, Copy, Debug)]
pub struct Resource {
    /// Path and query, as requested.
    pub target: &'static str,
    pub content_type: &'static str,
    pub kind: Kind,
    /// Approximate body size in bytes (versions differ by a few lines).
    pub size: usize,
    pub cache_control: &'static str,
    /// A new version every this many milliseconds; `None`: never changes.
    pub period_ms: Option<u64>,
    /// The origin answers in gzip when asked (the proxy decodes it before storing).
    pub origin_gzip: bool,
}

const fn resource(
    target: &'static str,
    kind: Kind,
    size: usize,
    cache_control: &'static str,
    period_ms: Option<u64>,
) -> Resource {
    let content_type = match kind {
        Kind::Html => "text/html; charset=utf-8",
        Kind::Script => "application/javascript",
        Kind::Css => "text/css",
        Kind::Json => "application/json",
        Kind::Binary => "image/png",
    };
    Resource {
        target,
        content_type,
        kind,
        size,
        cache_control,
        period_ms,
        origin_gzip: false,
    }
}

const fn gzipped(r: Resource) -> Resource {
    Resource {
        origin_gzip: true,
        ..r
    }
}

/// Every resource, indexed by its position (the `R` of `soak.R.V`). The mix covers
/// what the pipeline treats differently: revalidated pages (`no-cache`: 304s upstream,
/// RFC 3229 deltas, derived dictionaries), pages and scripts a browser keeps
/// (`max-age`: `Use-As-Dictionary`, dcb/dcz), a query cluster (dictionaries across
/// URLs), immutable assets the origin sends gzip-coded, uncacheable and private
/// answers (never a base), incompressible bytes (ranges), a body below the
/// compression threshold.
pub const CATALOGUE: &[Resource] = &[
    resource("/news/0.html", Kind::Html, 12_000, "no-cache", Some(2_000)),
    resource("/news/1.html", Kind::Html, 40_000, "no-cache", Some(2_500)),
    resource("/news/2.html", Kind::Html, 90_000, "no-cache", Some(3_000)),
    resource("/news/3.html", Kind::Html, 160_000, "no-cache", Some(4_000)),
    resource(
        "/guide/0.html",
        Kind::Html,
        20_000,
        "max-age=3",
        Some(5_000),
    ),
    resource(
        "/guide/1.html",
        Kind::Html,
        60_000,
        "max-age=3",
        Some(6_000),
    ),
    resource(
        "/guide/2.html",
        Kind::Html,
        120_000,
        "max-age=3",
        Some(7_000),
    ),
    resource(
        "/js/app0.js",
        Kind::Script,
        30_000,
        "max-age=2",
        Some(4_000),
    ),
    resource(
        "/js/app1.js",
        Kind::Script,
        80_000,
        "max-age=2",
        Some(5_000),
    ),
    gzipped(resource(
        "/lib/vendor0.js",
        Kind::Script,
        100_000,
        "public, max-age=3600",
        None,
    )),
    gzipped(resource(
        "/lib/vendor1.js",
        Kind::Script,
        250_000,
        "public, max-age=3600",
        None,
    )),
    gzipped(resource(
        "/css/site0.css",
        Kind::Css,
        8_000,
        "public, max-age=3600",
        None,
    )),
    gzipped(resource(
        "/css/site1.css",
        Kind::Css,
        30_000,
        "public, max-age=3600",
        None,
    )),
    resource(
        "/api/feed0.json",
        Kind::Json,
        3_000,
        "no-store",
        Some(1_000),
    ),
    resource(
        "/api/feed1.json",
        Kind::Json,
        15_000,
        "no-store",
        Some(1_000),
    ),
    resource(
        "/account/profile.json",
        Kind::Json,
        5_000,
        "private, no-cache",
        Some(3_000),
    ),
    resource(
        "/api/prices.json",
        Kind::Json,
        20_000,
        "max-age=1, stale-while-revalidate=5",
        Some(1_500),
    ),
    resource(
        "/search?q=alpha",
        Kind::Json,
        10_000,
        "max-age=5",
        Some(6_000),
    ),
    resource(
        "/search?q=beta",
        Kind::Json,
        10_000,
        "max-age=5",
        Some(6_000),
    ),
    resource(
        "/search?q=gamma",
        Kind::Json,
        10_000,
        "max-age=5",
        Some(6_000),
    ),
    resource(
        "/img/photo0.png",
        Kind::Binary,
        64_000,
        "public, max-age=60",
        None,
    ),
    resource(
        "/img/photo1.png",
        Kind::Binary,
        300_000,
        "public, max-age=60",
        None,
    ),
    resource(
        "/blob/data.bin",
        Kind::Binary,
        100_000,
        "no-cache",
        Some(10_000),
    ),
    resource("/tiny.html", Kind::Html, 600, "no-cache", Some(2_000)),
    gzipped(resource(
        "/gz/page.html",
        Kind::Html,
        50_000,
        "no-cache",
        Some(3_000),
    )),
];

/// The resource at `target` (path and query).
pub fn lookup(target: &str) -> Option<(u16, &'static Resource)> {
    CATALOGUE
        .iter()
        .enumerate()
        .find(|(_, r)| r.target == target)
        .map(|(i, r)| (i as u16, r))
}

/// The resource numbered `index`.
pub fn get(index: u16) -> Option<&'static Resource> {
    CATALOGUE.get(index as usize)
}

impl Resource {
    /// The version served at `now`: wall-clock time over the period, offset per
    /// resource so that resources do not all change at once.
    pub fn version_at(&self, index: u16, now: SystemTime) -> u64 {
        let Some(period) = self.period_ms else {
            return 0;
        };
        let ms = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_millis() as u64;
        (ms + u64::from(index) * 337) / period
    }

    /// The request path without the query (what `Use-As-Dictionary` patterns match).
    pub fn path(&self) -> &'static str {
        self.target.split('?').next().unwrap_or(self.target)
    }
}

/// One instance: a resource at a version. Its body is [`crate::truth::body`]`(id)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceId {
    pub resource: u16,
    pub version: u64,
}

impl InstanceId {
    /// The origin's entity tag text (between the quotes).
    pub fn opaque(self) -> String {
        format!("soak.{}.{}", self.resource, self.version)
    }

    /// The instance an entity tag names, whatever wirefold appended to it: the
    /// origin's tag is `"soak.R.V"` (`"soak.R.V-gzip"` for its gzip representation),
    /// and a coding wirefold applied becomes `W/"soak.R.V-br"`.
    pub fn from_etag(value: &str) -> Option<InstanceId> {
        let value = value.trim();
        let value = value.strip_prefix("W/").unwrap_or(value);
        let opaque = value.strip_prefix('"')?.strip_suffix('"')?;
        let stem = opaque.split('-').next()?;
        let mut parts = stem.strip_prefix("soak.")?.split('.');
        let resource = parts.next()?.parse().ok()?;
        let version = parts.next()?.parse().ok()?;
        if parts.next().is_some() || get(resource).is_none() {
            return None;
        }
        Some(InstanceId { resource, version })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_tags_name_their_instance_through_wirefolds_suffixes() {
        let id = InstanceId {
            resource: 3,
            version: 17,
        };
        for tag in [
            "\"soak.3.17\"",
            "W/\"soak.3.17\"",
            "W/\"soak.3.17-br\"",
            "W/\"soak.3.17-gzip-zstd\"",
        ] {
            assert_eq!(InstanceId::from_etag(tag), Some(id), "{tag}");
        }
        for junk in [
            "soak.3.17",
            "\"soak.3\"",
            "\"soak.3.17.1\"",
            "\"other.3.17\"",
            "\"soak.999.1\"",
            "W/\"soak.x.1\"",
        ] {
            assert_eq!(InstanceId::from_etag(junk), None, "{junk}");
        }
        assert_eq!(
            InstanceId::from_etag(&format!("\"{}\"", id.opaque())),
            Some(id)
        );
    }

    #[test]
    fn targets_are_unique_and_found() {
        for (i, r) in CATALOGUE.iter().enumerate() {
            assert_eq!(lookup(r.target).map(|(j, _)| j as usize), Some(i));
        }
    }

    #[test]
    fn versions_advance_with_time_and_fixed_resources_stay() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let (i, news) = lookup("/news/0.html").unwrap();
        let later = t0 + Duration::from_millis(news.period_ms.unwrap());
        assert_eq!(news.version_at(i, later), news.version_at(i, t0) + 1);
        let (j, css) = lookup("/css/site0.css").unwrap();
        assert_eq!(css.version_at(j, later), 0);
    }
}
