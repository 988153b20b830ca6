//! RFC 9111 rules for a *shared* cache: may a response be stored, how long is
//! it fresh, and may a stored response answer a request as is.
//!
//! The proxy persists [`Freshness`] next to each stored response (via
//! [`Freshness::to_parts`]) and asks [`reuse`] on every hit, so freshness is
//! computed once, when the response arrives, from the clocks of that moment.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{
    HeaderMap, AGE, AUTHORIZATION, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE,
    DATE, EXPIRES, LAST_MODIFIED, SET_COOKIE,
};
use http::{HeaderValue, Method, StatusCode};

use crate::cache_control::CacheControl;
use crate::fields;
use crate::hop_by_hop::remove_hop_by_hop;
use crate::vary::Vary;

/// Heuristic freshness is capped at one day: a guess should not keep a
/// response fresh for long.
const MAX_HEURISTIC_LIFETIME: Duration = Duration::from_secs(24 * 60 * 60);

/// Why a response may not be stored; useful for logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotStorable {
    /// Only GET and HEAD responses are stored.
    Method,
    /// An interim (1xx) status, a 206 or 304 (wirefold stores only complete
    /// responses), or `must-understand` with a status wirefold does not know.
    Status,
    /// `no-store` in the request or the response.
    NoStore,
    /// `private`: meant for one user, and this cache is shared.
    Private,
    /// The request carried `Authorization` and the response did not opt in
    /// with `public`, `s-maxage` or `must-revalidate`.
    Authorization,
    /// wirefold's own rule (stricter than RFC 9111): a response that sets a
    /// cookie is personal and never shared.
    SetCookie,
    /// `Vary: *` can never match a later request, so storing it is waste.
    VaryAny,
    /// No explicit expiry, no `public`, and a status that is not
    /// heuristically cacheable.
    NoFreshnessInformation,
}

/// Whether a shared cache may store this response (RFC 9111 §3), plus
/// wirefold's rules: never store a response with `Set-Cookie` (RFC 9111
/// allows it; wirefold never shares one user's cookies), never store
/// `Vary: *`, and never store 206 partial content.
pub fn is_storable(method: &Method, req: &HeaderMap, status: StatusCode, resp: &HeaderMap) -> bool {
    check_storable(method, req, status, resp).is_ok()
}

/// [`is_storable`] with a reason, for logs and metrics.
///
/// # Errors
/// The first rule the exchange breaks, checked in the order of [`NotStorable`].
pub fn check_storable(
    method: &Method,
    req: &HeaderMap,
    status: StatusCode,
    resp: &HeaderMap,
) -> Result<(), NotStorable> {
    if method != Method::GET && method != Method::HEAD {
        return Err(NotStorable::Method);
    }
    let resp_cc = CacheControl::from_headers(resp);
    let understood = understands_status(status);
    if status.is_informational()
        || status == StatusCode::PARTIAL_CONTENT
        || status == StatusCode::NOT_MODIFIED
        || (resp_cc.must_understand && !understood)
    {
        return Err(NotStorable::Status);
    }
    // RFC 9111 §5.2.2.3: a cache that understands the status SHOULD ignore
    // the no-store that accompanies must-understand (as a fallback for caches
    // that do not).
    let response_no_store = resp_cc.no_store && !(resp_cc.must_understand && understood);
    if response_no_store || CacheControl::from_headers(req).no_store {
        return Err(NotStorable::NoStore);
    }
    if resp_cc.private {
        return Err(NotStorable::Private);
    }
    if req.contains_key(AUTHORIZATION)
        && !(resp_cc.public || resp_cc.s_maxage.is_some() || resp_cc.must_revalidate)
    {
        return Err(NotStorable::Authorization);
    }
    if resp.contains_key(SET_COOKIE) {
        return Err(NotStorable::SetCookie);
    }
    if Vary::from_headers(resp) == Vary::Any {
        return Err(NotStorable::VaryAny);
    }
    let explicit =
        resp_cc.s_maxage.is_some() || resp_cc.max_age.is_some() || resp.contains_key(EXPIRES);
    if !(explicit || resp_cc.public || is_heuristically_cacheable(status)) {
        return Err(NotStorable::NoFreshnessInformation);
    }
    Ok(())
}

/// Statuses that may be cached without explicit freshness (RFC 9110 §15.1).
pub fn is_heuristically_cacheable(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// Statuses whose caching requirements wirefold implements, for
/// `must-understand`: the heuristically cacheable ones except 206.
fn understands_status(status: StatusCode) -> bool {
    is_heuristically_cacheable(status) && status != StatusCode::PARTIAL_CONTENT
}

/// How long a stored response stays fresh and how old it was on arrival
/// (RFC 9111 §4.2). Everything needed later is captured here, so the stored
/// headers need not be re-parsed on each hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Freshness {
    response_time: SystemTime,
    corrected_initial_age: Duration,
    lifetime: Duration,
}

impl Freshness {
    /// Computes freshness for a response received at `response_time` to a
    /// request sent at `request_time`.
    ///
    /// Lifetime: `s-maxage`, else `max-age`, else `Expires − Date` (an invalid
    /// or repeated `Expires` means already expired), else — for heuristically
    /// cacheable or `public` responses — 10 % of `Date − Last-Modified`
    /// capped at one day, else zero. A missing or invalid `Date` is taken as
    /// `response_time` (RFC 9110 §6.6.1).
    ///
    /// Initial age (RFC 9111 §4.2.3): the larger of `response_time − Date`
    /// and `Age + (response_time − request_time)`.
    pub fn new(
        status: StatusCode,
        resp: &HeaderMap,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Self {
        let date = fields::http_date(resp, &DATE).unwrap_or(response_time);
        let lifetime = freshness_lifetime(status, resp, date);

        let apparent_age = response_time.duration_since(date).unwrap_or_default();
        let response_delay = response_time
            .duration_since(request_time)
            .unwrap_or_default();
        let age_value = Duration::from_secs(age_header(resp));
        let corrected_initial_age = apparent_age.max(age_value.saturating_add(response_delay));

        Freshness {
            response_time,
            corrected_initial_age,
            lifetime,
        }
    }

    /// Updates `stored` with the header fields of a `304 Not Modified` (see
    /// [`update_headers_from_304`]) and recomputes freshness from the merged
    /// headers and the times of the revalidation exchange.
    pub fn updated_from_304(
        stored_status: StatusCode,
        stored: &mut HeaderMap,
        not_modified: &HeaderMap,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Self {
        update_headers_from_304(stored, not_modified, response_time);
        Freshness::new(stored_status, stored, request_time, response_time)
    }

    /// Rebuilds a `Freshness` persisted with [`Freshness::to_parts`]. Any
    /// input is accepted: an unrepresentable time becomes the epoch, which
    /// only makes the response look older.
    pub fn from_parts(
        response_time_unix_secs: u64,
        corrected_initial_age_secs: u64,
        lifetime_secs: u64,
    ) -> Self {
        Freshness {
            response_time: UNIX_EPOCH
                .checked_add(Duration::from_secs(response_time_unix_secs))
                .unwrap_or(UNIX_EPOCH),
            corrected_initial_age: Duration::from_secs(corrected_initial_age_secs),
            lifetime: Duration::from_secs(lifetime_secs),
        }
    }

    /// `(response_time as Unix seconds, corrected initial age secs, lifetime
    /// secs)`, whole seconds, for persistence.
    pub fn to_parts(&self) -> (u64, u64, u64) {
        (
            fields::unix_seconds(self.response_time),
            self.corrected_initial_age.as_secs(),
            self.lifetime.as_secs(),
        )
    }

    /// The freshness lifetime.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// The age at `now`: initial age plus time spent in this cache. Send it
    /// as the `Age` header when serving from cache.
    pub fn current_age(&self, now: SystemTime) -> Duration {
        let resident_time = now.duration_since(self.response_time).unwrap_or_default();
        self.corrected_initial_age.saturating_add(resident_time)
    }

    /// Whether the response is still fresh at `now`.
    pub fn is_fresh(&self, now: SystemTime) -> bool {
        self.lifetime > self.current_age(now)
    }

    /// How long the response has been stale at `now` (zero while fresh).
    pub fn staleness(&self, now: SystemTime) -> Duration {
        self.current_age(now).saturating_sub(self.lifetime)
    }
}

fn freshness_lifetime(status: StatusCode, resp: &HeaderMap, date: SystemTime) -> Duration {
    let cc = CacheControl::from_headers(resp);
    if let Some(seconds) = cc.s_maxage.or(cc.max_age) {
        return Duration::from_secs(seconds);
    }
    if resp.contains_key(EXPIRES) {
        return fields::http_date(resp, &EXPIRES)
            .and_then(|expires| expires.duration_since(date).ok())
            .unwrap_or_default();
    }
    if !(is_heuristically_cacheable(status) || cc.public) {
        return Duration::ZERO;
    }
    fields::http_date(resp, &LAST_MODIFIED)
        .and_then(|modified| date.duration_since(modified).ok())
        .map_or(Duration::ZERO, |unchanged_for| {
            (unchanged_for / 10).min(MAX_HEURISTIC_LIFETIME)
        })
}

/// The `Age` header as delta-seconds; invalid values count as 0, several
/// lines use the first (RFC 9111 §4.2.1).
fn age_header(resp: &HeaderMap) -> u64 {
    resp.get(AGE)
        .and_then(|age| age.to_str().ok())
        .and_then(|age| fields::parse_delta_seconds(age.trim()))
        .unwrap_or(0)
}

/// Merges the header fields of a `304 Not Modified` into the stored
/// response's headers (RFC 9111 §3.2, §4.3.4): each field the 304 carries
/// replaces the stored one, except
/// - hop-by-hop fields, which are never stored;
/// - `Content-Length`, `Content-Encoding`, `Content-Range` and `Content-Type`,
///   which describe the stored body as wirefold processed it (it keeps bodies
///   decoded) and must stay consistent with it;
/// - `Set-Cookie`, which belongs to the one client that triggered the
///   revalidation and must not become part of the shared response.
///
/// The stored `Age` is dropped (it described the old exchange), and a 304
/// without `Date` gets `Date: response_time` so age is measured from now.
pub fn update_headers_from_304(
    stored: &mut HeaderMap,
    not_modified: &HeaderMap,
    response_time: SystemTime,
) {
    let mut update = not_modified.clone();
    remove_hop_by_hop(&mut update);
    for kept_from_stored in [
        CONTENT_LENGTH,
        CONTENT_ENCODING,
        CONTENT_RANGE,
        CONTENT_TYPE,
        SET_COOKIE,
    ] {
        update.remove(kept_from_stored);
    }
    stored.remove(AGE);
    if !update.contains_key(DATE) {
        match fields::format_http_date(response_time).and_then(|d| HeaderValue::from_str(&d).ok()) {
            Some(date) => {
                stored.insert(DATE, date);
            }
            None => {
                stored.remove(DATE);
            }
        }
    }
    for name in update.keys() {
        stored.remove(name);
    }
    for (name, value) in &update {
        stored.append(name, value.clone());
    }
}

/// What a cache may do with a stored response for a given request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reuse {
    /// Serve the stored response as is: it is fresh enough for the request,
    /// or stale within what the client accepts with `max-stale`.
    Fresh,
    /// Serve it (it is stale, within `stale-while-revalidate`) and revalidate
    /// in the background (RFC 5861 §3).
    StaleWhileRevalidate,
    /// Revalidate with the origin before using it.
    MustRevalidate,
}

/// Decides whether a stored response may answer a request (RFC 9111 §4,
/// RFC 5861 §3), in this order:
/// 1. request or response `no-cache` → revalidate;
/// 2. request `max-age` exceeded → revalidate;
/// 3. fresh, with at least the request's `min-fresh` left → serve;
/// 4. fresh but short of `min-fresh`, or stale while the response forbids
///    serving stale (`must-revalidate`, `proxy-revalidate`, `s-maxage`) →
///    revalidate;
/// 5. stale within `stale-while-revalidate` → serve and revalidate;
/// 6. stale within the request's `max-stale` → serve;
/// 7. otherwise revalidate.
pub fn reuse(
    fresh: &Freshness,
    resp_cc: &CacheControl,
    req_cc: &CacheControl,
    now: SystemTime,
) -> Reuse {
    if req_cc.no_cache || resp_cc.no_cache {
        return Reuse::MustRevalidate;
    }
    let age = fresh.current_age(now);
    if req_cc
        .max_age
        .is_some_and(|max_age| age > Duration::from_secs(max_age))
    {
        return Reuse::MustRevalidate;
    }
    if fresh.is_fresh(now) {
        let remaining = fresh.lifetime.saturating_sub(age);
        let min_fresh = Duration::from_secs(req_cc.min_fresh.unwrap_or(0));
        return if remaining >= min_fresh {
            Reuse::Fresh
        } else {
            Reuse::MustRevalidate
        };
    }
    if forbids_stale(resp_cc) {
        return Reuse::MustRevalidate;
    }
    let staleness = fresh.staleness(now);
    if resp_cc
        .stale_while_revalidate
        .is_some_and(|window| staleness <= Duration::from_secs(window))
    {
        return Reuse::StaleWhileRevalidate;
    }
    match req_cc.max_stale {
        Some(None) => Reuse::Fresh,
        Some(Some(limit)) if staleness <= Duration::from_secs(limit) => Reuse::Fresh,
        _ => Reuse::MustRevalidate,
    }
}

/// Whether a stored response may be served because the origin failed (5xx
/// or unreachable), per `stale-if-error` (RFC 5861 §4). The request's
/// `stale-if-error` takes precedence over the response's. Never allowed when
/// the response forbids stale use (RFC 9111 §4.2.4).
pub fn may_serve_stale_on_error(
    fresh: &Freshness,
    resp_cc: &CacheControl,
    req_cc: &CacheControl,
    now: SystemTime,
) -> bool {
    if resp_cc.no_cache || forbids_stale(resp_cc) {
        return false;
    }
    req_cc
        .stale_if_error
        .or(resp_cc.stale_if_error)
        .is_some_and(|window| fresh.staleness(now) <= Duration::from_secs(window))
}

/// `must-revalidate`, `proxy-revalidate` and, for a shared cache, `s-maxage`
/// (RFC 9111 §5.2.2.10) all forbid serving the response stale.
fn forbids_stale(resp_cc: &CacheControl) -> bool {
    resp_cc.must_revalidate || resp_cc.proxy_revalidate || resp_cc.s_maxage.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{HeaderName, CACHE_CONTROL, ETAG, VARY};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn http_date_at(secs: u64) -> String {
        fields::format_http_date(at(secs)).unwrap()
    }

    /// A base time with a round, recognizable HTTP date.
    const T0: u64 = 1_700_000_000;

    fn storable(
        status: u16,
        req: &[(&str, &str)],
        resp: &[(&str, &str)],
    ) -> Result<(), NotStorable> {
        check_storable(
            &Method::GET,
            &headers(req),
            StatusCode::from_u16(status).unwrap(),
            &headers(resp),
        )
    }

    #[test]
    fn storable_basics() {
        assert_eq!(storable(200, &[], &[]), Ok(()));
        assert_eq!(
            storable(200, &[], &[("cache-control", "max-age=60")]),
            Ok(())
        );
        assert!(is_storable(
            &Method::HEAD,
            &HeaderMap::new(),
            StatusCode::OK,
            &HeaderMap::new()
        ));
        assert!(!is_storable(
            &Method::POST,
            &HeaderMap::new(),
            StatusCode::OK,
            &headers(&[("cache-control", "max-age=60")])
        ));
    }

    #[test]
    fn storable_statuses() {
        assert_eq!(
            storable(302, &[], &[]),
            Err(NotStorable::NoFreshnessInformation)
        );
        assert_eq!(
            storable(302, &[], &[("cache-control", "max-age=5")]),
            Ok(())
        );
        assert_eq!(storable(302, &[], &[("expires", "0")]), Ok(()));
        assert_eq!(storable(500, &[], &[("cache-control", "public")]), Ok(()));
        assert_eq!(storable(404, &[], &[]), Ok(()));
        assert_eq!(
            storable(206, &[], &[("cache-control", "max-age=5")]),
            Err(NotStorable::Status)
        );
        assert_eq!(storable(304, &[], &[]), Err(NotStorable::Status));
        assert_eq!(storable(103, &[], &[]), Err(NotStorable::Status));
    }

    #[test]
    fn storable_directives() {
        assert_eq!(
            storable(200, &[], &[("cache-control", "no-store, max-age=5")]),
            Err(NotStorable::NoStore)
        );
        assert_eq!(
            storable(200, &[("cache-control", "no-store")], &[]),
            Err(NotStorable::NoStore)
        );
        assert_eq!(
            storable(200, &[], &[("cache-control", "private, max-age=5")]),
            Err(NotStorable::Private)
        );
        assert_eq!(
            storable(200, &[], &[("cache-control", "private=\"x\"")]),
            Err(NotStorable::Private)
        );
        assert_eq!(storable(200, &[], &[("cache-control", "no-cache")]), Ok(()));
        assert_eq!(
            storable(200, &[], &[("vary", "accept, *")]),
            Err(NotStorable::VaryAny)
        );
    }

    #[test]
    fn must_understand_overrides_no_store_only_for_known_statuses() {
        let cc = [("cache-control", "must-understand, no-store, max-age=60")];
        assert_eq!(storable(200, &[], &cc), Ok(()));
        assert_eq!(storable(302, &[], &cc), Err(NotStorable::Status));
        assert_eq!(
            storable(
                299,
                &[],
                &[("cache-control", "must-understand, max-age=60")]
            ),
            Err(NotStorable::Status)
        );
    }

    #[test]
    fn authorization_needs_an_explicit_opt_in() {
        let auth = [("authorization", "Bearer x")];
        assert_eq!(
            storable(200, &auth, &[("cache-control", "max-age=60")]),
            Err(NotStorable::Authorization)
        );
        for opt_in in ["public", "s-maxage=5", "must-revalidate"] {
            assert_eq!(
                storable(200, &auth, &[("cache-control", opt_in)]),
                Ok(()),
                "{opt_in}"
            );
        }
    }

    #[test]
    fn set_cookie_is_never_shared() {
        let resp = [
            ("cache-control", "public, max-age=60"),
            ("set-cookie", "id=1"),
        ];
        assert_eq!(storable(200, &[], &resp), Err(NotStorable::SetCookie));
    }

    #[test]
    fn lifetime_precedence() {
        let date = http_date_at(T0);
        let expires = http_date_at(T0 + 500);
        let modified = http_date_at(T0 - 10_000);
        let mut resp = vec![
            ("date", date.as_str()),
            ("expires", expires.as_str()),
            ("last-modified", modified.as_str()),
            ("cache-control", "max-age=60, s-maxage=30"),
        ];
        let lifetime = |resp: &[(&str, &str)]| {
            Freshness::new(StatusCode::OK, &headers(resp), at(T0), at(T0))
                .lifetime()
                .as_secs()
        };
        assert_eq!(lifetime(&resp), 30);
        resp[3].1 = "max-age=60";
        assert_eq!(lifetime(&resp), 60);
        resp.pop();
        assert_eq!(lifetime(&resp), 500);
        resp.remove(1);
        assert_eq!(lifetime(&resp), 1_000, "10% of Date - Last-Modified");
    }

    #[test]
    fn heuristic_is_capped_and_limited_to_cacheable_statuses() {
        let date = http_date_at(T0);
        let modified = http_date_at(T0 - 100 * 86_400);
        let resp = headers(&[("date", &date), ("last-modified", &modified)]);
        assert_eq!(
            Freshness::new(StatusCode::OK, &resp, at(T0), at(T0)).lifetime(),
            MAX_HEURISTIC_LIFETIME
        );
        assert_eq!(
            Freshness::new(StatusCode::FOUND, &resp, at(T0), at(T0)).lifetime(),
            Duration::ZERO
        );
        let future = http_date_at(T0 + 100);
        let resp = headers(&[("date", &date), ("last-modified", &future)]);
        assert_eq!(
            Freshness::new(StatusCode::OK, &resp, at(T0), at(T0)).lifetime(),
            Duration::ZERO
        );
    }

    #[test]
    fn invalid_or_past_expires_means_stale() {
        let date = http_date_at(T0);
        let modified = http_date_at(T0 - 100_000);
        for expires in ["0", "-1", "yesterday", &http_date_at(T0 - 5)] {
            let resp = headers(&[
                ("date", &date),
                ("expires", expires),
                ("last-modified", &modified),
            ]);
            let fresh = Freshness::new(StatusCode::OK, &resp, at(T0), at(T0));
            assert_eq!(fresh.lifetime(), Duration::ZERO, "{expires}");
            assert!(!fresh.is_fresh(at(T0)));
        }
        let resp = headers(&[
            ("date", &date),
            ("expires", &http_date_at(T0 + 5)),
            ("expires", &http_date_at(T0 + 50)),
        ]);
        assert_eq!(
            Freshness::new(StatusCode::OK, &resp, at(T0), at(T0)).lifetime(),
            Duration::ZERO
        );
    }

    #[test]
    fn corrected_initial_age() {
        // Date 10 s before arrival, Age 3, request took 2 s: apparent age 10 wins.
        let resp = headers(&[
            ("date", &http_date_at(T0 - 10)),
            ("age", "3"),
            ("cache-control", "max-age=60"),
        ]);
        let fresh = Freshness::new(StatusCode::OK, &resp, at(T0 - 2), at(T0));
        assert_eq!(fresh.current_age(at(T0)).as_secs(), 10);
        assert_eq!(fresh.current_age(at(T0 + 5)).as_secs(), 15);
        // Age 30 plus a 2 s delay beats the apparent age.
        let resp = headers(&[
            ("date", &http_date_at(T0 - 10)),
            ("age", "30"),
            ("cache-control", "max-age=60"),
        ]);
        let fresh = Freshness::new(StatusCode::OK, &resp, at(T0 - 2), at(T0));
        assert_eq!(fresh.current_age(at(T0)).as_secs(), 32);
        assert!(fresh.is_fresh(at(T0 + 27)));
        assert!(!fresh.is_fresh(at(T0 + 28)));
        assert_eq!(fresh.staleness(at(T0 + 30)).as_secs(), 2);
    }

    #[test]
    fn hostile_age_date_and_clocks() {
        let resp = headers(&[
            ("age", "99999999999999999999999"),
            ("date", "garbage"),
            ("cache-control", "max-age=99999999999999999999"),
        ]);
        let fresh = Freshness::new(StatusCode::OK, &resp, at(T0 + 100), at(T0));
        assert_eq!(
            fresh.current_age(at(T0)).as_secs(),
            fields::MAX_DELTA_SECONDS
        );
        assert_eq!(
            fresh.current_age(UNIX_EPOCH).as_secs(),
            fields::MAX_DELTA_SECONDS
        );
        let _ = fresh.current_age(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::MAX / 4));
        let mut resp = headers(&[("age", "-5")]);
        resp.append(AGE, HeaderValue::from_bytes(b"\xff").unwrap());
        resp.append(DATE, HeaderValue::from_bytes(b"\xff\xfe").unwrap());
        let fresh = Freshness::new(StatusCode::OK, &resp, at(T0), at(T0));
        assert_eq!(fresh.current_age(at(T0)), Duration::ZERO);
    }

    #[test]
    fn parts_round_trip_and_tolerate_garbage() {
        let resp = headers(&[
            ("date", &http_date_at(T0 - 4)),
            ("cache-control", "max-age=60"),
        ]);
        let fresh = Freshness::new(StatusCode::OK, &resp, at(T0), at(T0));
        assert_eq!(fresh.to_parts(), (T0, 4, 60));
        assert_eq!(Freshness::from_parts(T0, 4, 60), fresh);
        let odd = Freshness::from_parts(u64::MAX, u64::MAX, u64::MAX);
        assert!(odd.current_age(at(T0)) >= Duration::from_secs(u64::MAX));
        let _ = odd.is_fresh(at(T0));
        let _ = odd.staleness(at(T0));
    }

    #[test]
    fn update_from_304_refreshes_headers_and_freshness() {
        let mut stored = headers(&[
            ("date", &http_date_at(T0 - 1000)),
            ("age", "500"),
            ("cache-control", "max-age=60"),
            ("etag", "\"v1\""),
            ("content-length", "1234"),
            ("content-encoding", "gzip"),
            ("x-kept", "yes"),
        ]);
        let not_modified = headers(&[
            ("cache-control", "max-age=600"),
            ("etag", "\"v1\""),
            ("content-length", "0"),
            ("content-encoding", "br"),
            ("set-cookie", "a=b"),
            ("connection", "x-hop"),
            ("x-hop", "1"),
        ]);
        let fresh = Freshness::updated_from_304(
            StatusCode::OK,
            &mut stored,
            &not_modified,
            at(T0 - 1),
            at(T0),
        );
        assert_eq!(fresh.lifetime().as_secs(), 600);
        assert_eq!(
            fresh.current_age(at(T0)).as_secs(),
            1,
            "old Age and Date are gone"
        );
        assert_eq!(stored[CACHE_CONTROL], "max-age=600");
        assert_eq!(stored.get_all(ETAG).iter().count(), 1);
        assert_eq!(stored[CONTENT_LENGTH], "1234");
        assert_eq!(stored[CONTENT_ENCODING], "gzip");
        assert_eq!(stored["x-kept"], "yes");
        assert_eq!(stored[DATE], http_date_at(T0).as_str());
        for absent in [
            SET_COOKIE,
            AGE,
            http::header::CONNECTION,
            HeaderName::from_static("x-hop"),
        ] {
            assert!(!stored.contains_key(&absent), "{absent}");
        }
        assert!(!stored.contains_key(VARY));
    }

    fn cc(value: &str) -> CacheControl {
        CacheControl::parse(value)
    }

    /// A response stored at T0 with age 0 and a 100 s lifetime.
    fn hundred_seconds() -> Freshness {
        Freshness::from_parts(T0, 0, 100)
    }

    #[test]
    fn reuse_fresh_and_stale() {
        let f = hundred_seconds();
        assert_eq!(reuse(&f, &cc(""), &cc(""), at(T0 + 99)), Reuse::Fresh);
        assert_eq!(
            reuse(&f, &cc(""), &cc(""), at(T0 + 100)),
            Reuse::MustRevalidate
        );
    }

    #[test]
    fn reuse_request_directives() {
        let f = hundred_seconds();
        let now = at(T0 + 50);
        assert_eq!(
            reuse(&f, &cc(""), &cc("no-cache"), now),
            Reuse::MustRevalidate
        );
        assert_eq!(
            reuse(&f, &cc(""), &cc("max-age=0"), now),
            Reuse::MustRevalidate
        );
        assert_eq!(reuse(&f, &cc(""), &cc("max-age=50"), now), Reuse::Fresh);
        assert_eq!(reuse(&f, &cc(""), &cc("min-fresh=50"), now), Reuse::Fresh);
        assert_eq!(
            reuse(&f, &cc(""), &cc("min-fresh=51"), now),
            Reuse::MustRevalidate
        );
        let stale = at(T0 + 130);
        assert_eq!(reuse(&f, &cc(""), &cc("max-stale"), stale), Reuse::Fresh);
        assert_eq!(reuse(&f, &cc(""), &cc("max-stale=30"), stale), Reuse::Fresh);
        assert_eq!(
            reuse(&f, &cc(""), &cc("max-stale=29"), stale),
            Reuse::MustRevalidate
        );
    }

    #[test]
    fn reuse_response_directives() {
        let f = hundred_seconds();
        assert_eq!(
            reuse(&f, &cc("no-cache"), &cc(""), at(T0)),
            Reuse::MustRevalidate
        );
        let stale = at(T0 + 110);
        assert_eq!(
            reuse(&f, &cc("stale-while-revalidate=10"), &cc(""), stale),
            Reuse::StaleWhileRevalidate
        );
        assert_eq!(
            reuse(&f, &cc("stale-while-revalidate=9"), &cc(""), stale),
            Reuse::MustRevalidate
        );
        for forbidding in ["must-revalidate", "proxy-revalidate", "s-maxage=100"] {
            let resp = cc(&format!("{forbidding}, stale-while-revalidate=60"));
            assert_eq!(
                reuse(&f, &resp, &cc("max-stale"), stale),
                Reuse::MustRevalidate,
                "{forbidding}"
            );
            assert_eq!(
                reuse(&f, &resp, &cc(""), at(T0 + 10)),
                Reuse::Fresh,
                "{forbidding}"
            );
        }
    }

    #[test]
    fn stale_if_error() {
        let f = hundred_seconds();
        let stale = at(T0 + 160);
        assert!(may_serve_stale_on_error(
            &f,
            &cc("stale-if-error=60"),
            &cc(""),
            stale
        ));
        assert!(!may_serve_stale_on_error(
            &f,
            &cc("stale-if-error=59"),
            &cc(""),
            stale
        ));
        assert!(may_serve_stale_on_error(
            &f,
            &cc(""),
            &cc("stale-if-error=60"),
            stale
        ));
        assert!(!may_serve_stale_on_error(
            &f,
            &cc("stale-if-error=600"),
            &cc("stale-if-error=0"),
            stale
        ));
        assert!(!may_serve_stale_on_error(&f, &cc(""), &cc(""), stale));
        for forbidding in [
            "must-revalidate",
            "proxy-revalidate",
            "s-maxage=100",
            "no-cache",
        ] {
            let resp = cc(&format!("{forbidding}, stale-if-error=600"));
            assert!(
                !may_serve_stale_on_error(&f, &resp, &cc(""), stale),
                "{forbidding}"
            );
        }
    }
}
