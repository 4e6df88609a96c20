//! SPEC §4 step 0: which events an edit abandoned. Pure.
//!
//! Walking the log from the end, each visible `rewind` W hides every event with
//! `W.to_seq < seq < W.seq`; a hidden rewind hides nothing. So an edit of an edit, or an
//! edit inside a branch an earlier edit left, both come out right: only the rewinds of the
//! branch being continued count.

use crate::session::events::{Decoded, Event, Payload, kind};

/// For each event (by position), whether a later visible rewind hides it. A rewind whose
/// payload does not decode hides nothing (one bad row never reshapes a session).
pub fn abandoned(events: &[Event]) -> Vec<bool> {
    // The (to_seq, seq) ranges of the visible rewinds seen so far, walking backwards.
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut hidden = vec![false; events.len()];
    for (i, e) in events.iter().enumerate().rev() {
        if ranges.iter().any(|&(to, w)| to < e.seq && e.seq < w) {
            hidden[i] = true;
            continue;
        }
        if e.kind == kind::REWIND {
            if let Decoded::Known(Payload::Rewind(r)) = e.decode() {
                ranges.push((r.to_seq, e.seq));
            }
        }
    }
    hidden
}

/// The events step 0 leaves visible, in their order.
pub fn visible(events: &[Event]) -> Vec<&Event> {
    events
        .iter()
        .zip(abandoned(events))
        .filter_map(|(e, hidden)| (!hidden).then_some(e))
        .collect()
}

/// The boundary (`replaces_through_seq`) of the newest visible compaction, 0 without one.
/// `events` need hold only the session's rewinds and compactions (what hides a compaction
/// is decided by rewinds alone), which is how the store finds where its tail read starts.
pub fn visible_compaction_boundary(events: &[Event]) -> u64 {
    visible(events)
        .iter()
        .rev()
        .find_map(|e| match e.decode() {
            Decoded::Known(Payload::CompactionApplied(c)) => Some(c.replaces_through_seq),
            _ => None,
        })
        .unwrap_or(0)
}
