//! What the bench's origins share: serving HTTP/1.1 connections with an answer function.

use std::convert::Infallible;
use std::future::Future;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// Serves every connection `listener` accepts over HTTP/1.1 (without Nagle's delay),
/// each request answered by `answer`, until the runtime stops.
pub async fn accept_loop<A, F>(listener: TcpListener, answer: A)
where
    A: Fn(Request<Incoming>) -> F + Clone + Send + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let answer = answer.clone();
        let service = service_fn(move |req: Request<Incoming>| {
            let answered = answer(req);
            async move { Ok::<_, Infallible>(answered.await) }
        });
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
