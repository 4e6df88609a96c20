//! The frames a turn streams to its subscribers (SPEC §8), and the registry entry that
//! keeps them: an attempt's frames are kept from its start, so a subscriber that attaches
//! late gets all of them, then the live ones.
//!
//! What is kept is bounded by the answer, not by how it was cut up: the first
//! [`KEPT_TEXT_FRAME_BYTES`] of text stay as the frames they arrived in; past that, text is
//! appended to one buffer (consecutive chunks, or reasoning, becoming one entry), and a
//! subscriber reads it from there in frames of at most [`REPLAY_FRAME_BYTES`]. Every
//! subscriber still gets the whole text exactly once, in order, then `end`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// Running a tool.
    Tool,
    /// Waiting for the user's consent to a call.
    Permission,
}

/// Why an attempt ends when another server took its session (I7 across servers).
pub(super) const CLAIM_LOST: &str = "another server took the session";

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
    /// The model asked for a call; sent once its arguments are complete.
    #[serde(rename = "tool_call")]
    ToolCall {
        call_id: String,
        name: String,
        server: String,
        args: String,
        step: u32,
    },
    /// The attempt waits for `POST …/permissions/{call_id}`; `seq` is the
    /// `permission_requested` event.
    Permission {
        call_id: String,
        name: String,
        args: String,
        seq: u64,
    },
    /// The question about a call was answered (by the user, or its timeout, a stop or the
    /// shutdown), so every client can say who decided; `seq` is `permission_resolved`.
    #[serde(rename = "permission_resolved")]
    PermissionResolved {
        call_id: String,
        decision: String,
        by: String,
        remember: bool,
        seq: u64,
    },
    /// A call ended; `seq` is its `tool_execution` event.
    #[serde(rename = "tool_result")]
    ToolResult {
        call_id: String,
        status: String,
        preview: String,
        duration_ms: u64,
        seq: Option<u64>,
    },
    End {
        status: EndStatus,
        /// The event that ended the attempt (none when nothing could be written).
        seq: Option<u64>,
        provider: String,
        model: String,
        /// Summed over the attempt's steps.
        usage: Option<Usage>,
        /// Provider calls the attempt made (more than one when the model used tools).
        steps: u32,
        finish_reason: Option<String>,
    },
}

/// Text kept as the frames it arrived in, per attempt; past it, text is kept once in a
/// buffer (a 3 MB answer in 3-byte chunks would otherwise hold a million frames).
pub const KEPT_TEXT_FRAME_BYTES: usize = 256 * 1024;
/// The largest frame a subscriber is given from the buffered text.
pub const REPLAY_FRAME_BYTES: usize = 64 * 1024;

/// One kept item: a frame, or a run of buffered text (`start..end` of `Log::text`).
enum Entry {
    Frame(Frame),
    Text {
        reasoning: bool,
        start: usize,
        end: usize,
    },
}

struct Log {
    entries: Vec<Entry>,
    /// Text past the framed budget, each byte once.
    text: String,
    /// Bytes of text kept as frames so far.
    framed_text_bytes: usize,
    ended_at: Option<Instant>,
}

impl Log {
    fn keep(&mut self, frame: Frame) {
        let (reasoning, text) = match &frame {
            Frame::Chunk { text } => (false, text),
            Frame::Reasoning { text } => (true, text),
            _ => {
                self.entries.push(Entry::Frame(frame));
                return;
            }
        };
        if self.framed_text_bytes + text.len() <= KEPT_TEXT_FRAME_BYTES {
            self.framed_text_bytes += text.len();
            self.entries.push(Entry::Frame(frame));
            return;
        }
        let start = self.text.len();
        self.text.push_str(text);
        let end = self.text.len();
        match self.entries.last_mut() {
            Some(Entry::Text {
                reasoning: r,
                end: e,
                ..
            }) if *r == reasoning => *e = end,
            _ => self.entries.push(Entry::Text {
                reasoning,
                start,
                end,
            }),
        }
    }
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
    /// The attempt's newest permission question, and its decision once it has one (SPEC
    /// §13): what a racing or late answer is told.
    pub(super) consent: Mutex<Option<super::slot::Waiting>>,
    /// The session's claim across servers, held while the attempt runs (I7).
    pub(super) claim: Mutex<Option<crate::session::store::coord::Claim>>,
    /// Set when another server took the session from under the attempt.
    pub(super) claim_lost: AtomicBool,
    /// The seq of the attempt's own newest write (its user message, a checkpoint, a tool
    /// event): a claim taken again holds only while the session's last seq is still it.
    pub(super) own_seq: AtomicU64,
}

impl ActiveTurn {
    pub fn new(session_id: SessionId, turn: u64, attempt: u32) -> ActiveTurn {
        ActiveTurn {
            session_id,
            turn,
            attempt,
            log: Mutex::new(Log {
                entries: Vec::new(),
                text: String::new(),
                framed_text_bytes: 0,
                ended_at: None,
            }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            consent: Mutex::new(None),
            claim: Mutex::new(None),
            claim_lost: AtomicBool::new(false),
            own_seq: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps a frame for the subscribers; after the end, frames are dropped.
    pub fn push(&self, frame: Frame) {
        let mut log = self.lock();
        if log.ended_at.is_none() {
            log.keep(frame);
        }
        drop(log);
        self.changed.notify_all();
    }

    /// Ends the attempt: from now on it is not active, and `end` is its last frame. The
    /// claim goes first, so whoever sees `end` may start the next attempt on any server.
    pub fn finish(&self, end: Frame) {
        let claim = self
            .claim
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(claim);
        self.announce_end(end);
    }

    /// Sends `end` as the last frame (once: a later one is dropped) while the claim stays
    /// held: a shutdown's attempt whose record still waits for the database (I7 holds).
    pub(super) fn announce_end(&self, end: Frame) {
        let mut log = self.lock();
        if log.ended_at.is_none() {
            log.keep(end);
            log.ended_at = Some(Instant::now());
        }
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

    /// Set on `/stop` and on shutdown: what a running tool call watches to give up.
    pub fn stop_flag(&self) -> &AtomicBool {
        &self.stop
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
            offset: 0,
        }
    }

    /// How many items are kept (frames, and runs of buffered text): bounded by
    /// [`KEPT_TEXT_FRAME_BYTES`], not by the number of chunks.
    pub fn frame_count(&self) -> usize {
        self.lock().entries.len()
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
    /// The next entry to read.
    next: usize,
    /// How far into the buffered text this subscriber has read.
    offset: usize,
}

impl Subscription {
    pub fn turn(&self) -> &Arc<ActiveTurn> {
        &self.turn
    }

    /// The next frame, waiting at most `wait` for one.
    pub fn next_frame(&mut self, wait: Duration) -> Next {
        let deadline = Instant::now() + wait;
        let turn = Arc::clone(&self.turn);
        let mut log = turn.lock();
        loop {
            if let Some(f) = self.read(&log) {
                return Next::Frame(f);
            }
            if self.next >= log.entries.len() && log.ended_at.is_some() {
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

impl Subscription {
    /// The next frame already kept, if there is one.
    fn read(&mut self, log: &Log) -> Option<Frame> {
        loop {
            match log.entries.get(self.next)? {
                Entry::Frame(f) => {
                    self.next += 1;
                    return Some(f.clone());
                }
                &Entry::Text {
                    reasoning,
                    start,
                    end,
                } => {
                    let from = self.offset.max(start);
                    if from < end {
                        let mut to = end.min(from + REPLAY_FRAME_BYTES);
                        while !log.text.is_char_boundary(to) {
                            to -= 1;
                        }
                        self.offset = to;
                        let text = log.text[from..to].to_owned();
                        return Some(if reasoning {
                            Frame::Reasoning { text }
                        } else {
                            Frame::Chunk { text }
                        });
                    }
                    // Read to its end; it may still grow while it is the newest entry.
                    if self.next + 1 == log.entries.len() {
                        return None;
                    }
                    self.next += 1;
                }
            }
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

    /// An attempt's own writes only move forward: the same write told twice is fine (an
    /// append and its checkpoint both report it), an older one is a bug.
    #[test]
    fn an_attempts_writes_only_move_forward() {
        let t = ActiveTurn::new(SessionId::generate(), 2, 1);
        t.wrote(5);
        t.wrote(5);
        t.wrote(9);
        let older = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.wrote(7)));
        assert!(older.is_err(), "an older write must be refused");
    }

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
            steps: 1,
            finish_reason: None,
        };
        let v = serde_json::to_value(&end).unwrap();
        assert_eq!(v["steps"], 1);
        let call = Frame::ToolCall {
            call_id: "c".into(),
            name: "fs__read".into(),
            server: "fs".into(),
            args: "{}".into(),
            step: 2,
        };
        assert_eq!(serde_json::to_value(&call).unwrap()["type"], "tool_call");
        let result = Frame::ToolResult {
            call_id: "c".into(),
            status: "ok".into(),
            preview: "x".into(),
            duration_ms: 1,
            seq: Some(9),
        };
        assert_eq!(
            serde_json::to_value(&result).unwrap()["type"],
            "tool_result"
        );
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

    fn text_of(frames: &[Frame]) -> String {
        frames
            .iter()
            .filter_map(|f| match f {
                Frame::Chunk { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_long_answer_keeps_its_text_once_and_every_subscriber_reads_it_whole() {
        let t = Arc::new(ActiveTurn::new(SessionId::generate(), 2, 1));
        let mut early = t.subscribe();
        let mut early_frames = Vec::new();
        let mut sent = String::new();
        // 1 MiB in 10-byte chunks (multi-byte characters included), a checkpoint now and
        // then; the early subscriber reads along, now and then.
        for i in 0..100_000 {
            let piece = if i % 7 == 0 {
                "héllo wör "
            } else {
                "0123456789"
            };
            sent.push_str(piece);
            t.push(Frame::Chunk { text: piece.into() });
            if i % 5_000 == 0 {
                t.push(Frame::Checkpoint { seq: i });
            }
            if i % 3_333 == 0 {
                while let Next::Frame(f) = early.next_frame(Duration::ZERO) {
                    early_frames.push(f);
                }
            }
        }
        t.finish(Frame::Status {
            phase: Phase::Waiting,
        });
        early_frames.extend(early);
        let late: Vec<Frame> = t.subscribe().collect();
        for frames in [&early_frames, &late] {
            assert_eq!(text_of(frames), sent, "the whole text, once, in order");
            let checkpoints: Vec<u64> = frames
                .iter()
                .filter_map(|f| match f {
                    Frame::Checkpoint { seq } => Some(*seq),
                    _ => None,
                })
                .collect();
            assert_eq!(checkpoints, (0..100_000).step_by(5_000).collect::<Vec<_>>());
            assert!(matches!(frames.last(), Some(Frame::Status { .. })));
        }
        // Kept: the framed budget's chunks, then a few runs of text between checkpoints.
        let budget_frames = KEPT_TEXT_FRAME_BYTES / 10;
        assert!(t.frame_count() < budget_frames + 100, "{}", t.frame_count());
        assert!(late.len() < budget_frames + 100, "{}", late.len());
        assert!(late.iter().all(|f| match f {
            Frame::Chunk { text } => text.len() <= REPLAY_FRAME_BYTES,
            _ => true,
        }));
    }
}
