//! Captures this test process's log lines (every level, every crate) in memory, so a test can
//! assert what an operator would read, and what must never be there.
//!
//! One subscriber serves the whole process (tracing allows one global default); tests that run
//! at the same time share it, so a test asserts on lines it can recognise (or on the absence of
//! a secret anywhere).

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// The captured log text.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    /// Everything logged so far.
    pub fn contents(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log lock")).into_owned()
    }

    /// The captured lines that contain `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        self.contents().lines().filter(|l| l.contains(needle)).map(str::to_owned).collect()
    }
}

impl Write for LogCapture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log lock").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Starts capturing (once per process) and returns the capture.
pub fn capture() -> LogCapture {
    static CAPTURE: OnceLock<LogCapture> = OnceLock::new();
    CAPTURE
        .get_or_init(|| {
            let capture = LogCapture::default();
            let writer = capture.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::TRACE)
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .finish();
            tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber");
            capture
        })
        .clone()
}
