//! Which answer belongs to which permission question (SPEC §13). A call id names a call only
//! within its attempt: a provider that sends no ids gets `call_0` every turn, so a question
//! is known by (turn, attempt, call id), never by its call id alone. Pure; every reader
//! that pairs questions with answers (the transcript, `/live` from the log, remembered
//! tools, the 409 of a late answer, the recovery at startup) walks the log through it.
//!
//! An answer that names its turn and attempt belongs to the newest question of that call
//! of that attempt. One from a log written before answers named them belongs to the newest
//! question of its call id before it that has no answer yet. A question keeps its first
//! answer: a second one (which brain does not write) changes nothing.

use std::collections::HashMap;

use crate::session::events::{PermissionRequested, PermissionResolved};

/// The questions of a log and their answers, fed in seq order.
#[derive(Default)]
pub struct Questions<'a> {
    /// Call id → its questions so far, oldest first, as (seq, turn, attempt).
    asked: HashMap<&'a str, Vec<(u64, u64, u32)>>,
    /// Question seq → its answer.
    answers: HashMap<u64, &'a PermissionResolved>,
    /// Question seq → the question.
    questions: Vec<(u64, &'a PermissionRequested)>,
}

impl<'a> Questions<'a> {
    /// The question at `seq`.
    pub fn asked(&mut self, seq: u64, q: &'a PermissionRequested) {
        self.asked
            .entry(q.call_id.as_str())
            .or_default()
            .push((seq, q.turn, q.attempt));
        self.questions.push((seq, q));
    }

    /// An answer (after every question before it); the seq of the question it answers,
    /// if it is that question's first answer.
    pub fn resolved(&mut self, r: &'a PermissionResolved) -> Option<u64> {
        let asked = self.asked.get(r.call_id.as_str())?;
        let question = match (r.turn, r.attempt) {
            (Some(turn), Some(attempt)) => asked
                .iter()
                .rev()
                .find(|&&(_, t, a)| (t, a) == (turn, attempt))
                .map(|&(seq, ..)| seq)
                .filter(|seq| !self.answers.contains_key(seq)),
            _ => asked
                .iter()
                .rev()
                .map(|&(seq, ..)| seq)
                .find(|seq| !self.answers.contains_key(seq)),
        }?;
        self.answers.insert(question, r);
        Some(question)
    }

    /// The answer to the question at `seq`, if it has one.
    pub fn answer(&self, seq: u64) -> Option<&'a PermissionResolved> {
        self.answers.get(&seq).copied()
    }

    /// The newest question about `call_id` (of any attempt), with its answer if any.
    pub fn newest(
        &self,
        call_id: &str,
    ) -> Option<(u64, &'a PermissionRequested, Option<&'a PermissionResolved>)> {
        let &(seq, ..) = self.asked.get(call_id)?.last()?;
        let q = self.questions.iter().rev().find(|(s, _)| *s == seq)?.1;
        Some((seq, q, self.answer(seq)))
    }

    /// The questions without an answer, in seq order.
    pub fn open(&self) -> impl Iterator<Item = (u64, &'a PermissionRequested)> + '_ {
        self.questions
            .iter()
            .filter(|(seq, _)| !self.answers.contains_key(seq))
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(turn: u64, call: &str) -> PermissionRequested {
        PermissionRequested {
            turn,
            attempt: 1,
            call_id: call.into(),
            name: "fs__write".into(),
            args: "{}".into(),
        }
    }

    fn r(at: Option<u64>, call: &str, decision: &str) -> PermissionResolved {
        PermissionResolved {
            turn: at,
            attempt: at.map(|_| 1),
            call_id: call.into(),
            decision: decision.into(),
            by: "user".into(),
            remember: false,
            answer_id: None,
        }
    }

    #[test]
    fn an_answer_that_names_its_attempt_answers_that_attempts_question() {
        let (q2, q5) = (q(2, "call_0"), q(5, "call_0"));
        // The second question's answer is written first: order does not decide.
        let (a5, a2) = (r(Some(5), "call_0", "allow"), r(Some(2), "call_0", "deny"));
        let mut w = Questions::default();
        w.asked(3, &q2);
        w.asked(6, &q5);
        assert_eq!(w.resolved(&a5), Some(6));
        assert_eq!(w.resolved(&a2), Some(3));
        assert_eq!(w.answer(3).map(|a| a.decision.as_str()), Some("deny"));
        assert_eq!(w.answer(6).map(|a| a.decision.as_str()), Some("allow"));
        assert_eq!(w.open().count(), 0);
    }

    #[test]
    fn an_old_answer_answers_the_newest_unanswered_question_of_its_call() {
        let (q2, q5) = (q(2, "call_0"), q(5, "call_0"));
        let (a2, again, a5) = (
            r(None, "call_0", "deny"),
            r(None, "call_0", "allow"),
            r(None, "call_0", "allow"),
        );
        let mut w = Questions::default();
        w.asked(3, &q2);
        assert_eq!(w.resolved(&a2), Some(3));
        w.asked(6, &q5);
        assert_eq!(w.resolved(&a5), Some(6));
        // A second answer to nothing open changes nothing.
        assert_eq!(w.resolved(&again), None);
        assert_eq!(w.answer(3).map(|a| a.decision.as_str()), Some("deny"));
        assert_eq!(w.newest("call_0").map(|(seq, ..)| seq), Some(6));
        assert!(w.newest("call_1").is_none());
    }

    #[test]
    fn a_question_keeps_its_first_answer() {
        let q2 = q(2, "c");
        let (first, second) = (r(Some(2), "c", "deny"), r(Some(2), "c", "allow"));
        let mut w = Questions::default();
        w.asked(3, &q2);
        assert_eq!(w.resolved(&first), Some(3));
        assert_eq!(w.resolved(&second), None);
        assert_eq!(w.answer(3).map(|a| a.decision.as_str()), Some("deny"));
    }
}
