//! The floor the latency benchmark holds `serve`'s CPU against: a process that relays what it
//! reads on its first accepted connection to its second, on the runtime `serve` runs on
//! (multi-thread, one worker). A frame in is one wake-up, one read and one write, what any
//! server streaming tokens through itself pays per frame on this host before doing any work.
//!
//! Prints the port it listens on (loopback), then relays pairs of connections until killed.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("the runtime starts");
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        println!("{}", listener.local_addr().expect("a bound address").port());
        loop {
            let (Ok((mut from, _)), Ok((mut to, _))) = (listener.accept().await, listener.accept().await)
            else {
                continue;
            };
            let _ = (from.set_nodelay(true), to.set_nodelay(true));
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                while let Ok(n @ 1..) = from.read(&mut buf).await {
                    if to.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
}
