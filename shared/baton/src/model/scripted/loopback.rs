//! The loopback plumbing the scripted test servers share: a router served on `127.0.0.1:0`
//! (cleartext or TLS with a self-signed certificate), and response bodies paced frame by frame.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use tokio::sync::Semaphore;

/// A router served on `127.0.0.1:0` until dropped; the base of the scripted servers.
pub struct LoopbackServer {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Connections accepted so far.
    connections: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
    /// The certificate a client must trust, when the server speaks TLS.
    tls: Option<Arc<TestCertificate>>,
}

/// A self-signed certificate for `localhost` and `127.0.0.1`, made when a TLS server starts: the
/// PEM a client trusts (`SSL_CERT_FILE` for Baton's reqwest client), and the server's rustls
/// configuration, offering HTTP/2 and HTTP/1.1 (ALPN) as a model vendor's endpoint does.
pub struct TestCertificate {
    pem: String,
    config: Arc<tokio_rustls::rustls::ServerConfig>,
}

impl TestCertificate {
    fn generate() -> TestCertificate {
        let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
        let certified = rcgen::generate_simple_self_signed(names).expect("a self-signed certificate");
        let key = tokio_rustls::rustls::pki_types::PrivateKeyDer::Pkcs8(
            certified.signing_key.serialize_der().into(),
        );
        let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
        let mut config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS 1.2 and 1.3")
            .with_no_client_auth()
            .with_single_cert(vec![certified.cert.der().clone()], key)
            .expect("the certificate matches its key");
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        TestCertificate { pem: certified.cert.pem(), config: Arc::new(config) }
    }

    /// The certificate, PEM-encoded: what a client must trust.
    pub fn pem(&self) -> &str {
        &self.pem
    }
}

impl LoopbackServer {
    /// Serves `app` on a free loopback port, over cleartext HTTP.
    pub async fn start(app: axum::Router) -> std::io::Result<LoopbackServer> {
        LoopbackServer::start_with(app, None).await
    }

    /// Serves `app` on a free loopback port over TLS, with a new self-signed certificate.
    pub async fn start_tls(app: axum::Router) -> std::io::Result<LoopbackServer> {
        LoopbackServer::start_with(app, Some(Arc::new(TestCertificate::generate()))).await
    }

    async fn start_with(
        app: axum::Router,
        tls: Option<Arc<TestCertificate>>,
    ) -> std::io::Result<LoopbackServer> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = connections.clone();
        let acceptor = tls.as_ref().map(|t| tokio_rustls::TlsAcceptor::from(t.config.clone()));
        let task = tokio::spawn(async move {
            // The server only ends with the process or when the handle is dropped (aborted),
            // which drops the connections' tasks with it. `TCP_NODELAY` like `serve`'s own
            // sockets: small SSE frames must not wait for the client's delayed ACK. HTTP/1.1,
            // and HTTP/2 from a client that starts with it (h2c, or h2 by ALPN over TLS), with
            // no cap on concurrent streams: hyper's default (200) made 1,000 streams over h2c
            // queue behind each other.
            let mut http = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            http.http2().max_concurrent_streams(None);
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let _ = stream.set_nodelay(true);
                let service = hyper_util::service::TowerToHyperService::new(app.clone());
                let http = http.clone();
                match acceptor.clone() {
                    None => {
                        connections.spawn(async move {
                            let io = hyper_util::rt::TokioIo::new(stream);
                            let _ = http.serve_connection_with_upgrades(io, service).await;
                        });
                    }
                    Some(acceptor) => {
                        // The handshake runs in the connection's task, not in the accept loop.
                        connections.spawn(async move {
                            let Ok(stream) = acceptor.accept(stream).await else { return };
                            let io = hyper_util::rt::TokioIo::new(stream);
                            let _ = http.serve_connection_with_upgrades(io, service).await;
                        });
                    }
                }
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(LoopbackServer { addr, connections, task, tls })
    }

    /// `http://127.0.0.1:PORT`, or `https://localhost:PORT` over TLS (the name the certificate
    /// carries, as a vendor's URL names its host).
    pub fn origin(&self) -> String {
        match self.tls {
            None => format!("http://{}", self.addr),
            Some(_) => format!("https://localhost:{}", self.addr.port()),
        }
    }

    /// The certificate a client must trust, when the server speaks TLS.
    pub fn certificate(&self) -> Option<&TestCertificate> {
        self.tls.as_deref()
    }

    /// The connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for LoopbackServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How a scripted body sends its frames.
pub struct Pacing {
    /// Delay before each frame after the first.
    pub chunk_delay: Duration,
    /// Abort the connection before frame `n`.
    pub cut_after: Option<usize>,
    /// Go silent before frame `n`, keeping the connection open.
    pub stall_after: Option<usize>,
    /// Hold frame `n` until the semaphore has a permit.
    pub gate: Option<(usize, Arc<Semaphore>)>,
    /// Keep the delays exactly ([`wait_until`]).
    pub exact: bool,
}

/// Waits until `deadline`. Tokio's timer counts whole milliseconds and wakes up to one late
/// (a zero delay too: its deadline rounds up to the next tick); with `exact`, it only sleeps to two
/// milliseconds before the deadline and an OS thread on the blocking pool sleeps the rest, which
/// wakes within about a tenth of a millisecond, and a deadline already past does not wait.
pub async fn wait_until(deadline: tokio::time::Instant, exact: bool) {
    if !exact {
        return tokio::time::sleep_until(deadline).await;
    }
    if let Some(coarse) =
        deadline.checked_sub(Duration::from_millis(2)).filter(|c| *c > tokio::time::Instant::now())
    {
        tokio::time::sleep_until(coarse).await;
    }
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    if !left.is_zero() {
        // Only a panic in `sleep` could fail the join; the wait is over either way.
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(left)).await;
    }
}

/// Calls its function with whether the body was sent whole when it is dropped.
struct OnEnd<F: FnOnce(bool)> {
    f: Option<F>,
    completed: bool,
}

impl<F: FnOnce(bool)> Drop for OnEnd<F> {
    fn drop(&mut self) {
        if let Some(f) = self.f.take() {
            f(self.completed);
        }
    }
}

/// A scripted response body: `frames` paced by `pacing`, then `trailer`. `on_frame(i)` runs as
/// frame `i` goes out; `on_end(true)` once every frame was sent, `on_end(false)` if the body was
/// dropped first (the client went away) or cut.
pub fn paced_body(
    frames: Vec<Bytes>,
    trailer: Option<Bytes>,
    pacing: Pacing,
    mut on_frame: impl FnMut(usize) + Send + 'static,
    on_end: impl FnOnce(bool) + Send + 'static,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    async_stream::stream! {
        let mut end = OnEnd { f: Some(on_end), completed: false };
        let start = tokio::time::Instant::now();
        for (i, frame) in frames.into_iter().enumerate() {
            // The delay comes first, so frames sent before a cut have been flushed to the client
            // (a body error drops whatever the server still had buffered). Frame `i` is due at
            // `start + i × chunk_delay`, not `chunk_delay` after the previous one: a timer wakes up
            // to a millisecond late, and relative sleeps would add that up over a long stream.
            if i > 0 && !pacing.chunk_delay.is_zero() {
                let due = pacing.chunk_delay.saturating_mul(u32::try_from(i).unwrap_or(u32::MAX));
                wait_until(start + due, pacing.exact).await;
            }
            if let Some((n, gate)) = &pacing.gate {
                if *n == i {
                    // A closed gate releases everyone; it is not an error.
                    drop(gate.acquire().await);
                }
            }
            if pacing.cut_after == Some(i) {
                // On a loaded machine the frames before the cut can all fall due at once, and
                // the abort would then drop them from the server's buffer before they were
                // written: the cut always waits, relative to now, for the connection to flush.
                tokio::time::sleep(pacing.chunk_delay.max(Duration::from_millis(10))).await;
                yield Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "scripted cut"));
                return;
            }
            if pacing.stall_after == Some(i) {
                std::future::pending::<()>().await;
            }
            on_frame(i);
            yield Ok(frame);
        }
        end.completed = true;
        if let Some(trailer) = trailer {
            yield Ok(trailer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn exact_waits_end_at_or_after_their_deadline() {
        // A scripted frame must never go out early: the benchmark's ideal is a lower bound.
        for (exact, after) in [(true, 0), (true, 1), (true, 3), (false, 3), (true, 7)] {
            let deadline = tokio::time::Instant::now() + Duration::from_micros(after * 700);
            wait_until(deadline, exact).await;
            assert!(tokio::time::Instant::now() >= deadline, "woke early (exact: {exact}, {after})");
        }
    }
}
