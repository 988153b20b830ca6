//! The browsers' listener (HTTP/1.1 and h2c): forward-proxy requests (absolute-form
//! `http://` and `CONNECT`), reverse-proxy requests in `--site` mode; and the admin
//! listener.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::metrics::{Answered, ClientMetrics};
use crate::{exchange, Client};
use proxy::body::error_response;
use proxy::body::{self, Body};

/// A browser (or a client of the admin listener) must send a whole request head
/// within this time.
pub(super) const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

pub(super) async fn accept_loop(
    listener: TcpListener,
    client: Arc<Client>,
    mut stop: watch::Receiver<bool>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    builder.http2().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        let client = client.clone();
        let service = service_fn(move |req: Request<Incoming>| {
            let client = client.clone();
            async move { Ok::<_, Infallible>(dispatch(&client, req).await) }
        });
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        tokio::spawn(graceful.watch(connection));
    }
    drop(listener);
    let grace = Duration::from_millis(client.config.shutdown_grace_ms);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace period over; dropping the remaining connections");
    }
}

async fn dispatch(client: &Arc<Client>, req: Request<Incoming>) -> Response<Body> {
    if req.method() == Method::CONNECT {
        if let Some(site) = &client.site {
            // A reverse proxy for one site is no tunnel to anywhere.
            client.metrics.answered(Answered::Error);
            return error_response(
                StatusCode::BAD_REQUEST,
                &format!("CONNECT is refused: this client proxy serves only the site {site}"),
            );
        }
        return tunnel(client, req).await;
    }
    match target(client, &req) {
        Ok(target) => exchange::answer(client, req, target).await,
        Err(message) => {
            client.metrics.answered(Answered::Error);
            error_response(StatusCode::BAD_REQUEST, &message)
        }
    }
}

/// The absolute URL a request is for.
fn target(client: &Client, req: &Request<Incoming>) -> Result<Uri, String> {
    let uri = req.uri();
    // HTTP/2 requests always carry an authority: in `--site` mode they are the site's.
    let reverse_h2 = req.version() == http::Version::HTTP_2 && client.site.is_some();
    if let (Some(site), Some(authority), false) = (&client.site, uri.authority(), reverse_h2) {
        // Absolute-form in reverse mode: only for the site itself (no open proxy).
        if site.authority() != Some(authority) {
            return Err(format!(
                "cannot proxy `{uri}`: this client proxy serves only the site {site}"
            ));
        }
    } else if uri.authority().is_some() && !reverse_h2 {
        return match uri.scheme_str() {
            Some("http") => Ok(uri.clone()),
            _ => Err(format!(
                "cannot proxy `{uri}`: absolute-form requests must be http:// (https goes through CONNECT)"
            )),
        };
    }
    let Some(site) = &client.site else {
        return Err(format!(
            "`{uri}` is not a proxy request: send absolute-form requests (http://host/path) or \
             CONNECT host:port, or start the client proxy with --site URL to serve one site"
        ));
    };
    let path_and_query = uri.path_and_query().map_or("/", |pq| pq.as_str());
    let unusable = |e: &dyn std::fmt::Display| {
        format!("`{path_and_query}` does not make a URL on the site: {e}")
    };
    let mut parts = site.clone().into_parts();
    let target = format!("{}{path_and_query}", site.path().trim_end_matches('/'));
    parts.path_and_query = Some(target.parse().map_err(|e| unusable(&e))?);
    Uri::from_parts(parts).map_err(|e| unusable(&e))
}

/// `CONNECT host:port`: a direct TCP connection from here, bytes copied untouched.
async fn tunnel(client: &Client, mut req: Request<Incoming>) -> Response<Body> {
    let Some(authority) = req.uri().authority().cloned() else {
        client.metrics.answered(Answered::Error);
        return error_response(StatusCode::BAD_REQUEST, "CONNECT needs host:port");
    };
    let Some(port) = authority.port_u16() else {
        client.metrics.answered(Answered::Error);
        return error_response(StatusCode::BAD_REQUEST, "CONNECT needs host:port");
    };
    let timeout = Duration::from_millis(client.config.connect_timeout_ms);
    let connected =
        tokio::time::timeout(timeout, TcpStream::connect((authority.host(), port))).await;
    let mut upstream = match connected {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            client.metrics.answered(Answered::Error);
            return error_response(
                StatusCode::BAD_GATEWAY,
                &format!("cannot connect to {authority}: {e}"),
            );
        }
        Err(_) => {
            client.metrics.answered(Answered::Error);
            return error_response(
                StatusCode::GATEWAY_TIMEOUT,
                &format!("no connection to {authority} within {timeout:?}"),
            );
        }
    };
    let _ = upstream.set_nodelay(true);
    client.metrics.answered(Answered::Tunnel);
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let mut browser = TokioIo::new(upgraded);
                if let Err(e) = tokio::io::copy_bidirectional(&mut browser, &mut upstream).await {
                    tracing::debug!(error = %e, %authority, "tunnel ended");
                }
            }
            Err(e) => tracing::debug!(error = %e, %authority, "CONNECT upgrade failed"),
        }
    });
    Response::new(body::empty())
}

pub(super) fn admin(metrics: &ClientMetrics, req: &Request<Incoming>) -> Response<Body> {
    let (status, content_type, text) = match req.uri().path() {
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        "/metrics" => match metrics.encode() {
            Ok(metrics) => (
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                metrics,
            ),
            Err(e) => {
                tracing::warn!(error = %e, "metrics could not be encoded");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    "metrics could not be encoded\n".to_string(),
                )
            }
        },
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /metrics or /healthz\n".to_string(),
        ),
    };
    let mut response = Response::new(body::full(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    response
}
