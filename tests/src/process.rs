//! `orchestrator serve` as a child process on a fresh embedded store, as the benchmarks run it.

use std::path::Path;
use std::time::{Duration, Instant};

/// A running `orchestrator serve` (killed when dropped), its address, and how long it took to
/// print `listening on …` after the exec.
pub struct ServeProcess {
    /// The process.
    pub child: tokio::process::Child,
    /// The chat endpoint's base URL.
    pub url: String,
    /// Its process id.
    pub pid: u32,
    /// Exec → `listening on …`.
    pub ready: Duration,
    _store: tempfile::TempDir,
}

impl ServeProcess {
    /// Starts `binary serve` on a free loopback port with a fresh embedded store, the cloud and
    /// model settings of this process's environment removed, then `env` applied.
    pub async fn start(binary: &Path, env: &[(&str, String)]) -> ServeProcess {
        use tokio::io::AsyncBufReadExt;
        let store = tempfile::tempdir().expect("a temporary directory");
        let started = Instant::now();
        let mut command = tokio::process::Command::new(binary);
        command
            .args(["serve", "--addr", "127.0.0.1:0"])
            .env("BATON_STORE_PATH", store.path().join("store.redb"))
            .env_remove("BATON_TABLE")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_API_KEY")
            .env_remove("FORETHOUGHT_API_TOKEN")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("serve starts");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        tokio::io::BufReader::new(stdout).read_line(&mut line).await.expect("serve prints its address");
        let ready = started.elapsed();
        let url = line.trim().strip_prefix("listening on ").expect("serve prints its address").to_owned();
        let pid = child.id().expect("a running process");
        ServeProcess { child, url, pid, ready, _store: store }
    }
}

/// User plus system CPU time of this process (what a benchmark compares between variants).
pub fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(") ").next().unwrap_or("").split_whitespace().collect();
    let ticks: u64 = fields.get(11..13).map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum());
    Duration::from_millis(ticks * 10) // USER_HZ is 100 on Linux
}
