//! Two local processes on one embedded store file: the second waits for the file (bounded, and
//! says so) instead of failing at once.

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use baton::store::SystemClock;
use baton::store::embedded::EmbeddedStore;

fn chat(store: &std::path::Path, message: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
    for var in
        ["OPENAI_API_KEY", "OPENAI_BASE_URL", "FORETHOUGHT_API_TOKEN", "FORETHOUGHT_BASE_URL", "BATON_TABLE"]
    {
        c.env_remove(var);
    }
    c.env("BATON_STORE_PATH", store).args(["chat", message]);
    c
}

fn run(mut command: Command) -> std::process::Child {
    command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn succeeded(out: &Output) -> bool {
    out.status.success() && !out.stdout.is_empty()
}

#[test]
fn a_chat_waits_for_a_store_file_another_process_holds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let held = EmbeddedStore::open(&path, Arc::new(SystemClock)).unwrap();
    let mut child = run(chat(&path, "hi"));
    // The file is held until the child says it waits for it (or 30 s pass): on a loaded machine
    // the child may reach the file later than any fixed pause.
    let (lines, said) = std::sync::mpsc::channel();
    let reader = std::io::BufReader::new(child.stderr.take().unwrap());
    let stderr = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufRead::lines(reader).map_while(Result::ok) {
            let _ = lines.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while let Ok(line) = said.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
        if line.contains("in use by another process; waiting") {
            break;
        }
    }
    drop(held);
    let out = child.wait_with_output().unwrap();
    let stderr = stderr.join().unwrap();
    assert!(succeeded(&out), "{stderr}");
    assert!(stderr.contains("in use by another process; waiting"), "it said why it waited: {stderr}");
}

#[test]
fn two_chats_at_once_on_one_store_both_answer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let (first, second) = (run(chat(&path, "hello")), run(chat(&path, "find me coffee deals")));
    let (first, second) = (first.wait_with_output().unwrap(), second.wait_with_output().unwrap());
    assert!(succeeded(&first), "{}", String::from_utf8_lossy(&first.stderr));
    assert!(succeeded(&second), "{}", String::from_utf8_lossy(&second.stderr));
}
