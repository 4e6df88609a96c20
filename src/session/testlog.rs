//! A session log built in memory, for the pure tests of projections and compaction.

use crate::session::Payload;
use crate::session::events::{
    AssistantTurn, AttemptEnd, CompactionApplied, Event, PendingState, PermissionRequested,
    PermissionResolved, ResultDigest, Rewind, SessionStarted, SessionTitled, TitledBy,
    ToolExecution, TurnFailed, TurnMemory, Usage, UserMessage,
};
use crate::session::projection::{Context, llm_context};

/// A log under construction: seqs are assigned in order, starting with `session_started`.
pub(crate) struct Log {
    pub events: Vec<Event>,
}

impl Log {
    pub fn new(system: &str) -> Log {
        let mut log = Log { events: vec![] };
        log.push(Payload::SessionStarted(SessionStarted {
            title: None,
            system: system.into(),
            forked_from: None,
            imported_from: None,
        }));
        log
    }

    pub fn next_seq(&self) -> u64 {
        self.events.len() as u64 + 1
    }

    pub fn raw(&mut self, kind: &str, payload: &str) -> u64 {
        let seq = self.next_seq();
        self.events.push(Event {
            seq,
            kind: kind.into(),
            payload: payload.into(),
            // One second apart, in seq order: newest first by time is by seq too.
            created_at: crate::clock::format_timestamp(
                jiff::Timestamp::from_second(1_796_000_000 + seq as i64)
                    .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
            ),
        });
        seq
    }

    pub fn push(&mut self, p: Payload) -> u64 {
        self.raw(p.kind(), &p.to_json())
    }

    pub fn user(&mut self, text: &str) -> u64 {
        self.push(Payload::UserMessage(UserMessage { text: text.into() }))
    }

    pub fn answer(&mut self, turn: u64, attempt: u32, text: &str) -> u64 {
        let reasoning = format!("thinking about {text}");
        self.answer_with(turn, attempt, text, Some(reasoning), 1)
    }

    fn answer_with(
        &mut self,
        turn: u64,
        attempt: u32,
        text: &str,
        reasoning: Option<String>,
        steps: u32,
    ) -> u64 {
        self.push(Payload::AssistantTurn(AssistantTurn {
            turn,
            attempt,
            text: text.into(),
            reasoning,
            provider: "mock".into(),
            model: "m".into(),
            finish_reason: Some("stop".into()),
            usage: Usage::default(),
            duration_ms: 3,
            ledger_id: None,
            steps,
        }))
    }

    pub fn checkpoint(&mut self, turn: u64, attempt: u32, text: &str) -> u64 {
        self.checkpoint_of(turn, attempt, None, text)
    }

    /// A checkpoint of step `step` of an attempt that used tools (SPEC §13).
    pub fn step_checkpoint(&mut self, turn: u64, attempt: u32, step: u32, text: &str) -> u64 {
        self.checkpoint_of(turn, attempt, Some(step), text)
    }

    fn checkpoint_of(&mut self, turn: u64, attempt: u32, step: Option<u32>, text: &str) -> u64 {
        self.push(Payload::PendingState(PendingState {
            turn,
            attempt,
            text: text.into(),
            reasoning: None,
            ended: None,
            step,
        }))
    }

    /// A completed answer that took `steps` provider calls.
    pub fn answer_of_steps(&mut self, turn: u64, attempt: u32, text: &str, steps: u32) -> u64 {
        self.answer_with(turn, attempt, text, None, steps)
    }

    /// The last checkpoint of an attempt that ended abnormally, saying why.
    pub fn ended(&mut self, turn: u64, attempt: u32, text: &str, code: &str) -> u64 {
        self.push(Payload::PendingState(PendingState {
            turn,
            attempt,
            text: text.into(),
            reasoning: None,
            ended: Some(AttemptEnd {
                code: code.into(),
                message: format!("ended: {code}"),
            }),
            step: None,
        }))
    }

    pub fn failed(&mut self, turn: u64, attempt: u32, code: &str) -> u64 {
        self.push(Payload::TurnFailed(TurnFailed {
            turn,
            attempt,
            code: code.into(),
            message: "it failed".into(),
            reasoning: None,
        }))
    }

    pub fn memory(&mut self, turn: u64, attempt: u32, finding: &str) -> u64 {
        self.push(Payload::TurnMemory(TurnMemory {
            turn,
            attempt,
            files_changed: vec![],
            failures: vec![],
            key_findings: vec![finding.into()],
        }))
    }

    pub fn compaction(&mut self, summary: &str, through: u64) -> u64 {
        self.push(Payload::CompactionApplied(CompactionApplied {
            summary: summary.into(),
            replaces_through_seq: through,
            tokens_before: 100,
            tokens_after: 10,
            model: "m".into(),
            method: crate::session::events::method::LLM.into(),
        }))
    }

    pub fn tool(&mut self) -> u64 {
        self.tool_of(0, 1, 1)
    }

    /// A call of step `step` of an attempt.
    pub fn tool_of(&mut self, turn: u64, attempt: u32, step: u32) -> u64 {
        self.push(Payload::ToolExecution(ToolExecution {
            turn,
            attempt,
            step,
            call_id: "c1".into(),
            name: "fs__ls".into(),
            server: "fs".into(),
            args: r#"{"path": "."}"#.into(),
            status: "ok".into(),
            result_digest: ResultDigest::default(),
            error: None,
            duration_ms: 1,
        }))
    }

    /// A question to the user about call `call_id` of `turn`'s first attempt.
    pub fn asked(&mut self, turn: u64, call_id: &str, name: &str) -> u64 {
        self.push(Payload::PermissionRequested(PermissionRequested {
            turn,
            attempt: 1,
            call_id: call_id.into(),
            name: name.into(),
            args: "{}".into(),
        }))
    }

    /// The user's answer to the question about `call_id`, as logs written before answers
    /// named their attempt have it.
    pub fn answered(&mut self, call_id: &str, decision: &str, remember: bool) -> u64 {
        self.resolution(None, call_id, decision, remember)
    }

    /// The user's answer to the question about `call_id` of `turn`'s first attempt.
    pub fn answered_in(&mut self, turn: u64, call_id: &str, decision: &str) -> u64 {
        self.resolution(Some(turn), call_id, decision, false)
    }

    fn resolution(
        &mut self,
        turn: Option<u64>,
        call_id: &str,
        decision: &str,
        remember: bool,
    ) -> u64 {
        self.push(Payload::PermissionResolved(PermissionResolved {
            turn,
            attempt: turn.map(|_| 1),
            call_id: call_id.into(),
            decision: decision.into(),
            by: "user".into(),
            remember,
            answer_id: None,
        }))
    }

    pub fn title(&mut self, title: &str) -> u64 {
        self.push(Payload::SessionTitled(SessionTitled {
            title: title.into(),
            by: TitledBy::Auto,
        }))
    }

    /// An edit of the user message at `edited` (SPEC §14): the rewind, then the new
    /// message. Returns the new message's seq.
    pub fn edit(&mut self, edited: u64, text: &str) -> u64 {
        self.push(Payload::Rewind(Rewind {
            to_seq: edited - 1,
            edited_seq: edited,
        }));
        self.user(text)
    }

    pub fn context(&self) -> Context {
        llm_context(&self.events)
    }
}
