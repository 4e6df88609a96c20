//! The frames a turn streams to its subscribers (SPEC §8), and the registry entry that
//! keeps them: an attempt's frames are kept from its start, so a subscriber that attaches
//! late gets all of them, then the live ones.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::session::SessionId;
use crate::session::compactor::Interrupt;
use crate::session::events::Usage;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Compacting,
    Waiting,
    Streaming,
}

/// How an attempt ended (SPEC §6's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EndStatus {
    Completed,
    Failed,
    Interrupted,
}

/// One SSE frame; serialised with its `type`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Frame {
    Turn {
        session_id: String,
        turn: u64,
        attempt: u32,
    },
    Status {
        phase: Phase,
    },
    Chunk {
        text: String,
    },
    Reasoning {
        text: String,
    },
    Checkpoint {
        seq: u64,
    },
    Usage(Usage),
    Error {
        code: String,
        message: String,
        retryable: bool,
    },
    End {
        status: EndStatus,
        /// The event that ended the attempt (none when nothing could be written).
        seq: Option<u64>,
        provider: String,
        model: String,
        usage: Option<Usage>,
        finish_reason: Option<String>,
    },
}

struct Log {
    frames: Vec<Frame>,
    ended_at: Option<Instant>,
}

/// One attempt in flight (or recently ended), owned by the engine, not by any client.
pub struct ActiveTurn {
    pub session_id: SessionId,
    pub turn: u64,
    pub attempt: u32,
    log: Mutex<Log>,
    changed: Condvar,
    stop: AtomicBool,
    shutdown: AtomicBool,
}

impl ActiveTurn {
    pub fn new(session_id: SessionId, turn: u64, attempt: u32) -> ActiveTurn {
        ActiveTurn {
            session_id,
            turn,
            attempt,
            log: Mutex::new(Log {
                frames: Vec::new(),
                ended_at: None,
            }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn push(&self, frame: Frame) {
        self.lock().frames.push(frame);
        self.changed.notify_all();
    }

    /// Ends the attempt: from now on it is not active, and `end` is its last frame.
    pub fn finish(&self, end: Frame) {
        let mut log = self.lock();
        log.frames.push(end);
        log.ended_at = Some(Instant::now());
        drop(log);
        self.changed.notify_all();
    }

    pub fn is_done(&self) -> bool {
        self.lock().ended_at.is_some()
    }

    /// How long ago it ended, if it did.
    pub fn ended_ago(&self) -> Option<Duration> {
        self.lock().ended_at.map(|t| t.elapsed())
    }

    /// Asks the attempt to stop (`/stop`).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Asks the attempt to stop because the server is shutting down.
    pub fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.stop.store(true, Ordering::SeqCst);
    }

    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    pub fn shutdown_requested(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// Why the attempt must end now, if it must.
    pub fn interrupt(&self) -> Option<Interrupt> {
        if self.shutdown_requested() {
            Some(Interrupt::Shutdown)
        } else if self.stop_requested() {
            Some(Interrupt::Stopped)
        } else {
            None
        }
    }

    /// A subscriber that starts from the attempt's first frame.
    pub fn subscribe(self: &Arc<Self>) -> Subscription {
        Subscription {
            turn: Arc::clone(self),
            next: 0,
        }
    }

    /// How many frames were pushed so far.
    pub fn frame_count(&self) -> usize {
        self.lock().frames.len()
    }

    /// Every frame so far.
    pub fn frames(&self) -> Vec<Frame> {
        self.lock().frames.clone()
    }
}

/// What a subscriber got within its wait.
#[derive(Debug, PartialEq)]
pub enum Next {
    Frame(Frame),
    /// Nothing new yet (time for a keep-alive).
    Idle,
    /// The `end` frame was delivered: nothing more will come.
    Ended,
}

/// One reader of an attempt's frames. Dropping it does not affect the attempt.
pub struct Subscription {
    turn: Arc<ActiveTurn>,
    next: usize,
}

impl Subscription {
    pub fn turn(&self) -> &Arc<ActiveTurn> {
        &self.turn
    }

    /// The next frame, waiting at most `wait` for one.
    pub fn next_frame(&mut self, wait: Duration) -> Next {
        let deadline = Instant::now() + wait;
        let mut log = self.turn.lock();
        loop {
            if let Some(f) = log.frames.get(self.next) {
                self.next += 1;
                return Next::Frame(f.clone());
            }
            if log.ended_at.is_some() {
                return Next::Ended;
            }
            let now = Instant::now();
            if now >= deadline {
                return Next::Idle;
            }
            log = self
                .turn
                .changed
                .wait_timeout(log, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Iterator for Subscription {
    type Item = Frame;

    /// Blocks until the next frame; `None` after the end frame.
    fn next(&mut self) -> Option<Frame> {
        loop {
            match self.next_frame(Duration::from_secs(3600)) {
                Next::Frame(f) => return Some(f),
                Next::Ended => return None,
                Next::Idle => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_serialise_with_their_type() {
        let f = Frame::Usage(Usage {
            input_tokens: 1,
            ..Usage::default()
        });
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["type"], "usage");
        assert_eq!(v["input_tokens"], 1);
        let end = Frame::End {
            status: EndStatus::Interrupted,
            seq: Some(7),
            provider: "p".into(),
            model: "m".into(),
            usage: None,
            finish_reason: None,
        };
        let v = serde_json::to_value(&end).unwrap();
        assert_eq!(
            (v["type"].as_str(), v["status"].as_str()),
            (Some("end"), Some("interrupted"))
        );
        let s = serde_json::to_value(Frame::Status {
            phase: Phase::Compacting,
        })
        .unwrap();
        assert_eq!(s["phase"], "compacting");
    }

    #[test]
    fn a_late_subscriber_gets_everything_then_the_end() {
        let t = Arc::new(ActiveTurn::new(SessionId::generate(), 2, 1));
        t.push(Frame::Chunk { text: "a".into() });
        let mut early = t.subscribe();
        assert_eq!(
            early.next_frame(Duration::ZERO),
            Next::Frame(Frame::Chunk { text: "a".into() })
        );
        assert_eq!(early.next_frame(Duration::from_millis(10)), Next::Idle);
        t.push(Frame::Chunk { text: "b".into() });
        t.finish(Frame::Status {
            phase: Phase::Waiting,
        });
        let late: Vec<Frame> = t.subscribe().collect();
        assert_eq!(late.len(), 3);
        assert_eq!(early.count(), 2);
        assert!(t.is_done());
    }
}
