//! The settings every outgoing HTTP client shares (model servers, Forethought, remote agents over
//! HTTP): a connect timeout, no Nagle delay, and a bounded idle pool. One place, so every client
//! behaves the same under a burst.

/// Idle connections an HTTP client keeps per host. Enough for the steady concurrency of a
/// `serve` process to reuse warm (TLS) connections; a burst beyond it closes its extra
/// connections as they go idle instead of holding their buffers for the pool's idle timeout.
pub const MAX_IDLE_CONNECTIONS_PER_HOST: usize = 32;

/// How long an idle pooled connection is kept.
pub const IDLE_CONNECTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The HTTP client settings every outgoing client shares (model servers, Forethought): the
/// connect timeout, no Nagle delay (small SSE frames and requests go at once) and a bounded
/// idle pool ([`MAX_IDLE_CONNECTIONS_PER_HOST`], [`IDLE_CONNECTION_TIMEOUT`]).
pub fn pooled_client(connect_timeout: std::time::Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .pool_max_idle_per_host(MAX_IDLE_CONNECTIONS_PER_HOST)
        .pool_idle_timeout(IDLE_CONNECTION_TIMEOUT)
}
