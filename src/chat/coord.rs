//! The engine's side of coordination between servers sharing one database (SPEC §16,
//! the contract in [`crate::session::store::coord`]): claims, and `/stop`, `/live` and permission
//! answers for attempts another server runs.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use super::frames::{ActiveTurn, Subscription};
use super::state::{Engine, EngineError, LIVE_RETENTION, lock};
use crate::session::events::{Event, Payload};
pub use crate::session::store::coord::{Claim, Coordinator, Kept, LocalCoordinator, Note};
use crate::session::store::{AttemptMark, Writer};
use crate::session::{SessionId, Store, StoreError};

/// How often, and for how long at most, a `/stop` for an attempt running on another
/// server is sent again while the session stays claimed: a note sent while that server's
/// listener reconnects is lost to it (its backoff is at most 5 s).
pub const STOP_RESEND_EVERY: Duration = Duration::from_millis(500);
pub const STOP_RESEND_FOR: Duration = Duration::from_secs(30);

/// How long, and how often, a permission answer sent to another server waits for the log
/// to say what was decided, so an answer that lost a race is told so (409).
pub const ANSWER_CONFIRM_FOR: Duration = Duration::from_secs(5);
pub const ANSWER_CONFIRM_POLL: Duration = Duration::from_millis(50);

impl Engine {
    /// Claims the session for an attempt, a compaction or a delete: `turn_in_flight` when
    /// another holds it (I7 across servers).
    pub(super) fn claim(&self, id: SessionId) -> Result<Claim, EngineError> {
        self.inner
            .registry
            .coord
            .claim(id)?
            .ok_or(EngineError::TurnInFlight)
    }

    /// Which of `ids` are claimed by some server (none without other servers). A failed
    /// look is logged and counts as none: a list page still answers.
    pub(super) fn claimed_elsewhere(&self, ids: &[SessionId]) -> HashSet<SessionId> {
        if !self.inner.registry.coord.shared() {
            return HashSet::new();
        }
        self.inner.registry.coord.claimed(ids).unwrap_or_else(|e| {
            log::warn!("cannot tell which sessions other servers are answering: {e}");
            HashSet::new()
        })
    }

    /// Which of `ids` have an attempt running, here or elsewhere: one look for a page.
    pub fn turns_active(&self, ids: &[SessionId]) -> HashSet<SessionId> {
        let mut active = self.claimed_elsewhere(ids);
        let turns = lock(&self.inner.registry.turns);
        active.extend(
            ids.iter()
                .filter(|id| turns.get(id).is_some_and(|t| !t.is_done())),
        );
        active
    }

    /// `/stop` of an attempt this server does not run: sent to whichever does, and sent
    /// again in the background while the session stays claimed (see [`STOP_RESEND_EVERY`]).
    /// The note names the attempt the log shows running, so a late one leaves a newer
    /// attempt alone.
    pub(super) fn stop_elsewhere(&self, id: SessionId) -> Result<(), EngineError> {
        if !self.claimed_elsewhere(&[id]).contains(&id) {
            return Err(EngineError::NoActiveTurn);
        }
        let events = self.inner.deps.store.events_for_context(id)?;
        let (turn, attempt) = super::follow::Follow::new(id, &events).running();
        let note = Note::Stop {
            session: id,
            turn,
            attempt,
        };
        self.inner.registry.coord.notify(&note)?;
        if lock(&self.inner.registry.stopping).insert(id) {
            let inner = Arc::downgrade(&self.inner);
            let spawned = thread::Builder::new()
                .name("brain-stop-resend".into())
                .spawn(move || resend_stop(&inner, &note, id));
            if let Err(e) = spawned {
                lock(&self.inner.registry.stopping).remove(&id);
                log::warn!("{id}: cannot start a thread to send the stop again: {e}");
            }
        }
        Ok(())
    }

    /// `/live` of an attempt this server does not run, followed through its log; `None`
    /// when no server runs one.
    pub(super) fn live_elsewhere(
        &self,
        id: SessionId,
    ) -> Result<Option<Subscription>, EngineError> {
        if !self.inner.registry.coord.shared() {
            return Ok(None);
        }
        if self.claimed_elsewhere(&[id]).contains(&id) {
            return super::follow::spawn(&self.inner, id).map(Some);
        }
        // One that ended on another server within LIVE_RETENTION, replayed from its log.
        let events = self.inner.deps.store.events_for_context(id)?;
        let Some((frames, ended_at)) = super::follow::Follow::replay(id, &events) else {
            return Ok(None);
        };
        let now = self.inner.deps.store.clock().now();
        let recent = crate::clock::parse_timestamp(&ended_at)
            .and_then(|t| std::time::Duration::try_from(now.duration_since(t)).ok())
            .is_some_and(|ago| ago < LIVE_RETENTION);
        if !recent {
            return Ok(None);
        }
        let turn = Arc::new(ActiveTurn::new(id, 0, 0));
        super::follow::deliver(&turn, frames);
        Ok(Some(turn.subscribe()))
    }

    /// The attempt another server runs, as its log shows it (for the transcript).
    pub(super) fn attempt_elsewhere(&self, id: SessionId) -> Option<(u64, u32)> {
        if !self.claimed_elsewhere(&[id]).contains(&id) {
            return None;
        }
        match self.inner.deps.store.events_for_context(id) {
            Ok(events) => Some(super::follow::Follow::new(id, &events).running()),
            Err(e) => {
                log::warn!("cannot read the log of {id}: {e}");
                None
            }
        }
    }

    /// A permission answer for an attempt this server does not run: sent to whichever
    /// does, if the log shows that call waiting (else 404 `no_pending_permission`, which
    /// the caller turns into 409 `already_decided` when the log shows it decided). Then
    /// it waits up to [`ANSWER_CONFIRM_FOR`] for the log to say what stands: the answer is
    /// named by a fresh id the deciding server writes into `permission_resolved`, so of two
    /// answers racing through different servers only the one that decided is told 200, even
    /// when both said the same (a server older than `answer_id` writes none: its callers'
    /// racers are all told 409). Left open: when the decision is not in the
    /// log by then (the note lost while that server's listener reconnected, or its writes
    /// slow), the answer is taken as sent.
    pub(super) fn answer_elsewhere(
        &self,
        id: SessionId,
        call_id: &str,
        answer: super::consent::Answer,
    ) -> Result<(), EngineError> {
        if !self.claimed_elsewhere(&[id]).contains(&id) {
            return Err(EngineError::NoPendingPermission);
        }
        let events = self.inner.deps.store.events_for_context(id)?;
        let mut log = super::follow::Follow::new(id, &events);
        log.feed(&events, true);
        if !log.waiting(call_id) {
            return Err(EngineError::NoPendingPermission);
        }
        let store = &self.inner.deps.store;
        let Some((question, None)) = super::consent::newest_question(store, id, call_id)? else {
            // Decided since the log was read: the caller says by whom.
            return Err(EngineError::NoPendingPermission);
        };
        let answer_id = uuid::Uuid::new_v4().to_string();
        self.inner.registry.coord.notify(&Note::Answer {
            session: id,
            call_id: call_id.to_owned(),
            allow: answer.allow,
            remember: answer.remember,
            answer_id: Some(answer_id.clone()),
        })?;
        // The server running the attempt takes the first answer it gets and writes its id:
        // this one is told it was accepted only if that id is ours (another answer saying
        // the same thing through another server lost all the same).
        let until = Instant::now() + ANSWER_CONFIRM_FOR;
        while Instant::now() < until {
            match super::consent::answer_to(store, id, call_id, question)? {
                Some(d) if d.answer_id.as_deref() == Some(answer_id.as_str()) => return Ok(()),
                Some(d) => {
                    return Err(EngineError::AlreadyDecided(super::consent::Decided {
                        decision: d.decision,
                        by: d.by,
                    }));
                }
                None => thread::sleep(ANSWER_CONFIRM_POLL),
            }
        }
        // Not decided yet (the note may have been lost to a listener that reconnected: the
        // question waits for another answer or its timeout).
        Ok(())
    }

    /// Acts on what other servers ask of this one's attempts: stops and permission answers.
    pub(super) fn listen_to_others(&self) {
        if !self.inner.registry.coord.shared() {
            return;
        }
        let inner = Arc::downgrade(&self.inner);
        let on_note = move |note: Note| {
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let id = match &note {
                Note::Stop { session: id, .. } | Note::Answer { session: id, .. } => *id,
            };
            let turn = lock(&inner.registry.turns)
                .get(&id)
                .filter(|t| !t.is_done())
                .cloned();
            let Some(turn) = turn else {
                return;
            };
            match note {
                Note::Stop {
                    turn: t, attempt, ..
                } => {
                    if (turn.turn, turn.attempt) == (t, attempt) {
                        turn.request_stop();
                    }
                }
                Note::Answer {
                    call_id,
                    allow,
                    remember,
                    answer_id,
                    ..
                } => {
                    let answer = super::consent::Answer { allow, remember };
                    // Answered meanwhile (its timeout, another answer): nothing waits.
                    let _ = super::consent::answer_waiting(&turn, &call_id, answer, answer_id);
                }
            }
        };
        if let Err(e) = self.inner.registry.coord.listen(Box::new(on_note)) {
            log::error!("cannot listen for requests from other servers: {e}");
        }
    }
}

/// Sends `note` (a stop) again every [`STOP_RESEND_EVERY`] while its session stays claimed,
/// for at most [`STOP_RESEND_FOR`], or until the engine goes.
fn resend_stop(inner: &std::sync::Weak<super::state::Inner>, note: &Note, id: SessionId) {
    let until = Instant::now() + STOP_RESEND_FOR;
    let mut released = false;
    while Instant::now() < until && !released {
        thread::sleep(STOP_RESEND_EVERY);
        let Some(inner) = inner.upgrade() else {
            return;
        };
        // A look that fails counts as claimed: the note is harmless if it is not.
        released = inner
            .registry
            .coord
            .claimed(&[id])
            .is_ok_and(|c| !c.contains(&id));
        if released {
            break;
        }
        if let Err(e) = inner.registry.coord.notify(note) {
            log::warn!("{id}: cannot send the stop again: {e}");
        }
    }
    if !released {
        log::warn!(
            "{id}: its attempt on another server still runs {STOP_RESEND_FOR:?} after a stop"
        );
    }
    if let Some(inner) = inner.upgrade() {
        lock(&inner.registry.stopping).remove(&id);
    }
}

/// The claim side of a running attempt (I7 across servers): its claim, and its appends,
/// each checked in its own transaction against what others wrote.
impl ActiveTurn {
    /// Holds the session's claim until the attempt ends; `last_seq` is the session's last
    /// seq under it (the attempt's user message, or where its retry starts).
    pub(super) fn hold(&self, claim: Claim, last_seq: u64) {
        self.own_seq.store(last_seq, Ordering::SeqCst);
        *lock(&self.claim) = Some(claim);
    }

    /// The attempt appended `seq` to its session.
    pub(super) fn wrote(&self, seq: u64) {
        let before = self.own_seq.fetch_max(seq, Ordering::SeqCst);
        // An attempt's writes only move forward (each is appended after its previous
        // one, or is the same write told twice): one older than its newest means the
        // attempt lost track of its session, and a claim taken again would trust it.
        assert!(
            seq >= before,
            "{}: attempt {}/{} wrote seq {seq} after its seq {before}",
            self.session_id,
            self.turn,
            self.attempt
        );
    }

    /// What the attempt's next append carries: who writes, after its own newest write.
    pub(super) fn mark(&self) -> AttemptMark {
        AttemptMark {
            turn: self.turn,
            attempt: self.attempt,
            after: self.own_seq.load(Ordering::SeqCst),
        }
    }

    /// Runs `f` in one write transaction as this attempt (`f` appends with
    /// [`crate::session::WriteTxn::append_for`] and the mark it is given). Refused as
    /// [`StoreError::Superseded`] when another attempt wrote meanwhile: the session is
    /// then lost to this one, as when its claim is ([`ActiveTurn::keep_claim`]).
    pub(super) fn write<T>(
        &self,
        store: &Store,
        mut f: impl FnMut(&mut Writer<'_>, &AttemptMark) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mark = self.mark();
        let written = store.write(|w| f(w, &mark));
        if let Err(StoreError::Superseded { seq, .. }) = &written {
            log::warn!(
                "{}: another attempt wrote to the session (seq {seq}) after this one's last \
                 write (seq {}); this one writes nothing more",
                self.session_id,
                mark.after
            );
            self.give_up(&mut lock(&self.claim));
        }
        written
    }

    /// Appends `payload` as this attempt (see [`ActiveTurn::write`]).
    pub(super) fn append(&self, store: &Store, payload: &Payload) -> Result<Event, StoreError> {
        let id = self.session_id;
        let event = self.write(store, |w, mark| w.append_for(mark, id, payload))?;
        self.wrote(event.seq);
        Ok(event)
    }

    /// Whether the session is still this attempt's (I7 across servers; see
    /// [`Claim::keep`]); asked before each of its appends (which check again in their own
    /// transaction, [`ActiveTurn::write`]). A claim whose connection broke and that was
    /// taken again holds only if nobody wrote to the session meanwhile (another server may
    /// have run a whole turn in between). Once lost, it stays lost and is let go: the
    /// attempt is asked to stop, as a `/stop` would, and writes nothing more to the session.
    pub(super) fn keep_claim(&self, store: &Store) -> bool {
        if self.claim_lost() {
            return false;
        }
        let id = self.session_id;
        let mut claim = lock(&self.claim);
        let kept = match claim.as_mut().map(|c| c.keep(id)) {
            None | Some(Kept::Held) => true,
            Some(Kept::Lost) => false,
            Some(Kept::TakenAgain) => {
                let own = self.own_seq.load(Ordering::SeqCst);
                match store.last_seq(id) {
                    Ok(last) if last == own => true,
                    Ok(last) => {
                        log::warn!(
                            "{id}: another server wrote to the session (up to seq {last}, this \
                             attempt's last is {own}) while this one's lock was lost"
                        );
                        false
                    }
                    Err(e) => {
                        log::warn!("{id}: cannot tell whether another server wrote: {e}");
                        false
                    }
                }
            }
        };
        if !kept {
            self.give_up(&mut claim);
        }
        kept
    }

    /// The session is another's: marked lost for good, the claim let go (a lock taken
    /// again is the other server's), and the attempt asked to stop.
    fn give_up(&self, claim: &mut Option<Claim>) {
        self.claim_lost.store(true, Ordering::SeqCst);
        claim.take();
        self.request_stop();
    }

    /// Whether the attempt stops because another server took the session.
    pub(super) fn claim_lost(&self) -> bool {
        self.claim_lost.load(Ordering::SeqCst)
    }
}
