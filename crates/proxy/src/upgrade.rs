//! `Upgrade` (WebSocket and the like) passed through to the origin: once both sides
//! agree on 101, bytes are copied both ways untouched.

use http::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use crate::body::error_response;
use crate::body::{self, Body};
use crate::model::ConnInfo;
use crate::origin::Origin;

pub async fn pass_through(
    origin: &Origin,
    mut req: Request<Body>,
    conn: ConnInfo,
) -> Response<Body> {
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
