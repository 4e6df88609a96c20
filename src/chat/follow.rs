//! `/live` on a server that does not run the attempt (SPEC §16): the attempt followed
//! through its log as it is appended. [`Follow`] turns events into the frames of §8 (pure);
//! [`spawn`] polls the store every [`FOLLOW_POLL`] and feeds it.
//!
//! The log says less than the running server's stream: text arrives per checkpoint (2 s),
//! and the `end` of an attempt that did not complete has no provider, model or usage.
//! Which attempt runs: the newest one of the log when following begins, unless it has
//! ended; else the first newer one that shows up. The attempt ends with its final event
//! (`assistant_turn`, `turn_failed`, or a `pending_state` that says it ended) or, when the
//! lock is released with none (the server running it died), as the log leaves it:
//! `interrupted` at its last checkpoint, `failed` without one (§6: "process killed").

use std::collections::HashSet;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::frames::{ActiveTurn, EndStatus, Frame, Phase, Subscription};
use super::state::Inner;
use crate::session::SessionId;
use crate::session::events::{Decoded, Event, Payload};

/// How often the log of an attempt running elsewhere is read.
pub const FOLLOW_POLL: Duration = Duration::from_millis(500);

/// (turn, attempt).
type Pair = (u64, u32);

/// An attempt followed through its log: events in, frames out.
pub struct Follow {
    session_id: String,
    /// Attempts that had ended when following began.
    ended: HashSet<Pair>,
    /// The newest attempt of the log, and its newest user message, when following began:
    /// an older attempt left without an end (its server died) is not the running one.
    newest: Option<Pair>,
    newest_turn: u64,
    /// The attempt a new one would be (for an end with nothing to follow).
    next: Pair,
    following: Option<Pair>,
    /// Permission questions of the followed attempt not answered yet, by call id.
    asked: HashSet<String>,
    text: String,
    reasoning: String,
    last_checkpoint: Option<u64>,
    after_seq: u64,
    done: bool,
}

impl Follow {
    /// Following from the log as it is now (`events`: the live tail at least, in seq order);
    /// feed the same events first.
    pub fn new(session_id: SessionId, events: &[Event]) -> Follow {
        let mut f = Follow {
            session_id: session_id.to_string(),
            ended: HashSet::new(),
            newest: None,
            newest_turn: 0,
            next: (0, 1),
            following: None,
            asked: HashSet::new(),
            text: String::new(),
            reasoning: String::new(),
            last_checkpoint: None,
            after_seq: 0,
            done: false,
        };
        for e in events {
            f.note(e);
            if let Some((pair, final_event)) = attempt_of(e) {
                f.newest = f.newest.max(Some(pair));
                if final_event {
                    f.ended.insert(pair);
                }
            }
        }
        f.newest_turn = f.next.0;
        f
    }

    /// The newest attempt of `events` (the live tail, in seq order), if it has ended and
    /// nothing newer was asked since: all its frames from its start, and when it ended
    /// (its final event's `created_at`), for `/live` right after an attempt that ran on
    /// another server.
    pub fn replay(session_id: SessionId, events: &[Event]) -> Option<(Vec<Frame>, String)> {
        let mut f = Follow::new(session_id, events);
        let newest = f.newest?;
        if !f.ended.remove(&newest) || newest.0 < f.newest_turn {
            return None;
        }
        let frames = f.feed(events, true);
        let ended_at = events
            .iter()
            .rev()
            .find(|e| attempt_of(e) == Some((newest, true)))?
            .created_at
            .clone();
        Some((frames, ended_at)).filter(|_| f.done())
    }

    /// The attempt the log says runs, when some server holds the session: the newest
    /// one if it has not ended (and belongs to the newest message), else the next one.
    pub fn running(&self) -> (u64, u32) {
        match self.newest {
            Some(p) if !self.ended.contains(&p) && p.0 >= self.newest_turn => p,
            _ => self.next,
        }
    }

    /// Whether the followed attempt waits on the user's answer about `call_id`.
    pub fn waiting(&self, call_id: &str) -> bool {
        self.asked.contains(call_id)
    }

    /// The newest seq fed so far: the next read starts after it.
    pub fn after_seq(&self) -> u64 {
        self.after_seq
    }

    /// Whether the `end` frame was produced.
    pub fn done(&self) -> bool {
        self.done
    }

    /// The frames `events` (appended after [`Follow::after_seq`], in seq order) add;
    /// `held` is whether the session was still claimed when checked, *before* they were
    /// read (its attempt writes its final event before it lets go).
    pub fn feed(&mut self, events: &[Event], held: bool) -> Vec<Frame> {
        let mut frames = Vec::new();
        for e in events {
            if self.done {
                break;
            }
            self.note(e);
            self.event(e, &mut frames);
        }
        if !held && !self.done {
            self.died(&mut frames);
        }
        frames
    }

    /// Keeps track of the attempt a new one would be.
    fn note(&mut self, e: &Event) {
        self.after_seq = self.after_seq.max(e.seq);
        if e.kind == crate::session::events::kind::USER_MESSAGE && e.seq > self.next.0 {
            self.next = (e.seq, 1);
        }
        if let Some(((turn, attempt), _)) = attempt_of(e)
            && turn == self.next.0
        {
            self.next.1 = self.next.1.max(attempt + 1);
        }
    }

    fn event(&mut self, e: &Event, frames: &mut Vec<Frame>) {
        let Decoded::Known(payload) = e.decode() else {
            return;
        };
        if let Payload::PermissionResolved(r) = &payload {
            // An answer names its attempt (older logs: only the call, which then is the
            // followed attempt's question, the newest one unanswered).
            let other = match (r.turn, r.attempt) {
                (Some(t), Some(a)) => self.following != Some((t, a)),
                _ => false,
            };
            if !other && self.asked.remove(&r.call_id) {
                frames.push(Frame::PermissionResolved {
                    call_id: r.call_id.clone(),
                    decision: r.decision.clone(),
                    by: r.by.clone(),
                    remember: r.remember,
                    seq: e.seq,
                });
            }
            return;
        }
        let Some((pair, _)) = attempt_of(e) else {
            return;
        };
        if !self.follows(pair, frames) {
            return;
        }
        match payload {
            Payload::PendingState(p) => {
                self.text_frames(p.reasoning.as_deref().unwrap_or(""), &p.text, frames);
                frames.push(Frame::Checkpoint { seq: e.seq });
                self.last_checkpoint = Some(e.seq);
                if let Some(ended) = p.ended {
                    error_frame(&ended.code, &ended.message, frames);
                    self.end(EndStatus::Interrupted, Some(e.seq), frames);
                }
            }
            Payload::AssistantTurn(a) => {
                let reasoning = a.reasoning.as_deref().unwrap_or("");
                let reasoning = rest(reasoning, self.reasoning.len()).to_owned();
                let text = rest(&a.text, self.text.len()).to_owned();
                self.text_frames(&reasoning, &text, frames);
                self.done = true;
                frames.push(Frame::End {
                    status: EndStatus::Completed,
                    seq: Some(e.seq),
                    provider: a.provider,
                    model: a.model,
                    usage: Some(a.usage),
                    steps: a.steps.max(1),
                    finish_reason: a.finish_reason,
                });
            }
            Payload::TurnFailed(f) => {
                error_frame(&f.code, &f.message, frames);
                self.end(EndStatus::Failed, Some(e.seq), frames);
            }
            Payload::PermissionRequested(q) => {
                self.asked.insert(q.call_id.clone());
                frames.push(Frame::Permission {
                    call_id: q.call_id,
                    name: q.name,
                    args: q.args,
                    seq: e.seq,
                });
            }
            _ => {}
        }
    }

    /// Whether `pair` is the followed attempt; the first one that may be starts it.
    fn follows(&mut self, pair: Pair, frames: &mut Vec<Frame>) -> bool {
        if let Some(f) = self.following {
            return f == pair;
        }
        let candidate =
            !self.ended.contains(&pair) && Some(pair) >= self.newest && pair.0 >= self.newest_turn;
        if candidate {
            self.start(pair, frames);
        }
        candidate
    }

    fn start(&mut self, pair: Pair, frames: &mut Vec<Frame>) {
        self.following = Some(pair);
        frames.push(Frame::Turn {
            session_id: self.session_id.clone(),
            turn: pair.0,
            attempt: pair.1,
        });
    }

    fn text_frames(&mut self, reasoning: &str, text: &str, frames: &mut Vec<Frame>) {
        if self.text.is_empty()
            && self.reasoning.is_empty()
            && !(text.is_empty() && reasoning.is_empty())
        {
            frames.push(Frame::Status {
                phase: Phase::Streaming,
            });
        }
        if !reasoning.is_empty() {
            self.reasoning.push_str(reasoning);
            frames.push(Frame::Reasoning {
                text: reasoning.to_owned(),
            });
        }
        if !text.is_empty() {
            self.text.push_str(text);
            frames.push(Frame::Chunk {
                text: text.to_owned(),
            });
        }
    }

    /// The lock went without a final event: the server running the attempt died.
    fn died(&mut self, frames: &mut Vec<Frame>) {
        if self.following.is_none() {
            self.start(self.next, frames);
        }
        let status = if self.last_checkpoint.is_some() {
            EndStatus::Interrupted
        } else {
            EndStatus::Failed
        };
        self.end(status, self.last_checkpoint, frames);
    }

    fn end(&mut self, status: EndStatus, seq: Option<u64>, frames: &mut Vec<Frame>) {
        self.done = true;
        frames.push(Frame::End {
            status,
            seq,
            provider: String::new(),
            model: String::new(),
            usage: None,
            steps: 1,
            finish_reason: None,
        });
    }
}

/// The attempt an event belongs to, and whether it ends it.
fn attempt_of(e: &Event) -> Option<(Pair, bool)> {
    use crate::session::events::kind;
    if ![
        kind::PENDING_STATE,
        kind::ASSISTANT_TURN,
        kind::TURN_FAILED,
        kind::PERMISSION_REQUESTED,
    ]
    .contains(&e.kind.as_str())
    {
        return None;
    }
    match e.decode() {
        Decoded::Known(Payload::PendingState(p)) => Some(((p.turn, p.attempt), p.ended.is_some())),
        Decoded::Known(Payload::AssistantTurn(a)) => Some(((a.turn, a.attempt), true)),
        Decoded::Known(Payload::TurnFailed(f)) => Some(((f.turn, f.attempt), true)),
        Decoded::Known(Payload::PermissionRequested(q)) => Some(((q.turn, q.attempt), false)),
        _ => None,
    }
}

/// `s` past its first `sent` bytes (what the checkpoints already carried).
fn rest(s: &str, sent: usize) -> &str {
    s.get(sent..).unwrap_or("")
}

/// The `error` frame the running server sent before `end` (none for a stop or a shutdown).
fn error_frame(code: &str, message: &str, frames: &mut Vec<Frame>) {
    if code == "stopped" || code == "shutdown" {
        return;
    }
    frames.push(Frame::Error {
        code: code.to_owned(),
        message: message.to_owned(),
        retryable: code != "context_overflow",
    });
}

/// Follows the session's attempt running elsewhere on a thread of its own, until its end,
/// the subscriber leaving, or shutdown.
pub(super) fn spawn(
    inner: &Arc<Inner>,
    id: SessionId,
) -> Result<Subscription, super::state::EngineError> {
    // The claim first, then the events, as in every read (see `poll`).
    let held = claimed(inner, id);
    let initial = inner.deps.store.events_for_context(id)?;
    let mut follow = Follow::new(id, &initial);
    let turn = Arc::new(ActiveTurn::new(id, 0, 0));
    let subscription = turn.subscribe();
    deliver(&turn, follow.feed(&initial, held));
    if follow.done() {
        return Ok(subscription);
    }
    let inner = Arc::clone(inner);
    let following = Arc::clone(&turn);
    let spawned = thread::Builder::new()
        .name("brain-follow".into())
        .spawn(move || poll(&inner, id, &following, follow));
    if let Err(e) = spawned {
        return Err(super::state::EngineError::Unavailable(format!(
            "cannot start a thread: {e}"
        )));
    }
    Ok(subscription)
}

fn poll(inner: &Inner, id: SessionId, turn: &Arc<ActiveTurn>, mut follow: Follow) {
    loop {
        thread::sleep(FOLLOW_POLL);
        // Nobody reads any more: the attempt goes on without us.
        if Arc::strong_count(turn) == 1 {
            return;
        }
        if inner.shutting_down() {
            turn.finish(Frame::Error {
                code: "unavailable".into(),
                message: "this server is shutting down; the answer goes on elsewhere".into(),
                retryable: true,
            });
            return;
        }
        // The claim first, then the events: its final event is written before it goes.
        let held = claimed(inner, id);
        let events = match inner.deps.store.events(id, follow.after_seq(), None) {
            Ok(events) => events,
            // Deleted: its claim is gone too, so this read ends the stream.
            Err(crate::session::StoreError::SessionNotFound(_)) => Vec::new(),
            Err(e) => {
                log::warn!("following {id}: cannot read its log: {e}");
                continue;
            }
        };
        deliver(turn, follow.feed(&events, held));
        if follow.done() {
            return;
        }
    }
}

/// Whether the session is still claimed; a failed look counts as claimed (read again).
fn claimed(inner: &Inner, id: SessionId) -> bool {
    inner
        .registry
        .coord
        .claimed(&[id])
        .map(|held| held.contains(&id))
        .unwrap_or_else(|e| {
            log::warn!("following {id}: cannot tell who runs it: {e}");
            true
        })
}

/// Hands frames to the subscriber; `end` ends the followed attempt.
pub(super) fn deliver(turn: &ActiveTurn, frames: Vec<Frame>) {
    for f in frames {
        if matches!(f, Frame::End { .. }) {
            turn.finish(f);
        } else {
            turn.push(f);
        }
    }
}

#[cfg(test)]
mod tests;
