//! Coordination between servers sharing one database (SPEC §16): the contract the engine
//! holds without knowing the store's backend, beside the store that opens it
//! ([`crate::session::store::coordinator`]).
//!
//! - [`LocalCoordinator`] (SQLite, one server: the lock file of §12 guarantees it): claims
//!   are free and nothing runs elsewhere; the engine's own registry is the whole truth.
//! - PostgreSQL's (`store::pg::coord`): a claim is an advisory lock on the session; stops
//!   and permission answers travel by `NOTIFY`.
//!
//! A claim covers what I7 excludes: a running attempt (from before its user message is
//! written until just before its `end` frame), a compaction by hand, and a delete. Other
//! servers see only the claim, so on PostgreSQL a compaction by hand or a delete under way
//! counts as a turn for `turn_active`, `/stop` and `/live` while it lasts.

use std::collections::HashSet;

use crate::session::events::SessionId;
use crate::session::store::error::StoreError;

/// What one server asks of the one running a session's attempt.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Note {
    /// Stop the attempt (`/stop`); only that one: a late note leaves a newer one alone.
    Stop {
        session: SessionId,
        turn: u64,
        attempt: u32,
    },
    /// The user's answer to the call the attempt waits on (`POST …/permissions/{call_id}`).
    Answer {
        session: SessionId,
        call_id: String,
        allow: bool,
        remember: bool,
        /// Names this answer: the deciding server writes it into `permission_resolved`,
        /// so the sender can tell whether its answer was the first. Absent from older
        /// servers' notes.
        #[serde(default)]
        answer_id: Option<String>,
    },
}

/// What a claim's [`Held::keep`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// Held all along (its connection answers).
    Held,
    /// Its connection broke and it was taken again: someone may have held it meanwhile,
    /// so the holder checks nobody wrote to the session since its own last write.
    TakenAgain,
    /// Another connection holds it now.
    Lost,
}

/// A session claimed by this server; released when dropped.
pub struct Claim {
    held: Option<Box<dyn Held>>,
}

/// What a claim holds across servers (a backend's lock).
pub trait Held: Send {
    /// Whether it still holds (taken again if it was lost and nobody holds it now).
    fn keep(&mut self) -> Result<Kept, StoreError>;
}

impl Claim {
    /// A claim that holds nothing (one server: the engine's registry excludes the rest).
    pub fn local() -> Claim {
        Claim { held: None }
    }

    /// A claim that holds `held` across servers.
    pub fn holding(held: Box<dyn Held>) -> Claim {
        Claim { held: Some(held) }
    }

    /// Whether the session is still this server's. [`Kept::Lost`] when another server
    /// holds it after this claim's connection broke, or when that cannot be told (the
    /// database out of reach): I7 comes first. Logged, since the attempt ends for it.
    /// [`Kept::TakenAgain`] is only as good as the caller's check that nobody wrote meanwhile.
    pub fn keep(&mut self, id: SessionId) -> Kept {
        let Some(held) = self.held.as_mut() else {
            return Kept::Held;
        };
        match held.keep() {
            Ok(Kept::Lost) => {
                log::warn!("{id}: another server took the session (this one's lock was lost)");
                Kept::Lost
            }
            Ok(kept) => kept,
            Err(e) => {
                log::warn!("{id}: lost the session's lock and cannot take it again: {e}");
                Kept::Lost
            }
        }
    }
}

/// What the engine asks of the other servers.
pub trait Coordinator: Send + Sync {
    /// Whether attempts may run on other servers (else the engine never asks below).
    fn shared(&self) -> bool;

    /// Claims the session across servers: `None` when another holder has it (a running
    /// attempt, a compaction or a delete, on any server).
    fn claim(&self, id: SessionId) -> Result<Option<Claim>, StoreError>;

    /// Which of `ids` are claimed now, by any server.
    fn claimed(&self, ids: &[SessionId]) -> Result<HashSet<SessionId>, StoreError>;

    /// Tells every server; the one running the note's session acts on it.
    fn notify(&self, note: &Note) -> Result<(), StoreError>;

    /// Delivers the notes of every server to `on_note`, from now on.
    fn listen(&self, on_note: Box<dyn Fn(Note) + Send + Sync>) -> std::io::Result<()>;
}

/// One server alone on its database.
pub struct LocalCoordinator;

impl Coordinator for LocalCoordinator {
    fn shared(&self) -> bool {
        false
    }

    fn claim(&self, _: SessionId) -> Result<Option<Claim>, StoreError> {
        Ok(Some(Claim::local()))
    }

    fn claimed(&self, _: &[SessionId]) -> Result<HashSet<SessionId>, StoreError> {
        Ok(HashSet::new())
    }

    fn notify(&self, _: &Note) -> Result<(), StoreError> {
        Ok(())
    }

    fn listen(&self, _: Box<dyn Fn(Note) + Send + Sync>) -> std::io::Result<()> {
        Ok(())
    }
}
