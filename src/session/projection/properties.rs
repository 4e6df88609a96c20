//! The invariants of the projections as properties over generated logs (edits included):
//! I3 at request points, alternating roles, a transcript that hides nothing and flags
//! exactly what edits abandoned, no panics, and the tail the store reads projecting like
//! the whole log.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::*;
use crate::session::events::kind;
use crate::session::testlog::Log;

/// How an attempt ends.
#[derive(Clone, Debug)]
pub(super) enum Outcome {
    /// Completes, after this many checkpoints.
    Complete(u8),
    /// Cut after this many checkpoints (at least one).
    Interrupted(u8),
    /// Ends with no text.
    Failed,
    /// The process died before any checkpoint: nothing is written.
    Killed,
    /// Used tools: `steps` provider calls, each but the last writing text and calling a
    /// tool; the last writes `last` checkpoints, then completes or is cut.
    Stepped { steps: u8, last: u8, complete: bool },
}

#[derive(Clone, Debug)]
pub(super) enum Action {
    /// A user message and its first attempt.
    Turn(Outcome),
    /// Another attempt of the newest turn (retry or regenerate).
    Retry(Outcome),
    /// Turn memory for the newest turn's newest completed attempt, before anything else.
    Memory,
    /// Turn memory for some earlier turn, arriving late.
    LateMemory(usize),
    /// A call that needed consent.
    Tool(Ask),
    /// A compaction through the end of one of the first messages of the context.
    Compact(usize),
    /// An edit of one of the editable user messages (SPEC §14) and the new message's
    /// first attempt.
    Edit(usize, Outcome),
    Title,
    UnknownKind,
    BadPayload,
}

/// A permission question: about `call_0` (a provider that sends no ids) or a call id of
/// its own, and its answer: none (the process died while asking), or allow or deny,
/// naming its attempt or not (logs written before answers named it).
#[derive(Clone, Debug)]
pub(super) struct Ask {
    repeated_id: bool,
    answer: Option<(bool, bool)>,
}

fn ask() -> impl Strategy<Value = Ask> {
    (
        any::<bool>(),
        proptest::option::weighted(0.8, (any::<bool>(), any::<bool>())),
    )
        .prop_map(|(repeated_id, answer)| Ask {
            repeated_id,
            answer,
        })
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        4 => (0u8..3).prop_map(Outcome::Complete),
        2 => (1u8..4).prop_map(Outcome::Interrupted),
        1 => Just(Outcome::Failed),
        1 => Just(Outcome::Killed),
        2 => (2u8..4, 0u8..3, any::<bool>())
            .prop_map(|(steps, last, complete)| Outcome::Stepped { steps, last, complete }),
    ]
}

pub(super) fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => outcome().prop_map(Action::Turn),
        2 => outcome().prop_map(Action::Retry),
        1 => Just(Action::Memory),
        1 => (0usize..8).prop_map(Action::LateMemory),
        2 => ask().prop_map(Action::Tool),
        1 => (0usize..8).prop_map(Action::Compact),
        2 => ((0usize..8), outcome()).prop_map(|(i, o)| Action::Edit(i, o)),
        1 => Just(Action::Title),
        1 => Just(Action::UnknownKind),
        1 => Just(Action::BadPayload),
    ]
}

/// A request sent to the model: the log as it was, and for which turn.
struct RequestPoint {
    log_len: usize,
    turn: u64,
    retry: bool,
}

/// Plays actions the way the turn engine would, recording every request point.
#[derive(Default)]
pub(super) struct Sim {
    turns: Vec<u64>,
    attempts: HashMap<u64, u32>,
    completed: HashMap<u64, u32>,
    requests: Vec<RequestPoint>,
    /// The seq ranges `[edited, rewind)` the edits abandoned: the oracle for step 0.
    edits: Vec<(u64, u64)>,
    /// Each question's seq and the decision it got.
    pub(super) decisions: HashMap<u64, Option<&'static str>>,
}

impl Sim {
    pub(super) fn run(actions: &[Action]) -> (Log, Sim) {
        let mut log = Log::new("system prompt");
        let mut sim = Sim::default();
        for a in actions {
            sim.play(&mut log, a);
        }
        (log, sim)
    }

    fn play(&mut self, log: &mut Log, action: &Action) {
        match action {
            Action::Turn(o) => {
                let n = log.next_seq();
                let turn = log.user(&format!("question {n}"));
                self.turns.push(turn);
                self.attempt(log, turn, o, false);
            }
            Action::Retry(o) => {
                let boundary = boundary(log);
                if let Some(&turn) = self.turns.last().filter(|t| **t > boundary) {
                    self.attempt(log, turn, o, true);
                }
            }
            Action::Memory => {
                if let Some(turn) = self.turns.last() {
                    if let Some(a) = self.completed.get(turn) {
                        log.memory(*turn, *a, "early finding");
                    }
                }
            }
            Action::LateMemory(i) => {
                let done: Vec<(u64, u32)> = self.completed.iter().map(|(t, a)| (*t, *a)).collect();
                if !done.is_empty() {
                    let (t, a) = done[i % done.len()];
                    log.memory(t, a, "late finding");
                }
            }
            Action::Tool(ask) => {
                // A call that needed consent: asked, answered, run. None of it is sent.
                let call = match ask.repeated_id {
                    true => "call_0".to_owned(),
                    false => format!("c{}", log.events.len()),
                };
                let turn = self.turns.last().copied().unwrap_or(0);
                let asked = log.asked(turn, &call, "fs__write_file");
                let decision = ask.answer.map(|(named, allow)| {
                    let decision = if allow { "allow" } else { "deny" };
                    match named {
                        true => log.answered_in(turn, &call, decision),
                        false => log.answered(&call, decision, false),
                    };
                    decision
                });
                self.decisions.insert(asked, decision);
                log.tool();
            }
            Action::Compact(i) => self.compact(log, *i),
            Action::Edit(i, o) => {
                // What the engine accepts: a user message of the current branch after the
                // newest visible compaction's boundary.
                let boundary = boundary(log);
                let editable: Vec<u64> = visible(&log.events)
                    .iter()
                    .filter(|e| e.kind == kind::USER_MESSAGE && e.seq > boundary)
                    .map(|e| e.seq)
                    .collect();
                if let Some(&edited) = editable.get(i % editable.len().max(1)) {
                    self.edits.push((edited, log.next_seq()));
                    let turn = log.edit(edited, &format!("edit of {edited}"));
                    self.turns.push(turn);
                    self.attempt(log, turn, o, false);
                }
            }
            Action::Title => {
                log.title("a title");
            }
            Action::UnknownKind => {
                log.raw("from_the_future", r#"{"turn": 1}"#);
            }
            Action::BadPayload => {
                log.raw(kind::ASSISTANT_TURN, r#"{"turn": "x"}"#);
            }
        }
    }

    fn attempt(&mut self, log: &mut Log, turn: u64, o: &Outcome, retry: bool) {
        let attempt = {
            let n = self.attempts.entry(turn).or_insert(0);
            *n += 1;
            *n
        };
        self.requests.push(RequestPoint {
            log_len: log.events.len(),
            turn,
            retry,
        });
        match o {
            Outcome::Complete(cps) => {
                for c in 0..*cps {
                    log.checkpoint(turn, attempt, &format!("part{c} "));
                }
                log.answer(turn, attempt, &format!("answer {turn}.{attempt}"));
                self.completed.insert(turn, attempt);
            }
            Outcome::Interrupted(cps) => {
                for c in 0..*cps {
                    log.checkpoint(turn, attempt, &format!("cut{c} "));
                }
            }
            Outcome::Failed => {
                log.failed(turn, attempt, "provider_error");
            }
            Outcome::Killed => {}
            Outcome::Stepped {
                steps,
                last,
                complete,
            } => {
                self.stepped(log, (turn, attempt), u32::from(*steps), *last, *complete);
            }
        }
    }

    /// An attempt that used tools, written as the engine writes one: each step's text
    /// checkpointed (the steps joined by a blank line) before its call runs.
    fn stepped(
        &mut self,
        log: &mut Log,
        (turn, attempt): (u64, u32),
        steps: u32,
        last: u8,
        complete: bool,
    ) {
        let mut text = String::new();
        for step in 1..=steps {
            let calls = step < steps;
            for c in 0..if calls { 1 } else { last } {
                let join = if c == 0 && !text.is_empty() {
                    "\n\n"
                } else {
                    ""
                };
                let part = format!("{join}s{step}c{c}");
                text.push_str(&part);
                log.step_checkpoint(turn, attempt, step, &part);
            }
            if calls {
                log.tool_of(turn, attempt, step);
            }
        }
        if complete {
            text.push_str(if last == 0 { "\n\nend" } else { " end" });
            log.answer_of_steps(turn, attempt, &text, steps);
            self.completed.insert(turn, attempt);
        }
    }

    /// Leaves one attempt running at the end of the log, as the engine would: a retry of
    /// the newest turn or a new turn, with `checkpoints` written so far and no end.
    /// Returns it as (turn, attempt).
    pub(super) fn running(&mut self, log: &mut Log, retry: bool, checkpoints: u8) -> (u64, u32) {
        let turn = match self.turns.last() {
            Some(&t) if retry && t > boundary(log) => t,
            _ => {
                let t = log.user("a question being answered");
                self.turns.push(t);
                t
            }
        };
        let attempt = {
            let n = self.attempts.entry(turn).or_insert(0);
            *n += 1;
            *n
        };
        for c in 0..checkpoints {
            log.checkpoint(turn, attempt, &format!("live{c} "));
        }
        (turn, attempt)
    }

    /// Compacts through the end of an assistant message in the first half of the current
    /// context, as the planner would (never ending on an unanswered user message).
    fn compact(&mut self, log: &mut Log, pick: usize) {
        let ctx = log.context();
        let half = ctx.messages.len() / 2;
        let ends: Vec<u64> = ctx.messages[..half]
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .map(|m| m.last_seq)
            .collect();
        if let Some(&through) = ends.get(pick % ends.len().max(1)) {
            if through > boundary(log) {
                log.compaction(&format!("summary through {through}"), through);
            }
        }
    }

    /// Whether an edit abandoned the event at `seq`.
    fn abandoned(&self, seq: u64) -> bool {
        self.edits.iter().any(|&(from, to)| from <= seq && seq < to)
    }
}

/// The newest visible compaction's boundary.
fn boundary(log: &Log) -> u64 {
    visible_compaction_boundary(&log.events)
}

/// Whether the prefix changed on purpose between two points of the log: a compaction or a
/// rewind (I3's allowed changes).
fn compaction_between(events: &[Event], from: usize, to: usize) -> bool {
    events[from..to]
        .iter()
        .any(|e| e.kind == kind::COMPACTION_APPLIED || e.kind == kind::REWIND)
}

fn alternates(ctx: &Context) -> bool {
    ctx.messages.windows(2).all(|w| w[0].role != w[1].role)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// I3: between two consecutive requests with no compaction between them, every message
    /// of the first reappears byte-identical, in order, at the head of the second; a
    /// retry's request equals its original's.
    #[test]
    fn prefix_stability_at_request_points(actions in proptest::collection::vec(action(), 1..40)) {
        let (log, sim) = Sim::run(&actions);
        let request = |p: &RequestPoint| llm_request(&log.events[..p.log_len], p.turn);
        for pair in sim.requests.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            if compaction_between(&log.events, a.log_len, b.log_len) {
                continue;
            }
            let (ra, rb) = (request(a), request(b));
            prop_assert_eq!(&ra.system, &rb.system);
            prop_assert!(rb.messages.len() >= ra.messages.len(), "{:#?}\n{:#?}", ra, rb);
            prop_assert_eq!(&rb.messages[..ra.messages.len()], &ra.messages[..]);
            if b.retry {
                prop_assert_eq!(&ra, &rb, "a retry resends its original request");
            }
        }
        // A retry equals the first request of its turn, not only the one just before it.
        let mut first: HashMap<u64, &RequestPoint> = HashMap::new();
        for p in &sim.requests {
            let original = *first.entry(p.turn).or_insert(p);
            if p.retry && !compaction_between(&log.events, original.log_len, p.log_len) {
                prop_assert_eq!(request(original), request(p));
            }
        }
    }

    /// Roles alternate in every projection: of every prefix of the log, and every request.
    #[test]
    fn roles_always_alternate(actions in proptest::collection::vec(action(), 1..30)) {
        let (log, sim) = Sim::run(&actions);
        for n in 1..=log.events.len() {
            prop_assert!(alternates(&llm_context(&log.events[..n])));
        }
        for p in &sim.requests {
            let r = llm_request(&log.events[..p.log_len], p.turn);
            prop_assert!(alternates(&r));
            prop_assert_eq!(r.messages.last().map(|m| m.role), Some(Role::User));
        }
    }

    /// I6: the transcript holds every user message, answer, partial (one per interrupted
    /// attempt, and one `streaming` item for the running attempt), failure, compaction,
    /// title and tool trace, and every unreadable event.
    #[test]
    fn the_transcript_hides_nothing(
        actions in proptest::collection::vec(action(), 1..40),
        running in proptest::option::of((any::<bool>(), 0u8..4)),
    ) {
        let (mut log, mut sim) = Sim::run(&actions);
        let active = running.map(|(retry, cps)| sim.running(&mut log, retry, cps));
        let items = ui_transcript(&log.events, active);
        let count = |k: &str| log.events.iter().filter(|e| e.kind == k && matches!(e.decode(), Decoded::Known(_))).count();
        let shown = |f: fn(&ItemBody) -> bool| items.iter().filter(|i| f(&i.body)).count();
        prop_assert_eq!(shown(|b| matches!(b, ItemBody::User { .. })), count(kind::USER_MESSAGE));
        prop_assert_eq!(shown(|b| matches!(b, ItemBody::Assistant { .. })), count(kind::ASSISTANT_TURN));
        prop_assert_eq!(shown(|b| matches!(b, ItemBody::Error { .. })), count(kind::TURN_FAILED));
        prop_assert_eq!(shown(|b| matches!(b, ItemBody::Compaction { .. })), count(kind::COMPACTION_APPLIED));
        prop_assert_eq!(shown(|b| matches!(b, ItemBody::Title { .. })), count(kind::SESSION_TITLED));
        prop_assert_eq!(shown(|b| matches!(b, ItemBody::Tool(_))), count(kind::TOOL_EXECUTION));
        prop_assert_eq!(shown(|b| matches!(b, ItemBody::Permission { .. })), count(kind::PERMISSION_REQUESTED));
        prop_assert_eq!(shown(|b| matches!(b, ItemBody::Rewind { .. })), count(kind::REWIND));
        // Exactly what the edits abandoned is flagged, nothing else.
        for i in &items {
            prop_assert_eq!(i.abandoned, sim.abandoned(i.seq), "item {}", i.seq);
        }
        let unreadable = log.events.iter().filter(|e| !matches!(e.decode(), Decoded::Known(_))).count();
        prop_assert_eq!(shown(|b| matches!(b, ItemBody::Unreadable { .. })), unreadable);
        let mut interrupted = HashSet::new();
        let mut completed = HashSet::new();
        for e in &log.events {
            match e.decode() {
                Decoded::Known(Payload::PendingState(c)) => { interrupted.insert((c.turn, c.attempt)); }
                Decoded::Known(Payload::AssistantTurn(a)) => { completed.insert((a.turn, a.attempt)); }
                _ => {}
            }
        }
        let partials: HashSet<(u64, u32)> = interrupted.difference(&completed).copied().collect();
        let streams = active.filter(|a| partials.contains(a)).into_iter().count();
        prop_assert_eq!(shown(|b| matches!(b, ItemBody::Interrupted { .. })), partials.len() - streams);
        prop_assert_eq!(shown(|b| matches!(b, ItemBody::Streaming { .. })), streams);
        prop_assert!(items.windows(2).all(|w| w[0].seq < w[1].seq));
    }

    /// Every question shows the decision it got, however often its call id repeats across
    /// turns (`call_0` every turn), with answers that name their attempt or not, and
    /// questions nobody answered among them.
    #[test]
    fn every_question_shows_its_own_answer(actions in proptest::collection::vec(action(), 1..40)) {
        let (log, sim) = Sim::run(&actions);
        let items = ui_transcript(&log.events, None);
        let mut questions = 0;
        for i in &items {
            if let ItemBody::Permission { decision, .. } = &i.body {
                questions += 1;
                prop_assert_eq!(decision.as_deref(), sim.decisions[&i.seq], "question {}", i.seq);
            }
        }
        prop_assert_eq!(questions, sim.decisions.len());
    }

    /// Knowing which attempt runs changes only that attempt's item, from `interrupted` to
    /// `streaming` with the same fields, at the same place.
    #[test]
    fn the_running_attempt_only_changes_its_own_items_kind(
        actions in proptest::collection::vec(action(), 0..40),
        retry in any::<bool>(),
        checkpoints in 0u8..4,
    ) {
        let (mut log, mut sim) = Sim::run(&actions);
        let active = sim.running(&mut log, retry, checkpoints);
        let offline = ui_transcript(&log.events, None);
        let live = ui_transcript(&log.events, Some(active));
        prop_assert_eq!(offline.len(), live.len());
        for (o, l) in offline.iter().zip(&live) {
            prop_assert_eq!((o.seq, &o.created_at), (l.seq, &l.created_at));
            match (&o.body, &l.body) {
                (
                    ItemBody::Interrupted { turn, attempt, text, reasoning, ended, last_step },
                    ItemBody::Streaming { turn: t, attempt: a, text: x, reasoning: r, last_step: s },
                ) => {
                    prop_assert_eq!((*turn, *attempt), active);
                    // A running attempt has not ended: nothing says why it did.
                    prop_assert_eq!(ended, &None);
                    prop_assert_eq!((turn, attempt, text, reasoning, last_step), (t, a, x, r, s));
                }
                (o, l) => prop_assert_eq!(o, l),
            }
        }
    }

    /// What the store reads (`session_started` and the events after the newest visible
    /// compaction's boundary, found from the rewinds and compactions alone) projects
    /// exactly like the whole log, edits included.
    #[test]
    fn the_live_tail_projects_like_the_whole_log(actions in proptest::collection::vec(action(), 1..40)) {
        let (log, _) = Sim::run(&actions);
        let shaping: Vec<Event> = log.events.iter()
            .filter(|e| e.kind == kind::REWIND || e.kind == kind::COMPACTION_APPLIED)
            .cloned()
            .collect();
        let boundary = visible_compaction_boundary(&shaping);
        prop_assert_eq!(boundary, visible_compaction_boundary(&log.events));
        let tail: Vec<Event> = log.events.iter().filter(|e| e.seq == 1 || e.seq > boundary).cloned().collect();
        prop_assert_eq!(llm_context(&tail), log.context());
    }

    /// Nothing of an abandoned branch reaches the model: every user message the context
    /// holds is on the current branch, and every one of the current branch after the
    /// boundary is there.
    #[test]
    fn abandoned_messages_never_reach_the_model(actions in proptest::collection::vec(action(), 1..40)) {
        let (log, sim) = Sim::run(&actions);
        let boundary = boundary(&log);
        let ctx = log.context();
        // Merged messages are joined by a blank line; the generated texts hold none.
        let sent: HashSet<&str> = ctx.messages.iter().flat_map(|m| m.content.split("\n\n")).collect();
        for e in &log.events {
            if let Decoded::Known(Payload::UserMessage(m)) = e.decode() {
                if e.seq > boundary {
                    // Texts are unique per seq ("question N", "edit of N").
                    prop_assert_eq!(sent.contains(m.text.as_str()), !sim.abandoned(e.seq), "{}", m.text);
                }
            }
        }
    }

    /// Neither projection panics on any log: any kinds, any payloads, any seqs.
    #[test]
    fn projections_never_panic(raw in proptest::collection::vec((
        prop_oneof![
            Just(kind::SESSION_STARTED), Just(kind::USER_MESSAGE), Just(kind::PENDING_STATE),
            Just(kind::ASSISTANT_TURN), Just(kind::TURN_FAILED), Just(kind::TURN_MEMORY),
            Just(kind::COMPACTION_APPLIED), Just(kind::SESSION_TITLED), Just(kind::TOOL_EXECUTION),
            Just(kind::PERMISSION_REQUESTED), Just(kind::PERMISSION_RESOLVED), Just(kind::REWIND),
            Just("weird"),
        ],
        prop_oneof![
            Just(String::from("{}")),
            Just(String::from("not json")),
            (0u64..6, 0u32..3, "[a-z]{0,3}", any::<bool>()).prop_map(|(t, a, s, r)| serde_json::json!({
                "turn": t, "attempt": a, "text": s, "summary": s, "replaces_through_seq": t,
                "tokens_before": 1, "tokens_after": 1, "model": "m", "provider": "p",
                "code": s, "message": s, "system": s, "title": s, "by": "user",
                "reasoning": if r { Some(s.clone()) } else { None },
                "key_findings": [s], "call_id": "c", "name": "n", "status": "ok",
                "decision": "allow", "args": s, "to_seq": t, "edited_seq": t + 1,
            }).to_string()),
        ],
        0u64..40,
    ), 0..40)) {
        let events: Vec<Event> = raw.into_iter().map(|(k, p, seq)| Event {
            seq, kind: k.into(), payload: p, created_at: String::new(),
        }).collect();
        let ctx = llm_context(&events);
        prop_assert!(alternates(&ctx));
        let _ = ui_transcript(&events, None);
        for e in &events {
            let _ = ui_transcript(&events, Some((e.seq, 1)));
        }
        for e in &events {
            let _ = llm_request(&events, e.seq);
        }
    }
}
