//! How an attempt ends (SPEC §6's table): what it appends, its ledger row, and its `end`
//! frame.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use super::frames::{ActiveTurn, CLAIM_LOST, EndStatus, Frame};
use super::state::Inner;
use super::stream::{Stopped, Streamed, last_checkpoint};
use crate::session::StoreError;
use crate::session::events::{AssistantTurn, AttemptEnd, Payload, TurnFailed, Usage};
use crate::session::store::{CallStatus, LedgerEntry, Purpose};

/// How long an attempt ending during shutdown waits for its record before its `end` frame
/// goes out with what is known. A write waiting for a database another process holds
/// takes up to the busy timeout, maybe twice (the record, then its ledger row), and a
/// checkpoint may have been waiting already: SPEC §12 wants the `end` frame and the exit
/// within 10 s.
pub(super) const SHUTDOWN_END_WAIT: Duration = Duration::from_secs(2);

/// [`end_attempt`]; during shutdown its record is written on a thread of its own, and
/// when that takes longer than [`SHUTDOWN_END_WAIT`] the `end` frame is announced with
/// what is known (the last checkpoint) while the record goes on, for as long as the
/// process lives (what it cannot write, the next start's residue recovery ends).
pub(super) fn end_in_time(
    inner: &Inner,
    turn: &ActiveTurn,
    model: &str,
    out: &Streamed,
    stopped: Stopped,
    took: Duration,
) -> Frame {
    if !inner.shutting_down() {
        return end_attempt(inner, turn, model, out, stopped, took);
    }
    let known = known_end(inner, model, out, &stopped);
    let (tx, rx) = mpsc::channel();
    thread::scope(|s| {
        let spawned = thread::Builder::new()
            .name("brain-end".into())
            .spawn_scoped(s, move || {
                let _ = tx.send(end_attempt(inner, turn, model, out, stopped, took));
            });
        if let Err(e) = spawned {
            log::error!("turn of {}: cannot record its end: {e}", turn.session_id);
            return known;
        }
        if let Ok(end) = rx.recv_timeout(SHUTDOWN_END_WAIT) {
            return end;
        }
        log::warn!(
            "turn {} of {} (attempt {}): its record waits for the database; its end goes out first",
            turn.turn,
            turn.session_id,
            turn.attempt
        );
        turn.announce_end(known.clone());
        rx.recv().unwrap_or(known)
    })
}

/// The `end` frame of an attempt whose record is not written yet: the status its record
/// will give it (the same rule as [`end_attempt`]'s), with no seq, as that record's seq is
/// not known (review finding 3: it said `interrupted` at the last checkpoint for an answer
/// whose `assistant_turn` was being written).
fn known_end(inner: &Inner, model: &str, out: &Streamed, stopped: &Stopped) -> Frame {
    Frame::End {
        status: ends_as(stopped, &out.text),
        seq: None,
        provider: inner.deps.provider.base_url().to_owned(),
        model: model.to_owned(),
        usage: out.usage,
        steps: out.steps.max(1),
        finish_reason: out.finish_reason.clone(),
    }
}

/// How an attempt that stopped so, having streamed `text`, ends (SPEC §6's table): an
/// answer with text completes; text cut short is interrupted; no text failed.
fn ends_as(stopped: &Stopped, text: &str) -> EndStatus {
    match (stopped, text.is_empty()) {
        (Stopped::Completed, false) => EndStatus::Completed,
        (_, false) => EndStatus::Interrupted,
        (_, true) => EndStatus::Failed,
    }
}

/// Writes what ends the attempt (SPEC §6's table) and returns its `end` frame.
pub(super) fn end_attempt(
    inner: &Inner,
    turn: &ActiveTurn,
    model: &str,
    out: &Streamed,
    stopped: Stopped,
    took: Duration,
) -> Frame {
    let provider = inner.deps.provider.base_url().to_owned();
    // Whatever ends the attempt is appended only while the session is still its own (I7):
    // else another server's turn may already be in the log after this one's checkpoints.
    if !turn.keep_claim(&inner.deps.store) {
        return lost(inner, turn, model, out, took);
    }
    if matches!(stopped, Stopped::Completed) && !out.text.is_empty() {
        return complete(inner, turn, model, out, took);
    }
    let (code, message, retryable) = failure(turn, &stopped, &provider);
    if !matches!(stopped, Stopped::ByUser | Stopped::Shutdown) || code == "empty_answer" {
        turn.push(Frame::Error {
            code: code.clone(),
            message: message.clone(),
            retryable,
        });
    }
    let interrupted = ends_as(&stopped, &out.text) == EndStatus::Interrupted;
    let written = if interrupted {
        let ended = AttemptEnd {
            code: code.clone(),
            message,
        };
        final_checkpoint(inner, turn, out, ended)
    } else {
        let failed = Payload::TurnFailed(TurnFailed {
            turn: turn.turn,
            attempt: turn.attempt,
            code: code.clone(),
            message,
            reasoning: (!out.reasoning.is_empty()).then(|| out.reasoning.clone()),
        });
        turn.append(&inner.deps.store, &failed).map(|e| Some(e.seq))
    };
    let seq = written.unwrap_or_else(|e| {
        log::error!("turn of {}: could not record its end: {e}", turn.session_id);
        None
    });
    if !model.is_empty() {
        let status = if interrupted {
            CallStatus::Interrupted
        } else {
            CallStatus::Error
        };
        record_chat(inner, turn, model, out, took, status, Some(&code));
    }
    Frame::End {
        status: if interrupted {
            EndStatus::Interrupted
        } else {
            EndStatus::Failed
        },
        seq,
        provider,
        model: model.to_owned(),
        usage: out.usage,
        steps: out.steps.max(1),
        finish_reason: out.finish_reason.clone(),
    }
}

/// What a failed or cut attempt's end says: its code, its message and whether a retry may
/// help (SPEC §6's table); provider and brain faults are logged here.
fn failure(turn: &ActiveTurn, stopped: &Stopped, provider: &str) -> (String, String, bool) {
    match stopped {
        Stopped::Completed => (
            "empty_answer".to_owned(),
            "the model answered with no text".to_owned(),
            true,
        ),
        Stopped::Error(e) => {
            log::warn!(
                "turn {} of {} (attempt {}): {}: {e}",
                turn.turn,
                turn.session_id,
                turn.attempt,
                e.code()
            );
            let mut message = e.to_string();
            if matches!(e, crate::provider::ProviderError::Unreachable(_)) {
                // Say where brain looked and how to point it elsewhere: the usual cause
                // is a model server not started, or on another port.
                message.push_str(&format!(
                    " (brain tried {provider}; start your model server there, or restart \
                     brain with --provider-url URL)"
                ));
            }
            (e.code().to_owned(), message, e.retryable())
        }
        Stopped::ByUser => ("stopped".to_owned(), "stopped on request".to_owned(), true),
        Stopped::Shutdown => (
            "shutdown".to_owned(),
            "the server shut down".to_owned(),
            true,
        ),
        Stopped::Overflow(why) => ("context_overflow".to_owned(), why.clone(), false),
        Stopped::Internal(why) => {
            log::error!("turn of {}: internal error: {why}", turn.session_id);
            (
                "internal".to_owned(),
                "brain failed inside; see its log".to_owned(),
                true,
            )
        }
        Stopped::Store(e) => {
            log::error!("turn of {}: database error: {e}", turn.session_id);
            (
                "internal".to_owned(),
                "the database failed".to_owned(),
                true,
            )
        }
    }
}

/// An attempt whose session another server took: it writes nothing more to the session
/// (what its checkpoints saved stays), says why, and ends.
fn lost(inner: &Inner, turn: &ActiveTurn, model: &str, out: &Streamed, took: Duration) -> Frame {
    log::warn!(
        "turn {} of {} (attempt {}): ends without writing more: {CLAIM_LOST}",
        turn.turn,
        turn.session_id,
        turn.attempt
    );
    turn.push(Frame::Error {
        code: "stopped".into(),
        message: CLAIM_LOST.into(),
        retryable: true,
    });
    if !model.is_empty() {
        // The provider call happened: the ledger is not the session's log.
        let code = Some("stopped");
        record_chat(inner, turn, model, out, took, CallStatus::Interrupted, code);
    }
    Frame::End {
        status: if out.text.is_empty() {
            EndStatus::Failed
        } else {
            EndStatus::Interrupted
        },
        seq: None,
        provider: inner.deps.provider.base_url().to_owned(),
        model: model.to_owned(),
        usage: out.usage,
        steps: out.steps.max(1),
        finish_reason: out.finish_reason.clone(),
    }
}

/// The last checkpoint of an interrupted attempt (whatever was not saved yet, maybe
/// nothing, and why it ended), and its end in the session list (`updated_at`), in one
/// transaction. Its seq.
fn final_checkpoint(
    inner: &Inner,
    turn: &ActiveTurn,
    out: &Streamed,
    ended: AttemptEnd,
) -> Result<Option<u64>, StoreError> {
    let last = last_checkpoint(turn, out, ended);
    let id = turn.session_id;
    let seq = turn.write(&inner.deps.store, |w, mark| {
        let seq = w.append_for(mark, id, &last)?.seq;
        w.touch(id)?;
        Ok(seq)
    })?;
    turn.push(Frame::Checkpoint { seq });
    Ok(Some(seq))
}

/// A completed attempt: its ledger row and its `assistant_turn`, in one transaction.
fn complete(
    inner: &Inner,
    turn: &ActiveTurn,
    model: &str,
    out: &Streamed,
    took: Duration,
) -> Frame {
    let provider = inner.deps.provider.base_url().to_owned();
    let usage = out.usage.unwrap_or_default();
    let written = turn.write(&inner.deps.store, |w, mark| {
        let ledger_id = w.record_call(&chat_entry(
            turn,
            &provider,
            model,
            out.step_usage.unwrap_or(usage),
            out.step_started.map_or(took, |s| s.elapsed()),
            CallStatus::Ok,
            None,
        ))?;
        let answer = Payload::AssistantTurn(AssistantTurn {
            turn: turn.turn,
            attempt: turn.attempt,
            text: out.text.clone(),
            reasoning: (!out.reasoning.is_empty()).then(|| out.reasoning.clone()),
            provider: provider.clone(),
            model: model.to_owned(),
            finish_reason: out.finish_reason.clone(),
            usage,
            duration_ms: took.as_millis() as u64,
            ledger_id: Some(ledger_id),
            steps: out.steps.max(1),
        });
        Ok(w.append_for(mark, turn.session_id, &answer)?.seq)
    });
    match written {
        Ok(seq) => Frame::End {
            status: EndStatus::Completed,
            seq: Some(seq),
            provider,
            model: model.to_owned(),
            usage: out.usage,
            steps: out.steps.max(1),
            finish_reason: out.finish_reason.clone(),
        },
        // Another attempt wrote first (I7): this one writes nothing more.
        Err(_) if turn.claim_lost() => lost(inner, turn, model, out, took),
        Err(e) => {
            // The answer could not be stored: what the checkpoints hold is the partial.
            log::error!(
                "turn of {}: could not store the answer: {e}",
                turn.session_id
            );
            turn.push(Frame::Error {
                code: "internal".into(),
                message: "the answer could not be stored".into(),
                retryable: true,
            });
            let ended = AttemptEnd {
                code: "internal".into(),
                message: "the answer could not be stored".into(),
            };
            let seq = final_checkpoint(inner, turn, out, ended)
                .ok()
                .flatten()
                .or(out.last_checkpoint_seq);
            Frame::End {
                status: EndStatus::Interrupted,
                seq,
                provider,
                model: model.to_owned(),
                usage: out.usage,
                steps: out.steps.max(1),
                finish_reason: out.finish_reason.clone(),
            }
        }
    }
}

fn chat_entry(
    turn: &ActiveTurn,
    provider: &str,
    model: &str,
    usage: Usage,
    took: Duration,
    status: CallStatus,
    code: Option<&str>,
) -> LedgerEntry {
    LedgerEntry {
        session_id: Some(turn.session_id),
        purpose: Purpose::Chat,
        provider: provider.to_owned(),
        model: model.to_owned(),
        usage,
        latency_ms: took.as_millis() as u64,
        status,
        error_code: code.map(str::to_owned),
    }
}

/// The ledger row of a step that ended in tool calls (the attempt goes on).
pub(super) fn record_step(inner: &Inner, turn: &ActiveTurn, model: &str, out: &Streamed) {
    record_chat(
        inner,
        turn,
        model,
        out,
        Duration::ZERO,
        CallStatus::Ok,
        None,
    );
}

fn record_chat(
    inner: &Inner,
    turn: &ActiveTurn,
    model: &str,
    out: &Streamed,
    took: Duration,
    status: CallStatus,
    code: Option<&str>,
) {
    // One row per step: the last step's own usage and time (earlier steps have theirs).
    let entry = chat_entry(
        turn,
        inner.deps.provider.base_url(),
        model,
        out.step_usage.or(out.usage).unwrap_or_default(),
        out.step_started.map_or(took, |s| s.elapsed()),
        status,
        code,
    );
    if let Err(e) = inner.deps.store.record_call(&entry) {
        log::error!("could not record a chat call in the ledger: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_announced_end_is_the_recorded_one() {
        use EndStatus::*;
        let cut = || Stopped::Error(crate::provider::ProviderError::Unreachable("x".into()));
        let cases = [
            (Stopped::Completed, "answer", Completed),
            (Stopped::Completed, "", Failed),
            (Stopped::Shutdown, "partial", Interrupted),
            (Stopped::Shutdown, "", Failed),
            (Stopped::ByUser, "partial", Interrupted),
            (cut(), "partial", Interrupted),
            (cut(), "", Failed),
        ];
        for (stopped, text, want) in cases {
            assert_eq!(ends_as(&stopped, text), want, "{text:?}");
        }
    }
}
