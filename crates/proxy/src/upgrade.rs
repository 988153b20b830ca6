//! `Upgrade` (WebSocket and the like) passed through to the origin: once both sides
//! agree on 101, bytes are copied both ways untouched.

use std::any::Any;
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use crate::body::error_response;
use crate::body::{self, Body};
use crate::model::ConnInfo;
use crate::origin::Origin;

/// What the client's connection holds until it closes (its place among
/// `limits.max_connections`, shutdown's wait for it): put in an upgrade request's
/// extensions by the connection, kept by the copy once the connection is upgraded.
#[derive(Clone)]
pub struct ConnectionHold {
    _held: Arc<dyn Any + Send + Sync>,
}

impl ConnectionHold {
    pub fn new(held: Arc<dyn Any + Send + Sync>) -> Self {
        ConnectionHold { _held: held }
    }
}

pub async fn pass_through(
    origin: &Origin,
    mut req: Request<Body>,
    conn: ConnInfo,
) -> Response<Body> {
    let hold = req.extensions_mut().remove::<ConnectionHold>();
    let client_side = hyper::upgrade::on(&mut req);
    let upstream = origin.prepare(req, conn);
    let mut response = match origin.send(upstream).await {
        Ok((response, _)) => response,
        Err(e) => return error_response(e.status(), &e.to_string()),
    };
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        return response;
    }
    let origin_side = hyper::upgrade::on(&mut response);
    tokio::spawn(async move {
        let _hold = hold;
        match tokio::try_join!(client_side, origin_side) {
            Ok((client, origin)) => {
                let (mut client, mut origin) = (TokioIo::new(client), TokioIo::new(origin));
                if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut origin).await {
                    tracing::debug!(error = %e, "upgraded connection ended");
                }
            }
            Err(e) => tracing::warn!(error = %e, "upgrade failed"),
        }
    });
    let (parts, _) = response.into_parts();
    Response::from_parts(parts, body::empty())
}
