//! Durable turns (docs/durable-turns.md): a turn's client-facing events numbered and logged in
//! the store as they stream, so a client that loses its stream rejoins it (on this instance or
//! any other), a turn can keep running after its client leaves, and a stop works from anywhere.
//!
//! This room:
//! - `live`: the turns this process runs (`LiveTurns`): each one's events in memory, its end
//!   and its cancel token, for a resume that lands here and for the log writer;
//! - `writer`: a running turn's log writer, a task that copies its events to the store in
//!   batches, ends the log, and looks for a cancel asked on another instance;
//! - `record`: `record`, the producer: numbers a turn's events, hands them to the client and
//!   to memory, and keeps the turn running after the client leaves when asked to;
//! - `resume`: `follow`, the events of a turn after a cursor: replayed from memory or the
//!   store, then followed live until `completed`;
//! - `busy`: `BusyGate`, what a message does when its episode's turn runs (`on_busy`);
//! - `start`: [`Turns`], the one owner of a turn's life: a repeated request joined, the busy
//!   gate, the resume claim, the run, the live registration, the log writer and the record.

use std::time::Duration;

use serde::Deserialize;

mod busy;
mod live;
mod record;
mod resume;
mod start;
mod writer;

pub(crate) use busy::{Admission, BusyGate, BusyRefusal, ON_BUSY_VALUES};
pub use busy::{BUSY_LEASE, DEFAULT_QUEUE_LIMIT, OnBusy};
pub(crate) use live::{LiveTurn, LiveTurns};
pub(crate) use record::record;
pub(crate) use resume::{Cursor, ResumeLimits, follow};
pub(crate) use start::{Begun, LOG_END_GRACE, TurnError, TurnEvents};
pub use start::{OnApproval, TurnStart, Turns};
pub(crate) use writer::writer as log_writer;

/// What happens to a turn when its client leaves before `completed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DisconnectPolicy {
    /// The turn runs on to `completed`: its reply is recorded as it ends and its log holds every
    /// event, for the client to rejoin. The default: a dropped mobile connection or a reload
    /// loses nothing, and the turn is bounded by its deadline anyway.
    #[default]
    Continue,
    /// The turn stops at once: every model call and sub-agent is cancelled, and what was
    /// produced is saved as `partial`.
    Cancel,
}

impl std::str::FromStr for DisconnectPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<DisconnectPolicy, String> {
        match s {
            "continue" => Ok(DisconnectPolicy::Continue),
            "cancel" => Ok(DisconnectPolicy::Cancel),
            other => Err(format!("{other:?} is not a disconnect policy: \"continue\" or \"cancel\"")),
        }
    }
}

impl DisconnectPolicy {
    /// Its name in a request and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            DisconnectPolicy::Continue => "continue",
            DisconnectPolicy::Cancel => "cancel",
        }
    }
}

/// How turns are logged and followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnLogSettings {
    /// Whether turns are logged in the store at all (off: no resume from another instance, no
    /// cancel through the store; the in-process parts still work).
    pub enabled: bool,
    /// At most one log write per this much streaming time (plus the final one).
    pub flush_every: Duration,
    /// How often a running turn's record is read for a cancel asked on another instance.
    pub cancel_check_every: Duration,
    /// How long the end of a stream waits for the log's last write before it closes anyway.
    pub end_timeout: Duration,
    /// How a resume that follows a turn from the store polls it.
    pub resume: ResumeLimits,
}

impl Default for TurnLogSettings {
    fn default() -> TurnLogSettings {
        TurnLogSettings {
            enabled: true,
            flush_every: Duration::from_millis(250),
            cancel_check_every: Duration::from_secs(1),
            end_timeout: Duration::from_secs(5),
            resume: ResumeLimits::default(),
        }
    }
}
