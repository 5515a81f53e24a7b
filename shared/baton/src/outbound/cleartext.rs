//! HTTP/1.1 over cleartext TCP, with each connection driven by whoever waits on it: the request
//! future until the response head, then the response body's own poll. No task per connection.
//!
//! A read's worth of a chunked body is then decoded in one go: when the body's one-slot channel
//! is empty, [`Body`] polls the connection, which decodes the next chunk from the bytes it has
//! already read, and the body yields it at once, with no switch to another task in between.
//!
//! The pool keeps a connection once its answer was read to the end, keyed by `host:port`. An idle
//! connection is not polled: one the server closed meanwhile is found closed when it is taken out
//! and dropped, and one that the server closes while a request is on its way (the classic
//! keep-alive race) fails that request before any answer, which is then sent once more on a new
//! connection.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body as _, Incoming};
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::{Error, IDLE_CONNECTION_TIMEOUT, MAX_IDLE_CONNECTIONS_PER_HOST, error_chain};

/// One HTTP/1.1 connection: its request handle and the connection state machine, polled by
/// whoever waits on it.
struct Conn {
    sender: SendRequest<Full<Bytes>>,
    conn: Connection<TokioIo<TcpStream>, Full<Bytes>>,
    /// The connection is over (closed by either side, or failed): not to be polled again.
    closed: bool,
}

impl Conn {
    /// Reads, decodes and writes what the socket allows now. `Ready` once the connection is
    /// over: `Ok` closed, `Err` failed.
    fn drive(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        if self.closed {
            return Poll::Ready(Ok(()));
        }
        let polled = self.conn.poll_without_shutdown(cx);
        if polled.is_ready() {
            self.closed = true;
        }
        polled
    }

    /// Whether the connection can take another request now.
    fn reusable(&mut self) -> bool {
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        self.drive(&mut cx).is_pending() && self.sender.is_ready()
    }

    /// Sends `request` and drives the connection until the response head came.
    async fn exchange(
        &mut self,
        request: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<Incoming>, Failed> {
        let mut response = std::pin::pin!(self.sender.send_request(request));
        std::future::poll_fn(|cx| {
            if let Poll::Ready(head) = response.as_mut().poll(cx) {
                return Poll::Ready(head.map_err(Failed::Hyper));
            }
            match self.drive(cx) {
                Poll::Pending => response.as_mut().poll(cx).map_err(Failed::Hyper),
                Poll::Ready(Err(e)) => Poll::Ready(Err(Failed::Hyper(e))),
                // Closed before the head: a request it never took would wait for ever.
                Poll::Ready(Ok(())) => match response.as_mut().poll(cx) {
                    Poll::Ready(head) => Poll::Ready(head.map_err(Failed::Hyper)),
                    Poll::Pending => Poll::Ready(Err(Failed::Closed)),
                },
            }
        })
        .await
    }
}

/// Why an exchange got no response head.
#[derive(Debug)]
enum Failed {
    /// The connection failed, or the request did.
    Hyper(hyper::Error),
    /// The connection closed (cleanly) before an answer.
    Closed,
}

impl Failed {
    /// Nothing came back: the request can go again on a new connection.
    fn unanswered(&self) -> bool {
        match self {
            Failed::Closed => true,
            Failed::Hyper(e) => e.is_canceled() || e.is_incomplete_message() || e.is_closed(),
        }
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Hyper(e) => f.write_str(&error_chain(e)),
            Failed::Closed => f.write_str("the connection closed before an answer"),
        }
    }
}

/// Idle connections by `host:port`.
pub(super) struct Pool {
    idle: Mutex<HashMap<String, Vec<(Conn, Instant)>>>,
    connect_timeout: Duration,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("cleartext::Pool")
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

impl Pool {
    pub(super) fn new(connect_timeout: Duration) -> Pool {
        Pool { idle: Mutex::new(HashMap::new()), connect_timeout }
    }

    /// Sends `request` (an `http://` URL) on a pooled or a new connection.
    pub(super) async fn send(
        self: &Arc<Pool>,
        request: reqwest::Request,
    ) -> Result<http::Response<Body>, Error> {
        let url = request.url();
        let host = url.host_str().ok_or_else(|| Error::transfer(format!("{url} has no host")))?;
        let port = url.port_or_known_default().unwrap_or(80);
        let key = format!("{host}:{port}");
        let host_header = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        let path = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        };
        let body = match request.body() {
            None => Bytes::new(),
            Some(body) => Bytes::copy_from_slice(
                body.as_bytes()
                    .ok_or_else(|| Error::transfer("a streamed request body is not supported".into()))?,
            ),
        };
        let build = || {
            let mut built = http::Request::builder().method(request.method().clone()).uri(path.as_str());
            if let Some(headers) = built.headers_mut() {
                headers.extend(request.headers().iter().map(|(k, v)| (k.clone(), v.clone())));
                if let Ok(value) = http::HeaderValue::from_str(&host_header) {
                    headers.insert(http::header::HOST, value);
                }
            }
            built
                .body(Full::new(body.clone()))
                .map_err(|e| Error::transfer(format!("invalid request to {url}: {e}")))
        };
        let (mut conn, reused) = match self.checkout(&key) {
            Some(conn) => (conn, true),
            None => (self.connect(&key).await?, false),
        };
        let head = match conn.exchange(build()?).await {
            // The server closed the idle connection as the request went out: no answer came, so
            // send it once more, on a new connection.
            Err(e) if reused && e.unanswered() => {
                conn = self.connect(&key).await?;
                conn.exchange(build()?).await
            }
            other => other,
        }
        .map_err(|e| Error::transfer(format!("request to {url} failed: {e}")))?;
        let (parts, incoming) = head.into_parts();
        let body = Body { incoming, conn: Some(conn), pool: self.clone(), key };
        Ok(http::Response::from_parts(parts, body))
    }

    /// A new connection to `key` (`host:port`), within the connect timeout.
    async fn connect(&self, key: &str) -> Result<Conn, Error> {
        let stream = match tokio::time::timeout(self.connect_timeout, TcpStream::connect(key)).await {
            Err(_) => {
                return Err(Error::connect_timeout(format!(
                    "connecting to {key} took over {} ms",
                    self.connect_timeout.as_millis()
                )));
            }
            Ok(Err(e)) => return Err(Error::connect(format!("connecting to {key}: {e}"))),
            Ok(Ok(stream)) => stream,
        };
        // Small requests and frames go at once.
        let _ = stream.set_nodelay(true);
        let (sender, conn) = hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| Error::connect(format!("connecting to {key}: {}", error_chain(&e))))?;
        Ok(Conn { sender, conn, closed: false })
    }

    /// The most recently idle connection to `key` that is still open, if any.
    fn checkout(&self, key: &str) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.get_mut(key)?;
        while let Some((mut conn, since)) = list.pop() {
            if since.elapsed() < IDLE_CONNECTION_TIMEOUT && conn.reusable() {
                return Some(conn);
            }
        }
        None
    }

    /// Keeps `conn` for the next request to `key`, if it can take one.
    fn check_in(&self, key: &str, mut conn: Conn) {
        if !conn.reusable() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.entry(key.to_owned()).or_default();
        list.retain(|(_, since)| since.elapsed() < IDLE_CONNECTION_TIMEOUT);
        if list.len() >= MAX_IDLE_CONNECTIONS_PER_HOST {
            list.remove(0);
        }
        list.push((conn, Instant::now()));
    }
}

/// A response body whose connection is driven by its own poll; the connection goes back to the
/// pool once the body was read to the end, and is closed if the body is dropped before.
pub(super) struct Body {
    incoming: Incoming,
    conn: Option<Conn>,
    pool: Arc<Pool>,
    key: String,
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("cleartext::Body").field("key", &self.key).finish_non_exhaustive()
    }
}

impl Body {
    /// The next data frame already handed over, if any.
    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        loop {
            match Pin::new(&mut self.incoming).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        return Poll::Ready(Some(Ok(data)));
                    }
                    // Trailers: nothing a caller reads.
                }
                Poll::Ready(Some(Err(e))) => {
                    self.conn = None;
                    return Poll::Ready(Some(Err(Error::transfer(format!(
                        "the answer broke off: {}",
                        error_chain(&e)
                    )))));
                }
                Poll::Ready(None) => {
                    if let Some(conn) = self.conn.take() {
                        self.pool.check_in(&self.key, conn);
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }
}

/// Frames a dropped body reads to reach its end, if they are already here.
const DRAIN_FRAMES: usize = 16;

impl Drop for Body {
    /// A caller stops reading once the answer says it is over (an SSE `[DONE]`), one chunk
    /// before the body's end: when that end is already in the buffers, it is read, so the
    /// connection goes back to the pool instead of closing. Nothing here waits.
    fn drop(&mut self) {
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        for _ in 0..DRAIN_FRAMES {
            if self.conn.is_none() {
                return;
            }
            match futures::Stream::poll_next(Pin::new(&mut *self), &mut cx) {
                Poll::Ready(Some(Ok(_))) => {}
                _ => return,
            }
        }
    }
}

impl futures::Stream for Body {
    type Item = Result<Bytes, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Poll::Ready(item) = this.poll_body(cx) {
            return Poll::Ready(item);
        }
        let Some(conn) = this.conn.as_mut() else { return Poll::Pending };
        match conn.drive(cx) {
            // It decoded what it could: the next frame, if it had one.
            Poll::Pending => this.poll_body(cx),
            // Over: the body has ended, or failed, by now.
            Poll::Ready(Ok(())) => {
                let item = this.poll_body(cx);
                this.conn = None;
                item
            }
            Poll::Ready(Err(e)) => {
                this.conn = None;
                Poll::Ready(Some(Err(Error::transfer(format!("the answer broke off: {}", error_chain(&e))))))
            }
        }
    }
}
