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

use super::engine::Inner;
use super::frames::{ActiveTurn, EndStatus, Frame, Phase, Subscription};
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
    /// Permission questions of the followed attempt (their answers name only the call).
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
            if self.asked.remove(&r.call_id) {
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
) -> Result<Subscription, super::engine::EngineError> {
    let initial = inner.store.events_for_context(id)?;
    let mut follow = Follow::new(id, &initial);
    let turn = Arc::new(ActiveTurn::new(id, 0, 0));
    let subscription = turn.subscribe();
    let held = claimed(inner, id);
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
        return Err(super::engine::EngineError::Unavailable(format!(
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
        let events = match inner.store.events(id, follow.after_seq(), None) {
            Ok(events) => events,
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
        .coord
        .claimed(&[id])
        .map(|held| held.contains(&id))
        .unwrap_or_else(|e| {
            log::warn!("following {id}: cannot tell who runs it: {e}");
            true
        })
}

/// Hands frames to the subscriber; `end` ends the followed attempt.
fn deliver(turn: &ActiveTurn, frames: Vec<Frame>) {
    for f in frames {
        if matches!(f, Frame::End { .. }) {
            turn.finish(f);
        } else {
            turn.push(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::testlog::Log;

    fn text(frames: &[Frame]) -> String {
        frames
            .iter()
            .filter_map(|f| match f {
                Frame::Chunk { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    fn end(frames: &[Frame]) -> Option<(EndStatus, Option<u64>)> {
        match frames.last() {
            Some(Frame::End { status, seq, .. }) => Some((*status, *seq)),
            _ => None,
        }
    }

    fn turn_frame(id: SessionId, turn: u64, attempt: u32) -> Frame {
        Frame::Turn {
            session_id: id.to_string(),
            turn,
            attempt,
        }
    }

    /// Follows from `log` as it is, then feeds what is appended after it.
    fn start(id: SessionId, log: &Log, held: bool) -> (Follow, Vec<Frame>) {
        let mut f = Follow::new(id, &log.events);
        let frames = f.feed(&log.events, held);
        (f, frames)
    }

    fn since(log: &Log, f: &Follow) -> Vec<Event> {
        log.events
            .iter()
            .filter(|e| e.seq > f.after_seq())
            .cloned()
            .collect()
    }

    #[test]
    fn a_streaming_attempt_is_followed_checkpoint_by_checkpoint_to_its_answer() {
        let id = SessionId::generate();
        let mut log = Log::new("sys");
        let turn = log.user("hi");
        let first = log.checkpoint(turn, 1, "Hel");
        let (mut f, frames) = start(id, &log, true);
        assert_eq!(frames[0], turn_frame(id, turn, 1));
        assert_eq!(
            frames[1],
            Frame::Status {
                phase: Phase::Streaming
            }
        );
        assert_eq!(text(&frames), "Hel");
        assert_eq!(frames.last(), Some(&Frame::Checkpoint { seq: first }));
        assert!(f.feed(&[], true).is_empty(), "nothing new, nothing sent");
        let second = log.checkpoint(turn, 1, "lo ");
        let frames = f.feed(&since(&log, &f), true);
        assert_eq!(
            frames,
            vec![
                Frame::Chunk { text: "lo ".into() },
                Frame::Checkpoint { seq: second }
            ]
        );
        let answer = log.answer(turn, 1, "Hello world");
        // The attempt let go after writing its answer: both show in the same read.
        let frames = f.feed(&since(&log, &f), false);
        assert_eq!(
            text(&frames),
            "world",
            "only what the checkpoints did not carry"
        );
        assert!(frames.contains(&Frame::Reasoning {
            text: "thinking about Hello world".into()
        }));
        assert_eq!(end(&frames), Some((EndStatus::Completed, Some(answer))));
        let Some(Frame::End {
            model, provider, ..
        }) = frames.last()
        else {
            unreachable!()
        };
        assert_eq!((model.as_str(), provider.as_str()), ("m", "mock"));
        assert!(f.done());
        assert!(f.feed(&[], false).is_empty(), "nothing after the end");
    }

    #[test]
    fn a_stopped_attempt_ends_interrupted_at_its_last_checkpoint_without_an_error() {
        let id = SessionId::generate();
        let mut log = Log::new("sys");
        let turn = log.user("hi");
        log.checkpoint(turn, 1, "par");
        let (mut f, _) = start(id, &log, true);
        let last = log.ended(turn, 1, "tial", "stopped");
        let frames = f.feed(&since(&log, &f), false);
        assert_eq!(text(&frames), "tial");
        assert!(!frames.iter().any(|f| matches!(f, Frame::Error { .. })));
        assert_eq!(end(&frames), Some((EndStatus::Interrupted, Some(last))));
    }

    #[test]
    fn a_cut_off_or_failed_attempt_sends_its_error_then_its_end() {
        let id = SessionId::generate();
        let mut log = Log::new("sys");
        let turn = log.user("hi");
        // Nothing of the attempt is in the log yet: nothing to send until it shows.
        let (mut f, frames) = start(id, &log, true);
        assert!(frames.is_empty());
        let failed = log.failed(turn, 1, "unreachable");
        let frames = f.feed(&since(&log, &f), false);
        assert_eq!(frames[0], turn_frame(id, turn, 1));
        assert!(
            matches!(&frames[1], Frame::Error { code, retryable: true, .. } if code == "unreachable")
        );
        assert_eq!(end(&frames), Some((EndStatus::Failed, Some(failed))));

        let mut log = Log::new("sys");
        let turn = log.user("hi");
        log.checkpoint(turn, 1, "so far");
        let (mut f, _) = start(id, &log, true);
        let cut = log.ended(turn, 1, "", "stream_idle_timeout");
        let frames = f.feed(&since(&log, &f), false);
        assert!(matches!(&frames[0], Frame::Checkpoint { .. }));
        assert!(matches!(&frames[1], Frame::Error { code, .. } if code == "stream_idle_timeout"));
        assert_eq!(end(&frames), Some((EndStatus::Interrupted, Some(cut))));
    }

    #[test]
    fn when_the_server_running_it_dies_the_attempt_ends_as_the_log_leaves_it() {
        let id = SessionId::generate();
        let mut log = Log::new("sys");
        let turn = log.user("hi");
        let cp = log.checkpoint(turn, 1, "half an answer");
        let (mut f, frames) = start(id, &log, true);
        assert_eq!(text(&frames), "half an answer");
        // The lock is gone and no final event came: the checkpoints stand as the partial.
        let frames = f.feed(&[], false);
        assert_eq!(end(&frames), Some((EndStatus::Interrupted, Some(cp))));

        // Died before its first checkpoint: failed, no seq, after a `turn` frame.
        let mut log = Log::new("sys");
        let turn = log.user("hi");
        let (mut f, frames) = start(id, &log, true);
        assert!(frames.is_empty());
        let frames = f.feed(&[], false);
        assert_eq!(frames[0], turn_frame(id, turn, 1));
        assert_eq!(end(&frames), Some((EndStatus::Failed, None)));
    }

    #[test]
    fn a_retry_is_followed_not_the_attempts_that_ended_before_it() {
        let id = SessionId::generate();
        let mut log = Log::new("sys");
        let turn = log.user("hi");
        log.checkpoint(turn, 1, "first try");
        log.answer(turn, 1, "first try done");
        let (mut f, frames) = start(id, &log, true);
        assert!(frames.is_empty(), "attempt 1 ended before following began");
        let cp = log.checkpoint(turn, 2, "second");
        let frames = f.feed(&since(&log, &f), true);
        assert_eq!(frames[0], turn_frame(id, turn, 2));
        assert_eq!(text(&frames), "second");
        assert_eq!(frames.last(), Some(&Frame::Checkpoint { seq: cp }));
        // A retry that dies before writing anything: attempt 2 of the newest message.
        let mut log = Log::new("sys");
        let turn = log.user("hi");
        log.failed(turn, 1, "unreachable");
        let (mut f, _) = start(id, &log, true);
        let frames = f.feed(&[], false);
        assert_eq!(frames[0], turn_frame(id, turn, 2));
    }

    #[test]
    fn an_attempt_left_unended_by_a_dead_server_is_not_the_running_one() {
        let id = SessionId::generate();
        let mut log = Log::new("sys");
        let old = log.user("hi");
        log.checkpoint(old, 1, "cut by a crash");
        let turn = log.user("again");
        let (mut f, frames) = start(id, &log, true);
        assert!(frames.is_empty());
        log.checkpoint(turn, 1, "new");
        let frames = f.feed(&since(&log, &f), true);
        assert_eq!(frames[0], turn_frame(id, turn, 1));
        assert_eq!(text(&frames), "new");
    }

    #[test]
    fn the_running_attempt_is_the_unended_newest_or_the_next_one() {
        let id = SessionId::generate();
        let mut log = Log::new("sys");
        let turn = log.user("hi");
        assert_eq!(Follow::new(id, &log.events).running(), (turn, 1));
        log.checkpoint(turn, 1, "so far");
        assert_eq!(Follow::new(id, &log.events).running(), (turn, 1));
        log.answer(turn, 1, "so far, done");
        assert_eq!(Follow::new(id, &log.events).running(), (turn, 2));
        let next = log.user("again");
        assert_eq!(Follow::new(id, &log.events).running(), (next, 1));
    }

    #[test]
    fn permission_questions_of_the_attempt_and_their_answers_are_followed() {
        let id = SessionId::generate();
        let mut log = Log::new("sys");
        let turn = log.user("hi");
        let (mut f, _) = start(id, &log, true);
        let asked = log.asked(turn, "c1", "fs__write");
        let frames = f.feed(&since(&log, &f), true);
        assert!(f.waiting("c1") && !f.waiting("c2"));
        assert_eq!(frames.len(), 2);
        let answered = log.answered("c1", "allow", false);
        log.answered("other", "deny", false);
        let frames = [frames, f.feed(&since(&log, &f), true)].concat();
        assert!(!f.waiting("c1"), "answered");
        assert_eq!(frames[0], turn_frame(id, turn, 1));
        assert!(
            matches!(&frames[1], Frame::Permission { call_id, seq, .. } if call_id == "c1" && *seq == asked)
        );
        assert!(matches!(&frames[2], Frame::PermissionResolved { seq, .. } if *seq == answered));
        assert_eq!(
            frames.len(),
            3,
            "an answer to another call is not this attempt's"
        );
    }

    proptest::proptest! {
        /// However the log's appends fall into reads, a follower gets the answer's whole
        /// text once, in order, between one `turn` frame and one `end` frame.
        #[test]
        fn every_split_of_the_reads_gives_the_whole_text_once(
            pieces in proptest::collection::vec("[a-zé ]{0,6}", 0..8),
            tail in "[a-z]{0,6}",
            cuts in proptest::collection::vec(0usize..12, 0..6),
        ) {
            let id = SessionId::generate();
            let mut log = Log::new("sys");
            let turn = log.user("hi");
            let before = log.events.len();
            for p in pieces.iter().filter(|p| !p.is_empty()) {
                log.checkpoint(turn, 1, p);
            }
            let whole = format!("{}{tail}", pieces.concat());
            log.answer(turn, 1, &whole);
            let appended = log.events.split_off(before);
            let mut f = Follow::new(id, &log.events);
            let mut frames = f.feed(&log.events, true);
            let mut at = 0;
            let mut cuts = cuts;
            cuts.sort_unstable();
            for cut in cuts.into_iter().chain([appended.len()]) {
                let cut = cut.clamp(at, appended.len());
                frames.extend(f.feed(&appended[at..cut], cut < appended.len()));
                at = cut;
            }
            proptest::prop_assert_eq!(text(&frames), whole);
            let starts_with_turn = matches!(frames.first(), Some(Frame::Turn { .. }));
            proptest::prop_assert!(starts_with_turn);
            proptest::prop_assert_eq!(end(&frames).map(|e| e.0), Some(EndStatus::Completed));
            let ends = frames.iter().filter(|f| matches!(f, Frame::End { .. })).count();
            proptest::prop_assert_eq!(ends, 1);
        }
    }
}
