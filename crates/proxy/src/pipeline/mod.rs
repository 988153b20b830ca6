//! The request pipeline, one module per stage:
//!
//! ```text
//! classify ─► fetch ─► remember ─► adapt ─► hint ─► encode ─► respond
//! ```
//!
//! Each stage is a function of the values handed to it and of the services it names
//! in its signature, nothing else:
//!
//! | stage | runs | takes | may change | returns |
//! | --- | --- | --- | --- | --- |
//! | [`classify`] | first, on every request | the request head | nothing | a [`ClientProfile`](crate::model::ClientProfile), every field later stages use parsed once; or 400 |
//! | [`fetch`] | after classify | [`Fetcher`] (source, cache, limits), an optional [`OriginObserver`](crate::model::OriginObserver) | the origin request it sends | the current [`Instance`](crate::model::Instance) and what to store; or a finished error response |
//! | [`remember`] | after fetch, before anything is sent | [`Cache`], [`DeltaEngine`] | the store | the instance, unchanged |
//! | [`adapt`] | on every instance | [`Variants`], `[fidelity]` | the instance's fidelity: a smaller variant, `Alternates`, `TCN`, `Vary`, `Accept-CH`; queues first-seen originals for variants | an instance |
//! | [`hint`] | on every instance | `[hints]`, the page's manifest ([`Manifests`]) | `Link: rel=preload` fields for the page's subresources | an instance |
//! | [`encode`] | on every instance | [`DerivedBodies`], [`DeltaEngine`] | the representation's coding, `Use-As-Dictionary` and dictionary links | a [`Representation`](encode::Representation) |
//! | [`respond`] | last | metrics | status (304, 206, 412, 416), validators, `Vary`, `Cache-Status` | the response, what it delivers for the request's record, and its body when whole |
//!
//! Stages share nothing but the [`RequestContext`] and the
//! values they hand on. The values are in [`crate::model`], a leaf every caller of a
//! stage may use; a server proxy's link exchange runs `fetch` and `remember` itself.
//! Every answer, error or not, completes the request's
//! [`RequestRecord`] as its body is sent. Before the
//! stages, a request exactly like one answered before may get that answer again
//! ([`prepared`]) while nothing it was made from has changed.

pub mod adapt;
pub mod classify;
pub mod encode;
pub mod fetch;
pub mod hint;
pub mod prepared;
pub mod remember;
pub mod respond;

use std::sync::Arc;
use std::time::Instant;

use http::{Method, Request, Response, StatusCode};
use http_body::Body as _;
use store::Store;

use crate::background::Background;
use crate::body::Body;
use crate::cache::Cache;
use crate::config::Config;
use crate::live::{LiveConfig, ReloadError, Reloaded};
use crate::manifests::Manifests;
use crate::metrics::Metrics;
use crate::model::{ConnInfo, LinkRead, RequestContext, Rests};
use crate::record::{Delivery, RequestRecord};
use crate::recorder::{OpenRecord, Records};
use crate::variants::{Variants, VARIANT_PREFIX};
use delta::derived::DerivedBodies;
use delta::DeltaEngine;
use fetch::{Fetcher, Source};
use prepared::{Kept, KeyRef, Made, Prepared};

/// The services the stages use, for the life of the server.
pub struct Pipeline {
    /// The configuration in force; a reload swaps it.
    live: Arc<LiveConfig>,
    pub fetcher: Arc<Fetcher>,
    pub cache: Arc<Cache>,
    pub deltas: Arc<DeltaEngine>,
    pub bodies: Arc<DerivedBodies>,
    pub metrics: Arc<Metrics>,
    /// Pages' manifests, for the hint stage and for 103 Early Hints.
    pub manifests: Arc<Manifests>,
    /// The `Link` values made from those manifests lately.
    preloads: hint::PreloadMemo,
    /// Adaptive fidelity's variants, network estimates and egress fraction.
    pub variants: Arc<Variants>,
    /// Where each request's record goes: the access log and the status page.
    pub records: Arc<Records>,
    /// Work that outlives a request (revalidations, encodings at the kept level),
    /// waited for at shutdown.
    pub background: Background,
    /// Answers sent again to the same request (`cache.prepared_bytes`); none without
    /// a store of this process's own.
    prepared: Option<Prepared>,
}

impl Pipeline {
    pub fn new(
        live: Arc<LiveConfig>,
        source: Source,
        store: Option<Store>,
        metrics: Arc<Metrics>,
        records: Arc<Records>,
    ) -> Pipeline {
        let background = Background::default();
        let cache = Arc::new(Cache::new(store.clone()));
        let bodies = Arc::new(DerivedBodies::new(
            store.clone(),
            metrics.derived_counters(),
            Arc::new(background.clone()),
        ));
        let manifests = Arc::new(Manifests::new(store.clone(), metrics.clone()));
        let variants = Arc::new(Variants::new(store.clone(), background.clone(), &metrics));
        let deltas = Arc::new(DeltaEngine::new(
            live.current().delta.clone(),
            store,
            bodies.clone(),
        ));
        let prepared = Prepared::new(live.current().cache.prepared_bytes, &cache, &background);
        let fetcher = Arc::new(Fetcher::new(
            live.clone(),
            source,
            cache.clone(),
            deltas.clone(),
            metrics.clone(),
            background.clone(),
        ));
        Pipeline {
            live,
            fetcher,
            cache,
            deltas,
            bodies,
            metrics,
            manifests,
            preloads: hint::PreloadMemo::default(),
            variants,
            records,
            background,
            prepared,
        }
    }

    /// The configuration in force now.
    pub fn config(&self) -> Arc<Config> {
        self.live.current()
    }

    /// Starts the tasks that live as long as the pipeline (the egress controller);
    /// needs a Tokio runtime.
    pub fn start_tasks(self: &Arc<Self>) {
        Variants::run_egress_controller(&self.variants, self.live.clone(), self.metrics.clone());
    }

    /// Reads the configuration again and puts it in force for what comes after
    /// (see [`crate::live`]); logs what changed, what needs a restart, or why nothing did.
    pub fn reload(&self) -> Result<Reloaded, ReloadError> {
        match self.live.reload() {
            Ok(reloaded) => {
                self.deltas.set_config(self.live.current().delta.clone());
                if let Some(prepared) = &self.prepared {
                    prepared.reloaded();
                }
                for key in &reloaded.needs_restart {
                    tracing::warn!(key = %key, "configuration reload: this key changed but needs a restart; the running value stays");
                }
                tracing::info!(applied = ?reloaded.applied, "configuration reloaded");
                self.metrics.config_reload("applied");
                Ok(reloaded)
            }
            Err(e) => {
                if let ReloadError::Invalid(problems) = &e {
                    for problem in problems {
                        tracing::error!(%problem, "configuration reload refused; the running configuration stays");
                    }
                } else {
                    tracing::error!(error = %e, "configuration reload refused");
                }
                self.metrics.config_reload("refused");
                Err(e)
            }
        }
    }

    /// The store, absent when caching is disabled.
    pub fn store(&self) -> Option<&Store> {
        self.cache.store.as_ref()
    }

    /// Answers one request. Never fails: every error becomes a response. The
    /// request's record is completed as the response's body is sent.
    pub async fn handle(self: &Arc<Self>, req: Request<Body>, conn: ConnInfo) -> Response<Body> {
        let started = Instant::now();
        let method = req.method().clone();
        let record = OpenRecord::new(
            RequestRecord::arriving(&req, conn),
            started,
            self.records.clone(),
        );
        let response = match &self.prepared {
            Some(prepared) => {
                self.prepared_or_made(prepared, req, conn, started, &record)
                    .await
            }
            None => {
                let link = LinkRead::default();
                self.run_stages(req, conn, started, &record, false, link)
                    .await
                    .0
            }
        };
        self.metrics
            .record_request(&method, response.status(), started.elapsed());
        record.watch(response)
    }

    /// The answer prepared for this very request, when one stands (see
    /// [`prepared`]); else the stages' answer, kept when it may be repeated.
    async fn prepared_or_made(
        self: &Arc<Self>,
        prepared: &Prepared,
        req: Request<Body>,
        conn: ConnInfo,
        started: Instant,
        record: &OpenRecord,
    ) -> Response<Body> {
        // A body, however framed (an HTTP/2 stream may carry one without a length),
        // goes to the stages with the request.
        let key = KeyRef::of(&req, conn.tls).filter(|_| req.body().is_end_stream());
        let link = LinkRead::default();
        let Some(key) = key else {
            return self
                .run_stages(req, conn, started, record, false, link)
                .await
                .0;
        };
        let path = req.uri().path();
        // The choice last: it reads the client's link, once per response, and the
        // stages read the same estimate when the answer does not stand.
        let still_holds = |rests: &Rests| {
            rests.expires.is_none_or(|expires| Instant::now() < expires)
                && rests
                    .file
                    .as_ref()
                    .is_none_or(|mark| self.fetcher.finds_unchanged(path, mark))
                && rests
                    .choice
                    .as_ref()
                    .is_none_or(|choice| choice.holds(&conn, &link))
        };
        if let Some(kept) = prepared.answer(&key, still_holds) {
            if !self.config().cache.prepared_verify {
                return self.send_again(&kept, record, req.into_parts().0.headers);
            }
            let (response, made) = self
                .run_stages(req, conn, started, record, true, link)
                .await;
            let difference = match &made {
                Some(made) => kept.difference(made),
                None => Some("the stages' answer is not one to keep".to_string()),
            };
            match difference {
                None => {
                    self.metrics.prepared.verified.inc();
                }
                Some(difference) => {
                    self.metrics.prepared.mismatch.inc();
                    tracing::warn!(%difference, "a prepared response differs from the stages' answer");
                }
            }
            return response;
        }
        let key = key.owned();
        let epoch = prepared.epoch();
        let (response, made) = self
            .run_stages(req, conn, started, record, true, link)
            .await;
        if let Some(made) = made {
            if prepared.keep(key, epoch, made) {
                self.metrics.prepared.kept.inc();
            }
        }
        response
    }

    /// Sends a kept answer again, and redoes what the stages' answer did besides:
    /// the request's record, the metrics, the page weights. The answer's fields go
    /// into the request's own map, which it no longer needs: over HTTP/1.1 hyper
    /// parsed the request into the previous response's map, so the memory cycles
    /// between requests and responses instead of each answer allocating a copy.
    fn send_again(
        &self,
        kept: &Kept,
        record: &OpenRecord,
        mut fields: http::HeaderMap,
    ) -> Response<Body> {
        record.update(|r| r.resource = Some(kept.made.resource.clone()));
        record.deliver(kept.delivery_now());
        if kept.is_cache_hit() {
            self.metrics.cache_hit.inc();
        }
        self.metrics.hinted_final(kept.made.links);
        kept.made.whole.count_again();
        if let Some((url, len, negotiable)) = &kept.made.rests.page_size {
            self.variants.pages.record(url, *len, *negotiable);
        }
        if let Some(choice) = &kept.made.rests.choice {
            choice.count_again();
        }
        self.metrics.prepared.sent.inc();
        let body = if kept.made.whole.body.is_empty() {
            crate::body::empty()
        } else {
            crate::body::full(kept.made.whole.body.clone())
        };
        let mut response = Response::new(body);
        *response.status_mut() = kept.made.status;
        kept.headers_now_into(&mut fields);
        *response.headers_mut() = fields;
        response
    }

    /// Runs the stages; with `keep`, also returns what a prepared response needs of
    /// the answer when the stages found it repeatable. `link` is the client's link
    /// as read for this response so far (by a prepared answer's check).
    async fn run_stages(
        self: &Arc<Self>,
        req: Request<Body>,
        conn: ConnInfo,
        started: Instant,
        record: &OpenRecord,
        keep: bool,
        link: LinkRead,
    ) -> (Response<Body>, Option<Made>) {
        let ctx = match self.context(&req, conn, started) {
            Ok(mut ctx) => {
                ctx.link = link;
                ctx
            }
            Err(message) => {
                record.deliver(Delivery::error(None));
                let refused = crate::body::error_response(StatusCode::BAD_REQUEST, &message);
                return (refused, None);
            }
        };
        record.update(|r| r.resource = Some(ctx.resource.clone()));
        let config = self.config();
        let instance = match ctx.profile.uri.path().strip_prefix(VARIANT_PREFIX) {
            // A variant's own URL: served from the store, never from the origin.
            Some(rest) => {
                let found = if ctx.profile.is_get_or_head() {
                    adapt::variant_at(&self.variants, rest).await
                } else {
                    None
                };
                let Some(instance) = found else {
                    record.deliver(Delivery::error(None));
                    let none =
                        crate::body::error_response(StatusCode::NOT_FOUND, "no such variant");
                    return (none, None);
                };
                instance
            }
            None => {
                let fetched = fetch::fetch(&self.fetcher, &ctx, req, None).await;
                record.update(|r| r.origin_wait = ctx.origin_wait.get());
                let fetched = match fetched {
                    Ok(fetched) => fetched,
                    Err(response) => {
                        record.deliver(Delivery::error(None));
                        return (response, None);
                    }
                };
                let instance =
                    remember::remember(&self.cache, &self.deltas, &self.metrics, fetched).await;
                adapt::adapt(
                    &self.variants,
                    &self.manifests,
                    &config.fidelity,
                    &config.compression,
                    &ctx,
                    instance,
                )
                .await
            }
        };
        let instance = self.scan_streamed_page(&config.hints, &ctx, instance);
        let manifest = match self.manifest_of(&config.hints, &ctx, &instance) {
            Some(ManifestBuild { shared, building }) => {
                let manifest = building.await;
                // A personalised page's manifest is its reader's alone: read into the
                // page's kept manifest, it would name that reader's resources in
                // other clients' 103s.
                if shared {
                    self.read_stylesheets(&config.hints, &ctx.url(), ctx.conn, &manifest);
                }
                Some(manifest)
            }
            None => None,
        };
        let hint::Hinted {
            instance,
            links,
            pushes,
        } = hint::hint(
            &config.hints,
            &self.preloads,
            &ctx,
            manifest.as_ref(),
            instance,
        );
        self.metrics.hinted_final(links);
        let representation =
            encode::encode(&config, &self.bodies, &self.deltas, &ctx, instance).await;
        let respond::Answer {
            mut response,
            delivery,
            whole,
        } = respond::respond(&self.metrics, &ctx, representation);
        let made = match (whole, ctx.repeat.rests()) {
            (Some(whole), Some(rests)) if keep && pushes.is_empty() => Some(Made {
                rests,
                status: response.status(),
                headers: response.headers().clone(),
                whole,
                delivery: delivery.clone(),
                resource: ctx.resource.clone(),
                links,
            }),
            _ => None,
        };
        record.deliver(delivery);
        if !pushes.is_empty() && response.status() == StatusCode::OK {
            response.extensions_mut().insert(hint::PushPromises(pushes));
        }
        (response, made)
    }

    /// The manifest of `instance` when it is a page and hints are on (see
    /// [`crate::manifests`]); kept for other clients only when the page is the same
    /// for everyone.
    fn manifest_of(
        &self,
        hints: &hint::HintConfig,
        ctx: &RequestContext,
        instance: &crate::model::Instance,
    ) -> Option<
        ManifestBuild<
            impl std::future::Future<Output = Arc<crate::manifests::PageManifest>> + Send,
        >,
    > {
        let crate::model::InstanceBody::Whole { bytes, hash } = &instance.body else {
            return None;
        };
        if !hints.enabled || !hint::is_page(instance) {
            return None;
        }
        let shared = self.shared_page(ctx, instance);
        let (manifests, url, rules) = (self.manifests.clone(), ctx.url(), hints.manifest_rules());
        let (bytes, hash) = (bytes.clone(), *hash);
        // Built here, awaited by the caller: no borrow of the instance (whose body
        // is not `Sync`) lives across the await.
        Some(ManifestBuild {
            shared,
            building: async move { manifests.of_page(&url, hash, &bytes, &rules, shared).await },
        })
    }

    /// For a page too large to buffer (a streamed `200` HTML body) the same for
    /// everyone, with hints on: taps its body so that its manifest is read as it
    /// passes to the client ([`crate::page_stream`], the first
    /// `hints.stream_scan_bytes`), then kept as a buffered page's is, and its
    /// stylesheets read. The client's bytes are not held back; this response gets no
    /// `Link` fields (they precede a body not yet read), later ones their 103s.
    /// Every other instance, and a body in a coding wirefold does not decode, is
    /// returned as it came.
    fn scan_streamed_page(
        self: &Arc<Self>,
        hints: &hint::HintConfig,
        ctx: &RequestContext,
        mut instance: crate::model::Instance,
    ) -> crate::model::Instance {
        use crate::model::{InstanceBody, StreamCoding};
        let streamed = matches!(
            instance.body,
            InstanceBody::Stream {
                coding: StreamCoding::Identity | StreamCoding::Known(_),
                ..
            }
        );
        let scanned = hints.enabled
            && hints.stream_scan_bytes > 0
            && streamed
            && ctx.profile.method == Method::GET
            && hint::is_html_200(&instance)
            && self.shared_page(ctx, &instance);
        if !scanned {
            return instance;
        }
        // The same version (by its validator) scanned before: its manifest stands.
        let page_url = ctx.url();
        let etag = instance
            .headers
            .get(http::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        if etag
            .as_deref()
            .is_some_and(|etag| self.manifests.streamed_is_known(&page_url, etag))
        {
            return instance;
        }
        self.metrics.streamed_page_scans.inc();
        let InstanceBody::Stream {
            body,
            coding,
            length,
        } = std::mem::replace(&mut instance.body, InstanceBody::Empty)
        else {
            unreachable!("matched as a stream above")
        };
        let decoded = match &coding {
            StreamCoding::Known(c) => Some(*c),
            _ => None,
        };
        let bound = crate::page_stream::ScanBound {
            bytes: hints.stream_scan_bytes,
            // Room to rank from: a manifest keeps the best of what is found.
            references: hints.max_manifest_entries.saturating_mul(16),
        };
        let (body, scanning) = crate::page_stream::scan(body, decoded, page_url.to_string(), bound);
        instance.body = InstanceBody::Stream {
            body,
            coding,
            length,
        };
        let (pipeline, conn) = (self.clone(), ctx.conn);
        self.background.spawn(async move {
            let Some(scanned) = scanning.await else {
                return;
            };
            let hints = pipeline.config().hints.clone();
            let manifest = pipeline
                .manifests
                .keep_streamed(
                    &page_url,
                    etag,
                    scanned.hash,
                    scanned.references,
                    &hints.manifest_rules(),
                )
                .await;
            pipeline.read_stylesheets(&hints, &page_url, conn, &manifest);
        });
        instance
    }

    /// Whether the page `instance` answering the request of `ctx` is the same for
    /// everyone, so its manifest may serve other clients.
    fn shared_page(&self, ctx: &RequestContext, instance: &crate::model::Instance) -> bool {
        let public_path = self.config().cache.is_public_path(ctx.profile.uri.path());
        wirefold_http::audience::audience(&ctx.profile.headers, &instance.headers, public_path)
            .may_derive()
    }

    /// Reads the stylesheets of a page's manifest for their imports and fonts, once
    /// per page version and in the background (the page is not delayed): each is
    /// fetched through `fetch` and `remember`, so the cache serves and keeps it like
    /// any request. Same-origin stylesheets only (the page's own site is the one
    /// served), at most `MAX_STYLESHEETS_READ` per page, `hints.stylesheet_depth`
    /// deep, each once (an import cycle ends). The manifest is then replaced.
    ///
    /// Runs after a shared page is served, on the normal path and over the link (where
    /// `page_url` is the URL the link request named), so that later loads announce and
    /// push what the stylesheets need. `conn` is the page request's connection.
    pub fn read_stylesheets(
        self: &Arc<Self>,
        hints: &hint::HintConfig,
        page_url: &str,
        conn: ConnInfo,
        manifest: &Arc<crate::manifests::PageManifest>,
    ) {
        if hints.stylesheet_depth == 0 || !self.manifests.claim_stylesheets(page_url, manifest) {
            return;
        }
        let (page_url, pipeline, manifest, rules, max_depth) = (
            page_url.to_string(),
            self.clone(),
            manifest.clone(),
            hints.manifest_rules(),
            hints.stylesheet_depth,
        );
        self.background.spawn(async move {
            let origin = match url::Url::parse(&page_url) {
                Ok(url) => url.origin(),
                Err(_) => return,
            };
            let mut entries = manifest.entries.clone();
            let own_stylesheet = |e: &wirefold_page::manifest::ManifestEntry| {
                e.destination == wirefold_page::manifest::Destination::Style
                    && url::Url::parse(&e.url).is_ok_and(|u| u.origin() == origin)
            };
            let mut queue: std::collections::VecDeque<_> = entries
                .iter()
                .filter(|e| own_stylesheet(e))
                .cloned()
                .collect();
            let mut read = std::collections::HashSet::new();
            while let Some(sheet) = queue.pop_front() {
                if read.len() == MAX_STYLESHEETS_READ || sheet.depth >= max_depth {
                    continue;
                }
                if !read.insert(sheet.url.clone()) {
                    continue;
                }
                let Some(css) = pipeline
                    .fetch_without_credentials(&sheet.url, stylesheet_request_fields(), conn)
                    .await
                    .and_then(|instance| match instance.body {
                        crate::model::InstanceBody::Whole { bytes, .. } => Some(bytes),
                        _ => None,
                    })
                else {
                    continue;
                };
                let found = wirefold_page::css::stylesheet_references(&css, &sheet.url);
                let known = entries.len();
                wirefold_page::manifest::add_stylesheet_references(
                    &mut entries,
                    &sheet,
                    &found,
                    &page_url,
                    &rules,
                );
                if entries.len() > known {
                    queue.extend(
                        entries
                            .iter()
                            .filter(|e| own_stylesheet(e) && e.depth == sheet.depth + 1)
                            .filter(|e| !read.contains(&e.url))
                            .cloned(),
                    );
                }
            }
            let added = entries.len().saturating_sub(manifest.entries.len());
            let read_manifest = crate::manifests::PageManifest {
                hash: manifest.hash,
                entries,
                stylesheets_read: true,
            };
            pipeline
                .manifests
                .replace(&page_url, read_manifest, added)
                .await;
        });
    }

    /// The resource at the absolute `url`, fetched (or found in the cache) the way a
    /// request for it without credentials would be, with `fields` as its request
    /// fields, and remembered like one; `None` unless it is a whole `200`. For the
    /// work a page's answer starts: its stylesheets read, its subresources pushed over
    /// the link. `conn` is the page request's connection.
    pub async fn fetch_without_credentials(
        self: &Arc<Self>,
        url: &str,
        fields: http::HeaderMap,
        conn: ConnInfo,
    ) -> Option<crate::model::Instance> {
        let mut request = Request::get(url).body(crate::body::empty()).ok()?;
        // HTTP/2, whose target names the host: the absolute URL is the request's
        // whole address, on every source (a server proxy's forward one needs it).
        *request.version_mut() = http::Version::HTTP_2;
        *request.headers_mut() = fields;
        let ctx = self.context(&request, conn, Instant::now()).ok()?;
        let fetched = fetch::fetch(&self.fetcher, &ctx, request, None)
            .await
            .ok()?;
        let instance = remember::remember(&self.cache, &self.deltas, &self.metrics, fetched).await;
        (instance.status == StatusCode::OK
            && matches!(instance.body, crate::model::InstanceBody::Whole { .. }))
        .then_some(instance)
    }

    /// Whether `req` may get 103 Early Hints, and its context if so: hints and early
    /// hints are on, and it asks for a page (a navigation, a GET accepting HTML).
    /// Synchronous, so the request (whose body is not `Sync`) is not held across the
    /// lookup that follows in [`Pipeline::early_hints`].
    pub fn early_hints_context(
        &self,
        req: &Request<Body>,
        conn: ConnInfo,
    ) -> Option<RequestContext> {
        let hints = &self.config().hints;
        if !(hints.enabled && hints.early_hints && asks_for_a_page(req)) {
            return None;
        }
        self.context(req, conn, Instant::now()).ok()
    }

    /// The fields of a 103 Early Hints response for the request of `ctx`, sent before
    /// it is fetched: the links of the latest manifest of the page it asks for,
    /// when that page was already served to everyone. `None` when there is nothing
    /// to announce.
    pub async fn early_hints(&self, ctx: RequestContext) -> Option<http::HeaderMap> {
        let manifest = self.manifests.latest(&ctx.url()).await?;
        let hints = hint::early_hints(&self.config().hints, &self.preloads, &ctx, &manifest)?;
        self.metrics.early_hints.inc();
        self.metrics.hinted_early(hints.links);
        Some(hints.fields)
    }

    /// Classifies the request and names its site and resource. A forwarded request
    /// must name an absolute `http://` or `https://` URI.
    pub fn context(
        &self,
        req: &Request<Body>,
        conn: ConnInfo,
        started: Instant,
    ) -> Result<RequestContext, String> {
        let profile = classify::classify(req).map_err(|e| e.to_string())?;
        let site = self.fetcher.source().site_for(&profile)?;
        let resource = format!("{site}{}", profile.path_and_query());
        Ok(RequestContext::new(profile, site, resource, conn, started))
    }
}

/// The fields of a stylesheet's request when a page's stylesheets are read: what a
/// browser's asks for.
fn stylesheet_request_fields() -> http::HeaderMap {
    let mut fields = http::HeaderMap::new();
    fields.insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static("text/css,*/*;q=0.1"),
    );
    fields
}

/// Stylesheets read per page version, at most: a page linking a thousand costs no
/// more than this many fetches.
const MAX_STYLESHEETS_READ: usize = 16;

/// Whether `req` is for a page: a GET that a browser makes to navigate
/// (`Sec-Fetch-Dest: document`), or that accepts HTML. Asset requests never cost a
/// manifest lookup.
fn asks_for_a_page<B>(req: &Request<B>) -> bool {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    };
    req.method() == Method::GET
        && (header("sec-fetch-dest") == "document" || header("accept").contains("text/html"))
}

/// A page's manifest being built, and whether the page is the same for everyone
/// (only then is its manifest kept for other clients, its stylesheets read into it).
struct ManifestBuild<F> {
    shared: bool,
    building: F,
}
