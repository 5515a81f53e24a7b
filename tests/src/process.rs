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

/// User plus system CPU time of this process (what a benchmark compares between variants), to
/// the microsecond (`getrusage`; `/proc/self/stat` counts whole 10 ms ticks). Threads that have
/// exited are counted.
pub fn process_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    use nix::sys::time::TimeValLike;
    let Ok(usage) = getrusage(UsageWho::RUSAGE_SELF) else { return Duration::ZERO };
    let micros = usage.user_time().num_microseconds() + usage.system_time().num_microseconds();
    Duration::from_micros(u64::try_from(micros).unwrap_or(0))
}
