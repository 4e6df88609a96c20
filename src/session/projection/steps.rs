//! An attempt's checkpoints split by step (SPEC §13), for the transcript: the text a step
//! wrote before it called tools is shown before those calls, where it happened, and the
//! answer's item shows what came after the last calls. The log has the order: a step's
//! text is checkpointed (with its step) before its calls run. Pure.
//!
//! Nothing is split for an attempt of one step, for checkpoints of a brain that did not
//! record steps, or for an answer whose text does not begin with its earlier steps' text
//! (a log brain did not write): those show as one item, as before.

use serde::Serialize;

use crate::session::events::{AssistantTurn, PendingState};

/// What one step, or the answer's last part, wrote.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StepText {
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

/// A step that went on to call tools: its own item, at its first checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct EarlierStep {
    pub first_seq: u64,
    pub step: u32,
    pub shown: StepText,
}

/// How an attempt's steps are shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Split {
    pub earlier: Vec<EarlierStep>,
    /// Where the item of an attempt without an `assistant_turn` (interrupted, running)
    /// goes: the first checkpoint of its last part. `None` for a completed attempt, whose
    /// item is its `assistant_turn`.
    pub last_first_seq: Option<u64>,
    /// What the attempt's own item shows.
    pub last: StepText,
}

/// Consecutive checkpoints of one step.
struct Group {
    step: u32,
    first_seq: u64,
    text: String,
    reasoning: String,
}

/// `cps`: the attempt's checkpoints in seq order; `answer`: its `assistant_turn`, if it
/// completed.
pub(super) fn split(cps: &[(u64, &PendingState)], answer: Option<&AssistantTurn>) -> Option<Split> {
    let groups = groups(cps)?;
    match answer {
        Some(a) => {
            let earlier: Vec<&Group> = groups.iter().filter(|g| g.step < a.steps).collect();
            let said: String = earlier.iter().map(|g| g.text.as_str()).collect();
            let thought: String = earlier.iter().map(|g| g.reasoning.as_str()).collect();
            let text = a.text.strip_prefix(said.as_str())?;
            let reasoning = a.reasoning.as_deref().unwrap_or("");
            let reasoning = reasoning.strip_prefix(thought.as_str())?;
            if earlier.is_empty() {
                return None;
            }
            Some(Split {
                last_first_seq: None,
                earlier: earlier.iter().map(|g| earlier_step(g)).collect(),
                last: shown(text, reasoning),
            })
        }
        None => {
            let (last, earlier) = groups.split_last()?;
            if earlier.is_empty() {
                return None;
            }
            Some(Split {
                earlier: earlier.iter().map(earlier_step).collect(),
                last_first_seq: Some(last.first_seq),
                last: shown(&last.text, &last.reasoning),
            })
        }
    }
}

/// The checkpoints grouped by step, in order; `None` if one has no step. The empty last
/// checkpoint of an attempt that ended during its calls (it only says why it ended) is a
/// group of its own, so the attempt's item says so after the calls, not before them.
fn groups(cps: &[(u64, &PendingState)]) -> Option<Vec<Group>> {
    let mut groups: Vec<Group> = Vec::new();
    for (i, &(seq, c)) in cps.iter().enumerate() {
        let step = c.step?;
        let ending = i + 1 == cps.len()
            && c.ended.is_some()
            && c.text.is_empty()
            && c.reasoning.as_deref().unwrap_or("").is_empty();
        match groups.last_mut() {
            Some(g) if g.step == step && !ending => {
                g.text.push_str(&c.text);
                g.reasoning.push_str(c.reasoning.as_deref().unwrap_or(""));
            }
            _ => groups.push(Group {
                step,
                first_seq: seq,
                text: c.text.clone(),
                reasoning: c.reasoning.clone().unwrap_or_default(),
            }),
        }
    }
    Some(groups)
}

fn earlier_step(g: &Group) -> EarlierStep {
    EarlierStep {
        first_seq: g.first_seq,
        step: g.step,
        shown: shown(&g.text, &g.reasoning),
    }
}

/// A part as shown: without the blank line that joins it to the previous step's text in
/// the answer (SPEC §13), and no reasoning rather than an empty one.
fn shown(text: &str, reasoning: &str) -> StepText {
    StepText {
        text: text.strip_prefix("\n\n").unwrap_or(text).to_owned(),
        reasoning: (!reasoning.is_empty()).then(|| reasoning.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::events::{AttemptEnd, Usage};

    fn cp(step: Option<u32>, text: &str) -> PendingState {
        PendingState {
            turn: 2,
            attempt: 1,
            text: text.into(),
            reasoning: None,
            ended: None,
            step,
        }
    }

    fn answer(text: &str, steps: u32) -> AssistantTurn {
        AssistantTurn {
            turn: 2,
            attempt: 1,
            text: text.into(),
            reasoning: None,
            provider: "p".into(),
            model: "m".into(),
            finish_reason: None,
            usage: Usage::default(),
            duration_ms: 1,
            ledger_id: None,
            steps,
        }
    }

    #[test]
    fn a_completed_answer_shows_each_calling_steps_text_at_its_first_checkpoint() {
        let (a, b, c) = (
            cp(Some(1), "Let me "),
            cp(Some(1), "look."),
            cp(Some(2), "\n\nIt is"),
        );
        let cps = [(3, &a), (4, &b), (7, &c)];
        let s = split(&cps, Some(&answer("Let me look.\n\nIt is 4.", 2))).unwrap();
        assert_eq!(s.earlier.len(), 1);
        assert_eq!((s.earlier[0].first_seq, s.earlier[0].step), (3, 1));
        assert_eq!(s.earlier[0].shown.text, "Let me look.");
        assert_eq!(s.last.text, "It is 4.");
    }

    #[test]
    fn a_final_step_with_no_checkpoint_is_what_follows_the_earlier_text() {
        let (a, b) = (cp(Some(1), "one"), cp(Some(2), "\n\ntwo"));
        let cps = [(3, &a), (6, &b)];
        let s = split(&cps, Some(&answer("one\n\ntwo\n\nthree", 3))).unwrap();
        let texts: Vec<&str> = s.earlier.iter().map(|e| e.shown.text.as_str()).collect();
        assert_eq!(texts, ["one", "two"]);
        assert_eq!(s.last.text, "three");
    }

    #[test]
    fn nothing_is_split_for_one_step_old_checkpoints_or_a_text_that_disagrees() {
        let a = cp(Some(1), "all");
        assert_eq!(split(&[(3, &a)], Some(&answer("all of it", 1))), None);
        let old = cp(None, "x");
        assert_eq!(split(&[(3, &old)], Some(&answer("x\n\ny", 2))), None);
        assert_eq!(split(&[(3, &a)], Some(&answer("other\n\ny", 2))), None);
        assert_eq!(split(&[(3, &a)], None), None);
    }

    #[test]
    fn an_interrupted_attempt_puts_its_item_at_its_last_steps_first_checkpoint() {
        let (a, b, c) = (
            cp(Some(1), "look"),
            cp(Some(2), "\n\nhalf"),
            cp(Some(2), " way"),
        );
        let s = split(&[(3, &a), (6, &b), (7, &c)], None).unwrap();
        assert_eq!(s.last_first_seq, Some(6));
        assert_eq!(s.last.text, "half way");
        assert_eq!(s.earlier[0].shown.text, "look");
    }

    #[test]
    fn an_attempt_stopped_during_its_calls_says_so_after_them() {
        let a = cp(Some(1), "look");
        let mut end = cp(Some(1), "");
        end.ended = Some(AttemptEnd {
            code: "stopped".into(),
            message: String::new(),
        });
        let s = split(&[(3, &a), (6, &end)], None).unwrap();
        assert_eq!((s.earlier[0].first_seq, s.last_first_seq), (3, Some(6)));
        assert_eq!(s.last.text, "");
    }
}
