//! Outgoing HTTP for streamed answers (model servers, vendor APIs): one [`Client`] that every
//! such caller shares, with the same connect timeout, no Nagle delay and a bounded idle pool.
//!
//! # Layout
//! - this module: [`Client`] (build a request with reqwest's builder, [`Client::send`] it),
//!   [`Response`] and [`Error`], and the settings every outgoing client shares.
//! - `cleartext`: HTTP/1.1 over cleartext TCP, a connection being a socket and one small read
//!   buffer, driven inside the response body's own poll (why: below).
//!
//! # Two transports, one interface
//! `https://` servers (OpenAI, vendor APIs) and HTTP/2 with prior knowledge go through reqwest:
//! TLS, and HTTP/2 when the server offers it, where one connection carries every concurrent
//! call and a read hands the body every frame it brought.
//!
//! A cleartext `http://` server speaking HTTP/1.1 (a model server beside the function, a
//! sidecar, the test and benchmark servers) goes through `cleartext`. Through reqwest, hyper's
//! connection task decodes one chunk of a chunked body, hands it over through a one-slot
//! channel and waits to be polled again: each frame of a streamed answer (one token) is a switch
//! between two tasks, and between them the turn runs dry and the client's connection writes what
//! it has. Driving the connection inside the body's poll, a read's frames are decoded in one go,
//! and the turn's events leave in one write (docs/benchmarks.md, "Where a turn's CPU goes").
//! hyper's connection also held about 26 KB for its life (two 8 KiB buffers and its request
//! channel), twice per turn at its peak; `cleartext`'s holds a 4 KiB read buffer only while
//! bytes are coming in, none while it waits for the next frame or sits in the pool
//! (docs/benchmarks.md, "Memory per stream").
//! Requests are built with reqwest's builder on either path (credentials in a URL become a
//! basic-auth header there, and leave the URL).
//! No task per connection, and no HTTP proxy: when `HTTP_PROXY` or `ALL_PROXY` is set,
//! cleartext calls go through reqwest, which honours them. Neither transport follows redirects.

mod cleartext;
mod sign;

pub use sign::{RequestSigner, SigningScope};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};

/// Idle connections an HTTP client keeps per host. Enough for the steady concurrency of a
/// `serve` process to reuse warm (TLS) connections; a burst beyond it closes its extra
/// connections as they go idle instead of holding their buffers for the pool's idle timeout.
pub const MAX_IDLE_CONNECTIONS_PER_HOST: usize = 32;

/// How long an idle pooled connection is kept.
pub(crate) const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(60);

/// The reqwest settings every outgoing client shares (model servers, vendor APIs): the connect
/// timeout, no Nagle delay (small SSE frames and requests go at once), a bounded idle pool
/// ([`MAX_IDLE_CONNECTIONS_PER_HOST`], [`IDLE_CONNECTION_TIMEOUT`]), and no redirects: an API
/// endpoint that redirects is misconfigured, and its `3xx` is reported as the answer, as the
/// cleartext transport does.
pub(crate) fn pooled_client(connect_timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .pool_max_idle_per_host(MAX_IDLE_CONNECTIONS_PER_HOST)
        .pool_idle_timeout(IDLE_CONNECTION_TIMEOUT)
}

/// The outgoing HTTP client of streamed answers. Cheap to clone: clones share the connection
/// pools.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    /// `None` when cleartext calls go through reqwest too (HTTP/2 prior knowledge, a proxy).
    cleartext: Option<Arc<cleartext::Pool>>,
}

impl Client {
    /// A client with the shared settings (`pooled_client`). `http2_prior_knowledge` speaks
    /// HTTP/2 to a cleartext server too (one that accepts h2c without an upgrade), so concurrent
    /// calls share one connection.
    pub fn new(connect_timeout: Duration, http2_prior_knowledge: bool) -> Result<Client, Error> {
        let builder = pooled_client(connect_timeout);
        let builder = if http2_prior_knowledge { builder.http2_prior_knowledge() } else { builder };
        let http = builder.build().map_err(Error::from)?;
        let proxied = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
            .iter()
            .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()));
        let cleartext =
            (!http2_prior_knowledge && !proxied).then(|| Arc::new(cleartext::Pool::new(connect_timeout)));
        Ok(Client { http, cleartext })
    }

    /// A `POST` to `url`, to finish with reqwest's builder and [`Client::send`].
    pub fn post(&self, url: impl reqwest::IntoUrl) -> reqwest::RequestBuilder {
        self.http.post(url)
    }

    /// A `PUT` to `url`, to finish with reqwest's builder and [`Client::send`].
    pub fn put(&self, url: impl reqwest::IntoUrl) -> reqwest::RequestBuilder {
        self.http.put(url)
    }

    /// Sends `request` (built on this client) and returns the response head; its body streams
    /// from [`Response::bytes_stream`]. The caller bounds the wait for the head.
    ///
    /// The future is boxed: a caller's stream keeps its state for as long as the answer lasts,
    /// and this future's few kilobytes (reqwest's, or the connection set-up's) are only needed
    /// until the head.
    pub fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Pin<Box<dyn Future<Output = Result<Response, Error>> + Send + '_>> {
        Box::pin(async move {
            let request = request.build().map_err(Error::from)?;
            match &self.cleartext {
                Some(pool) if request.url().scheme() == "http" => {
                    Ok(Response(Inner::Cleartext(Box::new(pool.send(request).await?))))
                }
                _ => Ok(Response(Inner::Reqwest(self.http.execute(request).await.map_err(Error::from)?))),
            }
        })
    }
}

/// A response head, with its body still to read.
#[derive(Debug)]
pub struct Response(Inner);

#[derive(Debug)]
enum Inner {
    Reqwest(reqwest::Response),
    Cleartext(Box<http::Response<cleartext::Body>>),
}

impl Response {
    /// The status code.
    pub fn status(&self) -> reqwest::StatusCode {
        match &self.0 {
            Inner::Reqwest(r) => r.status(),
            Inner::Cleartext(r) => r.status(),
        }
    }

    /// The headers.
    pub fn headers(&self) -> &reqwest::header::HeaderMap {
        match &self.0 {
            Inner::Reqwest(r) => r.headers(),
            Inner::Cleartext(r) => r.headers(),
        }
    }

    /// The body's bytes as they arrive. The caller bounds each wait.
    pub fn bytes_stream(self) -> impl Stream<Item = Result<Bytes, Error>> + Send {
        match self.0 {
            Inner::Reqwest(r) => {
                futures::future::Either::Left(r.bytes_stream().map(|c| c.map_err(Error::from)))
            }
            Inner::Cleartext(r) => futures::future::Either::Right(r.into_body()),
        }
    }
}

/// Why a request failed: its message is the whole chain of causes (with the URL, never a header).
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ErrorKind {
    /// No connection: refused, unreachable, name not found.
    Connect,
    /// The connection was not made within the connect timeout.
    ConnectTimeout,
    /// The request could not be built or sent, or its answer broke off.
    Transfer,
}

impl Error {
    /// The server could not be reached (a connect timeout counts as [`Error::is_timeout`]).
    pub fn is_connect(&self) -> bool {
        self.kind == ErrorKind::Connect
    }

    /// The connection was not made within the connect timeout.
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::ConnectTimeout
    }

    fn connect(message: String) -> Error {
        Error { kind: ErrorKind::Connect, message }
    }

    fn connect_timeout(message: String) -> Error {
        Error { kind: ErrorKind::ConnectTimeout, message }
    }

    fn transfer(message: String) -> Error {
        Error { kind: ErrorKind::Transfer, message }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<reqwest::Error> for Error {
    fn from(e: reqwest::Error) -> Error {
        let kind = if e.is_timeout() {
            ErrorKind::ConnectTimeout
        } else if e.is_connect() {
            ErrorKind::Connect
        } else {
            ErrorKind::Transfer
        };
        Error { kind, message: error_chain(&e) }
    }
}

/// `e` and its sources, joined by `: `.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}
