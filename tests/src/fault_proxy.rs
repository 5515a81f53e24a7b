//! A TCP proxy on loopback that injects network faults between a client and the server behind
//! it (moto_server for the store tests), so the server keeps its data while the client meets
//! the fault:
//!
//! | [`Fault`] | new connections | open connections |
//! |---|---|---|
//! | `Pass` | forwarded | bytes forwarded |
//! | `BlackHole` | accepted, never answered | bytes swallowed both ways |
//! | `Slow(d)` | forwarded | each chunk held `d` first |
//! | `Reset` | reset at once (RST) | reset |
//! | `Refuse` | closed at once | closed |
//!
//! A fault applies from the next byte: a client's pooled connections meet it too, as they
//! would a real outage.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// What the proxy does to traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything.
    Pass,
    /// Accept connections and never answer: every byte is swallowed.
    BlackHole,
    /// Forward each chunk after this delay.
    Slow(Duration),
    /// Reset every connection (TCP RST).
    Reset,
    /// Close every connection at once, as a stopped server's port would.
    Refuse,
}

/// The proxy; it stops, cutting its connections, when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    fault: watch::Sender<Fault>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Forwards `127.0.0.1:<free port>` to `target` (`host:port`), passing traffic.
    pub async fn start(target: &str) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let (fault, watch) = watch::channel(Fault::Pass);
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let accepted = Arc::new(AtomicUsize::new(0));
        let target = target.to_owned();
        let task = {
            let (connections, accepted) = (connections.clone(), accepted.clone());
            tokio::spawn(async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let fault = *watch.borrow();
                    if fault == Fault::Refuse {
                        // Closed at once (FIN).
                        continue;
                    }
                    // Dropping the socket now resets it instead of closing it gracefully; the
                    // proxy only drops a socket both sides have finished with, or to reset it.
                    let _ = inbound.set_zero_linger();
                    if fault == Fault::Reset {
                        continue;
                    }
                    let connection = tokio::spawn(connect(inbound, target.clone(), watch.clone()));
                    let mut open = connections.lock().expect("lock");
                    open.retain(|c| !c.is_finished());
                    open.push(connection.abort_handle());
                }
            })
        };
        FaultProxy { addr, fault, connections, accepted, task }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Switches to `fault`; a reset or refusal cuts the open connections at once.
    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
        if matches!(fault, Fault::Reset | Fault::Refuse) {
            for connection in self.connections.lock().expect("lock").drain(..) {
                connection.abort();
            }
        }
    }

    /// Takes the proxy down ([`Fault::Refuse`]) or brings it back ([`Fault::Pass`]).
    pub fn set_up(&self, up: bool) {
        self.set(if up { Fault::Pass } else { Fault::Refuse });
    }

    /// How many connections clients have opened so far.
    pub fn connections_accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.set(Fault::Refuse);
        self.task.abort();
    }
}

/// One client connection: to the target, then both directions pumped under the fault.
async fn connect(inbound: TcpStream, target: String, fault: watch::Receiver<Fault>) {
    if *fault.borrow() == Fault::BlackHole {
        // Accepted, never answered: read and drop whatever comes until the client gives up.
        swallow(inbound).await;
        return;
    }
    let Ok(outbound) = TcpStream::connect(&target).await else { return };
    let _ = outbound.set_nodelay(true);
    let (client_read, client_write) = inbound.into_split();
    let (server_read, server_write) = outbound.into_split();
    // The halves are dropped together once both directions are over (or the connection task
    // is aborted by a reset), with zero linger on the client's side.
    tokio::join!(pump(client_read, server_write, fault.clone()), pump(server_read, client_write, fault));
}

async fn swallow(mut stream: TcpStream) {
    let mut buffer = [0u8; 4096];
    while matches!(stream.read(&mut buffer).await, Ok(n) if n > 0) {}
}

/// Copies `from` to `to` under the current fault until EOF, an error, or a reset.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, fault: watch::Receiver<Fault>) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        let now = *fault.borrow();
        match now {
            Fault::Pass => {}
            Fault::Slow(delay) => tokio::time::sleep(delay).await,
            Fault::BlackHole => continue,
            Fault::Reset | Fault::Refuse => return,
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}
