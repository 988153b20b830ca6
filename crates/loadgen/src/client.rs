//! One HTTP/1.1 keep-alive connection and one exchange on it, as both modes use them.

use std::future::Future;
use std::net::SocketAddr;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

pub type Sender = SendRequest<Empty<Bytes>>;

/// Why an exchange failed, for the report.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error("connect to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("HTTP/1.1 handshake with {addr}: {source}")]
    Handshake {
        addr: SocketAddr,
        source: hyper::Error,
    },
    #[error("request: {0}")]
    Request(hyper::Error),
    #[error("response body: {0}")]
    Body(hyper::Error),
}

/// A new connection: the sender, and the future that drives the connection's I/O and
/// ends when the connection closes (the server closed it, or every sender is gone and
/// no exchange is in progress).
pub async fn connect(
    addr: SocketAddr,
) -> Result<(Sender, impl Future<Output = ()> + Send + 'static), ExchangeError> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|source| ExchangeError::Connect { addr, source })?;
    // Requests are small and each waits for its answer: Nagle would only delay them.
    let _ = stream.set_nodelay(true);
    let (sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|source| ExchangeError::Handshake { addr, source })?;
    Ok((sender, async move {
        let _ = connection.await;
    }))
}

/// A finished exchange.
#[derive(Clone, Copy, Debug)]
pub struct Answer {
    pub status: StatusCode,
    /// Body bytes as sent (still coded, as on the wire).
    pub body_bytes: u64,
}

/// Sends the request and reads the whole answer, so that the connection can carry the
/// next one.
pub async fn exchange(
    sender: &mut Sender,
    request: http::Request<Empty<Bytes>>,
) -> Result<Answer, ExchangeError> {
    let response = sender
        .send_request(request)
        .await
        .map_err(ExchangeError::Request)?;
    let status = response.status();
    let mut body = response.into_body();
    let mut body_bytes = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(ExchangeError::Body)?;
        if let Some(data) = frame.data_ref() {
            body_bytes += data.len() as u64;
        }
    }
    Ok(Answer { status, body_bytes })
}
