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
//! | [`fetch`] | after classify | [`Fetcher`](fetch::Fetcher) (source, cache, limits), an optional [`OriginObserver`](crate::model::OriginObserver) | the origin request it sends | the current [`Instance`](crate::model::Instance) and what to store; or a finished error response |
//! | [`remember`] | after fetch, before anything is sent | [`Cache`](crate::cache::Cache), [`DeltaEngine`](delta::DeltaEngine) | the store | the instance, unchanged |
//! | [`adapt`] | on every instance | [`Variants`](crate::variants::Variants), `[fidelity]` | the instance's fidelity: a smaller variant, `Alternates`, `TCN`, `Vary`, `Accept-CH`; queues first-seen originals for variants | an instance |
//! | [`hint`] | on every instance | the context | hints about what the client will need (passes through until inline download lands) | an instance |
//! | [`encode`] | on every instance | [`DerivedBodies`](delta::derived::DerivedBodies), [`DeltaEngine`](delta::DeltaEngine) | the representation's coding, `Use-As-Dictionary` and dictionary links | a [`Representation`](encode::Representation) |
//! | [`respond`] | last | metrics | status (304, 206, 412, 416), validators, `Vary`, `Cache-Status` | the response, and what it delivers for the request's record |
//!
//! Stages share nothing but the [`RequestContext`](crate::model::RequestContext) and the
//! values they hand on. The values are in [`crate::model`], a leaf every caller of a
//! stage may use; a server proxy's link exchange runs `fetch` and `remember` itself.
//! Every answer, error or not, completes the request's
//! [`RequestRecord`](crate::record::RequestRecord) as its body is sent.

pub mod adapt;
pub mod classify;
pub mod encode;
pub mod fetch;
pub mod hint;
pub mod remember;
pub mod respond;

use std::sync::Arc;
use std::time::Instant;

use http::{Request, Response, StatusCode};
use store::Store;

use crate::background::Background;
use crate::body::Body;
use crate::cache::Cache;
use crate::config::Config;
use crate::live::{LiveConfig, ReloadError, Reloaded};
use crate::metrics::Metrics;
use crate::model::{ConnInfo, RequestContext};
use crate::record::{Delivery, RequestRecord};
use crate::recorder::{OpenRecord, Records};
use crate::variants::{Variants, VARIANT_PREFIX};
use delta::derived::DerivedBodies;
use delta::DeltaEngine;
use fetch::{Fetcher, Source};

/// The services the stages use, for the life of the server.
pub struct Pipeline {
    /// The configuration in force; a reload swaps it.
    live: Arc<LiveConfig>,
    pub fetcher: Arc<Fetcher>,
    pub cache: Arc<Cache>,
    pub deltas: Arc<DeltaEngine>,
    pub bodies: Arc<DerivedBodies>,
    pub metrics: Arc<Metrics>,
    /// Adaptive fidelity's variants, network estimates and egress fraction.
    pub variants: Arc<Variants>,
    /// Where each request's record goes: the access log and the status page.
    pub records: Arc<Records>,
    /// Work that outlives a request (revalidations, encodings at the kept level),
    /// waited for at shutdown.
    pub background: Background,
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
        let variants = Arc::new(Variants::new(store.clone(), background.clone(), &metrics));
        let deltas = Arc::new(DeltaEngine::new(
            live.current().delta.clone(),
            store,
            bodies.clone(),
        ));
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
            variants,
            records,
            background,
        }
    }

    /// Starts the tasks that live as long as the pipeline (the egress controller);
    /// needs a Tokio runtime.
    pub fn start_tasks(self: &Arc<Self>) {
        Variants::run_egress_controller(&self.variants, self.live.clone(), self.metrics.clone());
    }

    /// The configuration in force now.
    pub fn config(&self) -> Arc<Config> {
        self.live.current()
    }

    /// Reads the configuration again and puts it in force for what comes after
    /// (see [`crate::live`]); logs what changed, what needs a restart, or why nothing did.
    pub fn reload(&self) -> Result<Reloaded, ReloadError> {
        match self.live.reload() {
            Ok(reloaded) => {
                self.deltas.set_config(self.live.current().delta.clone());
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
        let response = self.run_stages(req, conn, started, &record).await;
        self.metrics
            .record_request(&method, response.status(), started.elapsed());
        record.watch(response)
    }

    async fn run_stages(
        self: &Arc<Self>,
        req: Request<Body>,
        conn: ConnInfo,
        started: Instant,
        record: &OpenRecord,
    ) -> Response<Body> {
        let ctx = match self.context(&req, conn, started) {
            Ok(ctx) => ctx,
            Err(message) => {
                record.deliver(Delivery::error(None));
                return crate::body::error_response(StatusCode::BAD_REQUEST, &message);
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
                    return crate::body::error_response(StatusCode::NOT_FOUND, "no such variant");
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
                        return response;
                    }
                };
                let instance =
                    remember::remember(&self.cache, &self.deltas, &self.metrics, fetched).await;
                adapt::adapt(&self.variants, &config.fidelity, &ctx, instance).await
            }
        };
        let instance = hint::hint(&ctx, instance);
        let representation =
            encode::encode(&config, &self.bodies, &self.deltas, &ctx, instance).await;
        let (response, delivery) = respond::respond(&self.metrics, &ctx, representation);
        record.deliver(delivery);
        response
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
        Ok(RequestContext {
            profile,
            site,
            resource,
            conn,
            started,
            origin_wait: Default::default(),
        })
    }
}
