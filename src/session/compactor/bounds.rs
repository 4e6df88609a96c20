//! What bounds one compaction: its deadline, and what cuts it short (`/stop`, shutdown, a
//! turn an optional compaction yields to).

use std::time::{Duration, Instant};

use super::run::{COMPACTION_TIMEOUT, CompactionError};

/// Why a compaction was cut short from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interrupt {
    /// Its turn was stopped (`/stop`), or an optional compaction yields to a turn.
    Stopped,
    /// The server is shutting down.
    Shutdown,
}

impl Interrupt {
    /// The code recorded for the cut call (the same as the turn's, SPEC §6).
    pub fn code(self) -> &'static str {
        match self {
            Interrupt::Stopped => "stopped",
            Interrupt::Shutdown => "shutdown",
        }
    }
}

/// Says whether the compaction should stop now.
pub type Interrupted<'a> = &'a (dyn Fn() -> Option<Interrupt> + Sync);

/// Nothing interrupts: a compaction asked for by hand.
pub fn never() -> Option<Interrupt> {
    None
}

/// What bounds one compaction: its deadline and what can cut it short.
#[derive(Clone, Copy)]
pub struct Bounds<'a> {
    pub until: Instant,
    interrupted: Interrupted<'a>,
}

impl<'a> Bounds<'a> {
    /// A compaction starting now, with [`COMPACTION_TIMEOUT`].
    pub fn new(interrupted: Interrupted<'a>) -> Bounds<'a> {
        Bounds::within(COMPACTION_TIMEOUT, interrupted)
    }

    pub fn within(timeout: Duration, interrupted: Interrupted<'a>) -> Bounds<'a> {
        Bounds {
            until: Instant::now() + timeout,
            interrupted,
        }
    }

    /// Whether (and why) the compaction should stop now.
    pub fn interrupted(&self) -> Option<Interrupt> {
        (self.interrupted)()
    }

    /// The time left before the deadline.
    pub fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }

    /// `Err` when the compaction must end now: interrupted, or over its deadline.
    pub fn check(&self) -> Result<(), CompactionError> {
        if let Some(i) = self.interrupted() {
            return Err(CompactionError::Interrupted(i));
        }
        if self.left().is_zero() {
            return Err(self.timed_out());
        }
        Ok(())
    }

    pub(super) fn timed_out(&self) -> CompactionError {
        CompactionError::TimedOut(COMPACTION_TIMEOUT)
    }
}
