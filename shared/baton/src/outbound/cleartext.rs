//! HTTP/1.1 over cleartext TCP: a connection is a socket and one read buffer, driven by whoever
//! waits on it (the request future until the response head, then the response body's own poll).
//! No task per connection.
//!
//! # Why not hyper's client connection
//! Through reqwest, hyper's connection task decodes one chunk of a chunked body and hands it over
//! through a one-slot channel: each token of a streamed answer was a switch between two tasks
//! (docs/benchmarks.md, "Where a turn's CPU goes"). Driving hyper's `client::conn::http1`
//! connection inside the body's poll removed the switch, but each such connection still held
//! about 26 KB for its whole life, none of it configurable: an 8 KiB read buffer, an 8 KiB buffer
//! for request heads, and the request channel's first block (9.5 KB). A turn has two model calls
//! in flight at its peak, so that was half of a stream's memory (docs/benchmarks.md, "Memory per
//! stream"). Here a connection holds its socket and, while bytes are coming in, one read buffer
//! of [`READ_BYTES`]: an answer waiting for its next frame, and a connection idle in the pool,
//! hold none.
//!
//! The response head is parsed by `httparse` (hyper's own parser); the body's framing (length,
//! chunked, or until the server closes) follows RFC 9112 §6.3, decoded here from the bytes
//! already read: a read's frames are handed over in one go, with no wait in between.
//!
//! # The pool
//! A connection is kept once its answer was read to the end, keyed by `host:port`, if the answer
//! allows it (HTTP/1.1, no `connection: close`, a body with a known end). An idle connection is
//! not polled: one the server closed meanwhile is found closed when it is taken out and dropped,
//! and one that the server closes while a request is on its way (the classic keep-alive race)
//! fails that request before any answer, which is then sent once more on a new connection.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::{Error, IDLE_CONNECTION_TIMEOUT, MAX_IDLE_CONNECTIONS_PER_HOST};

/// What a connection reads at a time: its buffer while it is busy. Frames of a streamed answer
/// are a few hundred bytes; a larger body is read in several goes.
const READ_BYTES: usize = 4096;

/// The largest response head accepted.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The most header fields a response head may have.
const MAX_HEADERS: usize = 100;

/// The longest chunk-size line (with its extensions) and the largest trailer section accepted.
const MAX_LINE_BYTES: usize = 4096;

/// One HTTP/1.1 connection.
struct Conn {
    io: TcpStream,
    /// Bytes read and not decoded yet. No allocation while it is empty and nothing is coming.
    buf: BytesMut,
}

impl Conn {
    /// Reads what the socket has into the buffer: `Ready(Ok(0))` at the end of the stream.
    ///
    /// The buffer is taken when bytes are there to read, and given back when it is empty and
    /// the socket has nothing more: a streamed answer waiting for its next frame holds none.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        loop {
            ready!(self.io.poll_read_ready(cx))?;
            self.make_room();
            match self.io.try_read_buf(&mut self.buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if self.buf.is_empty() {
                        self.buf = BytesMut::new();
                    }
                }
                read => return Poll::Ready(read),
            }
        }
    }

    /// Reads what the socket has now, without waiting: `None` if nothing came yet.
    fn try_fill(&mut self) -> std::io::Result<Option<usize>> {
        self.make_room();
        match self.io.try_read_buf(&mut self.buf) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(None),
            read => read.map(Some),
        }
    }

    fn make_room(&mut self) {
        if self.buf.capacity() - self.buf.len() < READ_BYTES / 4 {
            self.buf.reserve(READ_BYTES);
        }
    }

    /// Whether an idle connection can take another request: the server neither closed it nor
    /// sent anything since its last answer.
    fn reusable(&self) -> bool {
        let mut probe = [0u8; 1];
        matches!(self.io.try_read(&mut probe), Err(e) if e.kind() == ErrorKind::WouldBlock)
    }

    /// Sends `request` (head and body) and reads the response head.
    async fn exchange(&mut self, request: &[u8], no_body: bool) -> Result<Head, Failed> {
        if let Err(e) = self.io.write_all(request).await {
            return Err(Failed::Unanswered(format!("sending the request: {e}")));
        }
        let mut answered = false;
        std::future::poll_fn(|cx| {
            loop {
                if !self.buf.is_empty() {
                    answered = true;
                    match parse_head(&self.buf, no_body).map_err(Failed::Invalid)? {
                        Some((head, len)) => {
                            self.buf.advance(len);
                            if head.status == StatusCode::SWITCHING_PROTOCOLS {
                                return Poll::Ready(Err(Failed::Invalid(
                                    "the server switched protocols".into(),
                                )));
                            }
                            // An interim answer (`100 Continue`, `103 Early Hints`): the real one follows.
                            if head.status.is_informational() {
                                continue;
                            }
                            return Poll::Ready(Ok(head));
                        }
                        None if self.buf.len() > MAX_HEAD_BYTES => {
                            return Poll::Ready(Err(Failed::Invalid(format!(
                                "the response head is over {MAX_HEAD_BYTES} bytes"
                            ))));
                        }
                        None => {}
                    }
                }
                match ready!(self.poll_fill(cx)) {
                    Ok(0) if answered => {
                        return Poll::Ready(Err(Failed::Invalid(
                            "the connection closed in the response head".into(),
                        )));
                    }
                    Ok(0) => {
                        return Poll::Ready(Err(Failed::Unanswered(
                            "the connection closed before an answer".into(),
                        )));
                    }
                    Ok(_) => {}
                    Err(e) if answered => return Poll::Ready(Err(Failed::Invalid(e.to_string()))),
                    Err(e) => return Poll::Ready(Err(Failed::Unanswered(e.to_string()))),
                }
            }
        })
        .await
    }
}

/// Why an exchange got no response head.
#[derive(Debug)]
enum Failed {
    /// Nothing came back (closed, reset): the request can go again on a new connection.
    Unanswered(String),
    /// An answer started and broke, or is not HTTP/1.1.
    Invalid(String),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Unanswered(e) | Failed::Invalid(e) => f.write_str(e),
        }
    }
}

/// A response head: status, headers, how its body ends, and whether the connection can be kept.
struct Head {
    status: StatusCode,
    headers: HeaderMap,
    framing: Framing,
    keep_alive: bool,
}

/// Parses a response head from the start of `buf`: `None` if it is not all there yet, else the
/// head and its length. `no_body`: the request was a `HEAD`.
fn parse_head(buf: &[u8], no_body: bool) -> Result<Option<(Head, usize)>, String> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut fields);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("the response head is malformed ({e})")),
    };
    let code = response.code.unwrap_or_default();
    let status = StatusCode::from_u16(code).map_err(|_| format!("the status {code} is not valid"))?;
    let version = if response.version == Some(1) { http::Version::HTTP_11 } else { http::Version::HTTP_10 };
    let mut headers = HeaderMap::with_capacity(response.headers.len());
    for field in response.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| format!("the header name {:?} is not valid", field.name))?;
        let value = HeaderValue::from_bytes(field.value)
            .map_err(|_| format!("the value of the header {name} is not valid"))?;
        headers.append(name, value);
    }
    let (framing, definite) = framing(status, no_body, &headers)?;
    let closes = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close"))));
    let keep_alive = definite && version == http::Version::HTTP_11 && !closes;
    Ok(Some((Head { status, headers, framing, keep_alive }, len)))
}

/// How a response's body ends (RFC 9112 §6.3), and whether that end is unambiguous enough to
/// keep the connection after it.
fn framing(status: StatusCode, no_body: bool, headers: &HeaderMap) -> Result<(Framing, bool), String> {
    if no_body
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok((Framing::Length(0), true));
    }
    let content_length = headers.get_all(http::header::CONTENT_LENGTH);
    if let Some(coding) = headers.get_all(http::header::TRANSFER_ENCODING).iter().next_back() {
        let last = coding.to_str().ok().and_then(|v| v.rsplit(',').next()).map(str::trim);
        if last.is_some_and(|c| c.eq_ignore_ascii_case("chunked")) {
            // A length beside a transfer coding is ignored, and the connection not trusted after.
            return Ok((Framing::Chunked(Chunked::Size), content_length.iter().next().is_none()));
        }
        return Ok((Framing::Close, false));
    }
    let mut length = None;
    for value in content_length.iter() {
        for part in value.to_str().unwrap_or("x").split(',') {
            let part = part.trim();
            let n = (!part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
                .then(|| part.parse::<u64>().ok())
                .flatten()
                .ok_or_else(|| format!("the content-length {value:?} is not valid"))?;
            if length.is_some_and(|l| l != n) {
                return Err("the response has two different content-lengths".into());
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(n) => (Framing::Length(n), true),
        None => (Framing::Close, false),
    })
}

/// How much of a body is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// This many bytes.
    Length(u64),
    /// Chunked, at this point of the framing.
    Chunked(Chunked),
    /// Everything until the server closes the connection.
    Close,
    /// Read to its end.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunked {
    /// A chunk-size line next.
    Size,
    /// This many bytes of chunk data next.
    Data(u64),
    /// The CRLF after a chunk's data next.
    DataEnd,
    /// Trailer fields (this many bytes of them so far), up to an empty line.
    Trailers(usize),
}

impl Framing {
    /// Decodes from `buf` the next piece of body data it holds, or moves on to the end: `None`
    /// when more bytes are needed or the body is [`Framing::Done`].
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, String> {
        loop {
            match *self {
                Framing::Done => return Ok(None),
                Framing::Length(0) => *self = Framing::Done,
                Framing::Length(left) => {
                    if buf.is_empty() {
                        return Ok(None);
                    }
                    let take = left.min(buf.len() as u64);
                    *self = Framing::Length(left - take);
                    return Ok(Some(buf.split_to(take as usize).freeze()));
                }
                Framing::Close => {
                    return Ok((!buf.is_empty()).then(|| buf.split().freeze()));
                }
                Framing::Chunked(Chunked::Data(left)) => {
                    if buf.is_empty() {
                        return Ok(None);
                    }
                    let take = left.min(buf.len() as u64);
                    *self = if take == left {
                        Framing::Chunked(Chunked::DataEnd)
                    } else {
                        Framing::Chunked(Chunked::Data(left - take))
                    };
                    return Ok(Some(buf.split_to(take as usize).freeze()));
                }
                Framing::Chunked(Chunked::DataEnd) => {
                    let Some(line) = take_line(buf, MAX_LINE_BYTES)? else { return Ok(None) };
                    if !line.is_empty() {
                        return Err("a chunk is longer than its size".into());
                    }
                    *self = Framing::Chunked(Chunked::Size);
                }
                Framing::Chunked(Chunked::Size) => {
                    let Some(line) = take_line(buf, MAX_LINE_BYTES)? else { return Ok(None) };
                    let digits = line[..].split(|&b| b == b';').next().unwrap_or_default().trim_ascii();
                    let size = std::str::from_utf8(digits)
                        .ok()
                        .filter(|d| !d.is_empty() && d.len() <= 15)
                        .and_then(|d| u64::from_str_radix(d, 16).ok())
                        .ok_or("a chunk size is not valid")?;
                    *self =
                        Framing::Chunked(if size == 0 { Chunked::Trailers(0) } else { Chunked::Data(size) });
                }
                Framing::Chunked(Chunked::Trailers(seen)) => {
                    let Some(line) = take_line(buf, MAX_LINE_BYTES.saturating_sub(seen))? else {
                        return Ok(None);
                    };
                    *self = if line.is_empty() {
                        Framing::Done
                    } else {
                        Framing::Chunked(Chunked::Trailers(seen + line.len() + 2))
                    };
                }
            }
        }
    }
}

/// The next line of `buf` (up to LF, without its CR LF), taken out of it; `None` if the line is
/// not all there yet. A line longer than `max` is an error.
fn take_line(buf: &mut BytesMut, max: usize) -> Result<Option<BytesMut>, String> {
    match buf.iter().position(|&b| b == b'\n') {
        Some(end) if end <= max => {
            let mut line = buf.split_to(end + 1);
            line.truncate(end);
            if line.last() == Some(&b'\r') {
                line.truncate(end - 1);
            }
            Ok(Some(line))
        }
        Some(_) => Err("a chunk framing line is too long".into()),
        None if buf.len() > max => Err("a chunk framing line is too long".into()),
        None => Ok(None),
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
        let body = match request.body() {
            None => &[][..],
            Some(body) => body.as_bytes().ok_or_else(|| {
                Error::transfer("a streamed request body cannot be sent over cleartext HTTP/1.1".into())
            })?,
        };
        let wire = request_bytes(&request, body);
        let no_body = request.method() == http::Method::HEAD;
        let (mut conn, reused) = match self.checkout(&key) {
            Some(conn) => (conn, true),
            None => (self.connect(&key).await?, false),
        };
        let head = match conn.exchange(&wire, no_body).await {
            // The server closed the idle connection as the request went out: no answer came, so
            // send it once more, on a new connection.
            Err(Failed::Unanswered(_)) if reused => {
                conn = self.connect(&key).await?;
                conn.exchange(&wire, no_body).await
            }
            other => other,
        }
        .map_err(|e| Error::transfer(format!("request to {url} failed: {e}")))?;
        let Head { status, headers, framing, keep_alive } = head;
        let body = Body { conn: Some(conn), framing, keep_alive, pool: self.clone(), key };
        let mut response = http::Response::new(body);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Ok(response)
    }

    /// A new connection to `key` (`host:port`), within the connect timeout.
    async fn connect(&self, key: &str) -> Result<Conn, Error> {
        let io = match tokio::time::timeout(self.connect_timeout, TcpStream::connect(key)).await {
            Err(_) => {
                return Err(Error::connect_timeout(format!(
                    "connecting to {key} took over {} ms",
                    self.connect_timeout.as_millis()
                )));
            }
            Ok(Err(e)) => return Err(Error::connect(format!("connecting to {key}: {e}"))),
            Ok(Ok(io)) => io,
        };
        // Small requests and frames go at once.
        let _ = io.set_nodelay(true);
        Ok(Conn { io, buf: BytesMut::new() })
    }

    /// The most recently idle connection to `key` that is still open, if any.
    fn checkout(&self, key: &str) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.get_mut(key)?;
        while let Some((conn, since)) = list.pop() {
            if since.elapsed() < IDLE_CONNECTION_TIMEOUT && conn.reusable() {
                return Some(conn);
            }
        }
        None
    }

    /// Keeps `conn` for the next request to `key`. Whether the server closed it or sent more
    /// meanwhile is checked when it is taken out ([`Pool::checkout`]), not here as well: that
    /// would be one more `recv` per call.
    fn check_in(&self, key: &str, mut conn: Conn) {
        // Bytes after the answer's end: the server is not speaking HTTP/1.1 as we understand it.
        if !conn.buf.is_empty() {
            return;
        }
        conn.buf = BytesMut::new();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.entry(key.to_owned()).or_default();
        list.retain(|(_, since)| since.elapsed() < IDLE_CONNECTION_TIMEOUT);
        if list.len() >= MAX_IDLE_CONNECTIONS_PER_HOST {
            list.remove(0);
        }
        list.push((conn, Instant::now()));
    }
}

/// The request's bytes on the wire: its line, `host`, its headers, `content-length`, its body.
fn request_bytes(request: &reqwest::Request, body: &[u8]) -> Vec<u8> {
    let url = request.url();
    let mut wire = Vec::with_capacity(256 + body.len());
    wire.extend_from_slice(request.method().as_str().as_bytes());
    wire.push(b' ');
    wire.extend_from_slice(url.path().as_bytes());
    if let Some(query) = url.query() {
        wire.push(b'?');
        wire.extend_from_slice(query.as_bytes());
    }
    wire.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    wire.extend_from_slice(url.host_str().unwrap_or_default().as_bytes());
    if let Some(port) = url.port() {
        wire.extend_from_slice(format!(":{port}").as_bytes());
    }
    wire.extend_from_slice(b"\r\n");
    for (name, value) in request.headers() {
        if matches!(
            *name,
            http::header::HOST | http::header::CONTENT_LENGTH | http::header::TRANSFER_ENCODING
        ) {
            continue;
        }
        wire.extend_from_slice(name.as_str().as_bytes());
        wire.extend_from_slice(b": ");
        wire.extend_from_slice(value.as_bytes());
        wire.extend_from_slice(b"\r\n");
    }
    let bodiless = matches!(*request.method(), http::Method::GET | http::Method::HEAD | http::Method::DELETE);
    if !body.is_empty() || !bodiless {
        wire.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    }
    wire.extend_from_slice(b"\r\n");
    wire.extend_from_slice(body);
    wire
}

/// A response body whose connection is driven by its own poll; the connection goes back to the
/// pool once the body was read to the end (if its answer allows), and is closed if the body is
/// dropped before.
pub(super) struct Body {
    /// `None` once the body ended or failed.
    conn: Option<Conn>,
    framing: Framing,
    keep_alive: bool,
    pool: Arc<Pool>,
    key: String,
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("cleartext::Body").field("key", &self.key).finish_non_exhaustive()
    }
}

impl Body {
    /// The body ended: its connection goes back to the pool if the answer allows.
    fn finish(&mut self) {
        if let Some(conn) = self.conn.take()
            && self.keep_alive
        {
            self.pool.check_in(&self.key, conn);
        }
    }

    fn broke_off(&mut self, reason: impl std::fmt::Display) -> Poll<Option<Result<Bytes, Error>>> {
        self.conn = None;
        Poll::Ready(Some(Err(Error::transfer(format!("the answer broke off: {reason}")))))
    }
}

/// Reads a dropped body makes to reach its end, if it is already here.
const DRAIN_READS: usize = 4;

impl Drop for Body {
    /// A caller stops reading once the answer says it is over (an SSE `[DONE]`), one chunk
    /// before the body's end: when that end is already here, it is read, so the connection goes
    /// back to the pool instead of closing. Nothing here waits.
    fn drop(&mut self) {
        if self.framing == Framing::Close {
            return;
        }
        let mut reads = 0;
        while let Some(conn) = self.conn.as_mut() {
            match self.framing.decode(&mut conn.buf) {
                Err(_) => return,
                Ok(Some(_)) => {}
                Ok(None) if self.framing == Framing::Done => return self.finish(),
                Ok(None) => {
                    reads += 1;
                    if reads > DRAIN_READS || !matches!(conn.try_fill(), Ok(Some(n)) if n > 0) {
                        return;
                    }
                }
            }
        }
    }
}

impl futures::Stream for Body {
    type Item = Result<Bytes, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_mut() else { return Poll::Ready(None) };
            match this.framing.decode(&mut conn.buf) {
                Err(reason) => return this.broke_off(reason),
                Ok(Some(data)) => return Poll::Ready(Some(Ok(data))),
                Ok(None) if this.framing == Framing::Done => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(None) => {}
            }
            match ready!(conn.poll_fill(cx)) {
                Ok(0) if this.framing == Framing::Close => {
                    this.conn = None;
                    return Poll::Ready(None);
                }
                Ok(0) => return this.broke_off("the connection closed before the body's end"),
                Ok(_) => {}
                Err(e) => return this.broke_off(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(framing: &mut Framing, wire: &[u8]) -> Result<Vec<u8>, String> {
        let mut buf = BytesMut::from(wire);
        let mut out = Vec::new();
        while let Some(data) = framing.decode(&mut buf)? {
            out.extend_from_slice(&data);
        }
        Ok(out)
    }

    fn head(wire: &str) -> Result<Option<(Head, usize)>, String> {
        parse_head(wire.as_bytes(), false)
    }

    #[test]
    fn a_chunked_body_is_decoded_in_pieces_as_bytes_arrive() {
        let wire = b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\ntrailer: x\r\n\r\n";
        let mut framing = Framing::Chunked(Chunked::Size);
        assert_eq!(decode_all(&mut framing, wire).unwrap(), b"hello, world");
        assert_eq!(framing, Framing::Done);
        // Byte by byte: the same data, and the end only after the last CRLF.
        let mut framing = Framing::Chunked(Chunked::Size);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for (i, byte) in wire.iter().enumerate() {
            buf.extend_from_slice(&[*byte]);
            while let Some(data) = framing.decode(&mut buf).unwrap() {
                out.extend_from_slice(&data);
            }
            assert_eq!(framing == Framing::Done, i == wire.len() - 1, "at byte {i}");
        }
        assert_eq!(out, b"hello, world");
    }

    #[test]
    fn malformed_chunk_framing_is_an_error() {
        for wire in [&b"zz\r\nhello\r\n"[..], b"5\r\nhello world\r\n", b"\r\n", b"ffffffffffffffffff\r\n"] {
            let mut framing = Framing::Chunked(Chunked::Size);
            assert!(decode_all(&mut framing, wire).is_err(), "{:?}", String::from_utf8_lossy(wire));
        }
        let mut framing = Framing::Chunked(Chunked::Size);
        let endless = vec![b'1'; MAX_LINE_BYTES + 1];
        assert!(decode_all(&mut framing, &endless).is_err(), "a size line without an end is capped");
    }

    #[test]
    fn a_length_body_ends_at_its_length_and_leaves_what_follows() {
        let mut framing = Framing::Length(5);
        let mut buf = BytesMut::from(&b"hellonext"[..]);
        assert_eq!(&framing.decode(&mut buf).unwrap().unwrap()[..], b"hello");
        assert_eq!(framing.decode(&mut buf).unwrap(), None);
        assert_eq!(framing, Framing::Done);
        assert_eq!(&buf[..], b"next");
    }

    #[test]
    fn the_head_decides_the_framing_and_whether_the_connection_is_kept() {
        let (h, len) = head("HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc").unwrap().unwrap();
        assert_eq!((h.framing, h.keep_alive, len), (Framing::Length(3), true, 38));
        let (h, _) = head("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n").unwrap().unwrap();
        assert_eq!((h.framing, h.keep_alive), (Framing::Chunked(Chunked::Size), true));
        let (h, _) = head("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((h.framing, h.keep_alive), (Framing::Chunked(Chunked::Size), false));
        let (h, _) = head("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n").unwrap().unwrap();
        assert_eq!((h.framing, h.keep_alive), (Framing::Close, false));
        let (h, _) = head("HTTP/1.1 200 OK\r\n\r\n").unwrap().unwrap();
        assert_eq!((h.framing, h.keep_alive), (Framing::Close, false));
        let (h, _) = head("HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\ncontent-length: 0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!h.keep_alive);
        let (h, _) = head("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n").unwrap().unwrap();
        assert!(!h.keep_alive);
        let (h, _) = head("HTTP/1.1 204 No Content\r\n\r\n").unwrap().unwrap();
        assert_eq!((h.framing, h.keep_alive), (Framing::Length(0), true));
        let (h, _) = parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n", true).unwrap().unwrap();
        assert_eq!(h.framing, Framing::Length(0), "the answer to a HEAD has no body");
        assert!(head("HTTP/1.1 200 OK\r\ncontent-").unwrap().is_none(), "a partial head waits");
        assert!(head("HTTP/1.1 200 OK\r\ncontent-length: 3, 4\r\n\r\n").is_err());
        assert!(head("HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n").is_err());
        assert!(head("HTTP/1.1 200 OK\r\ncontent-length: +1\r\n\r\n").is_err());
        assert!(head("HTTP/1.1 2000 OK\r\n\r\n").is_err());
        assert!(head("SSH-2.0-OpenSSH\r\n\r\n").is_err());
        let (h, _) = head("HTTP/1.1 200 OK\r\ncontent-length: 3, 3\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.framing, Framing::Length(3), "repeated equal lengths are one length");
    }
}
