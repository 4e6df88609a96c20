//! Helpers shared by the integration tests.

use std::path::PathBuf;

use brain::clock::Clock;
use brain::session::events::{
    AssistantTurn, CompactionApplied, PendingState, SessionArchived, SessionTitled, TitledBy,
    TurnFailed, TurnMemory, Usage, UserMessage,
};
use brain::session::{Payload, Store, StoreOptions, SyncMode};

/// A fresh database in its own temporary directory (removed on drop).
pub struct TempDb {
    pub dir: tempfile::TempDir,
}

impl TempDb {
    pub fn new() -> TempDb {
        TempDb {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("brain.db")
    }

    /// Opens the store with `synchronous=NORMAL` (crash-safe, quicker than FULL in tests).
    pub fn open(&self) -> Store {
        self.open_with(Clock::system())
    }

    pub fn open_with(&self, clock: Clock) -> Store {
        Store::open(
            &self.path(),
            StoreOptions {
                sync: SyncMode::Normal,
                clock,
                ..StoreOptions::default()
            },
        )
        .expect("open store")
    }

    /// A raw connection to the same file, for looking underneath the store.
    pub fn raw(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.path()).expect("raw connection")
    }
}

pub fn user(text: &str) -> Payload {
    Payload::UserMessage(UserMessage { text: text.into() })
}

pub fn answer(turn: u64, attempt: u32, text: &str) -> Payload {
    Payload::AssistantTurn(AssistantTurn {
        turn,
        attempt,
        text: text.into(),
        reasoning: None,
        provider: "mock".into(),
        model: "m".into(),
        finish_reason: Some("stop".into()),
        usage: Usage::default(),
        duration_ms: 1,
        ledger_id: None,
    })
}

pub fn pending(turn: u64, attempt: u32, text: &str) -> Payload {
    Payload::PendingState(PendingState {
        turn,
        attempt,
        text: text.into(),
        reasoning: None,
    })
}

pub fn failed(turn: u64, attempt: u32, code: &str) -> Payload {
    Payload::TurnFailed(TurnFailed {
        turn,
        attempt,
        code: code.into(),
        message: "it failed".into(),
        reasoning: None,
    })
}

pub fn memory(turn: u64, attempt: u32) -> Payload {
    Payload::TurnMemory(TurnMemory {
        turn,
        attempt,
        files_changed: vec![],
        failures: vec![],
        key_findings: vec!["k".into()],
    })
}

pub fn compaction(summary: &str, through: u64) -> Payload {
    Payload::CompactionApplied(CompactionApplied {
        summary: summary.into(),
        replaces_through_seq: through,
        tokens_before: 100,
        tokens_after: 10,
        model: "m".into(),
    })
}

pub fn titled(title: &str, by: TitledBy) -> Payload {
    Payload::SessionTitled(SessionTitled {
        title: title.into(),
        by,
    })
}

pub fn archived(archived: bool) -> Payload {
    Payload::SessionArchived(SessionArchived { archived })
}

/// Asserts a session's seqs are exactly 1..=n.
pub fn assert_gapless(seqs: &[u64]) {
    for (i, seq) in seqs.iter().enumerate() {
        assert_eq!(*seq, i as u64 + 1, "seqs not gapless: {seqs:?}");
    }
}
