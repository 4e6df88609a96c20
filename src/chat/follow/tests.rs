//! The pure tests of [`super::Follow`]: scripted logs, read in every way they may be.

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
fn an_attempt_just_ended_replays_whole_unless_something_newer_was_asked() {
    let id = SessionId::generate();
    let mut log = Log::new("sys");
    let turn = log.user("hi");
    log.checkpoint(turn, 1, "so ");
    assert!(Follow::replay(id, &log.events).is_none(), "still running");
    let answer = log.answer(turn, 1, "so done");
    let (frames, ended_at) = Follow::replay(id, &log.events).expect("ended");
    assert_eq!(frames[0], turn_frame(id, turn, 1));
    assert_eq!(text(&frames), "so done");
    assert_eq!(end(&frames), Some((EndStatus::Completed, Some(answer))));
    assert_eq!(ended_at, log.events[answer as usize - 1].created_at);
    log.user("next");
    assert!(
        Follow::replay(id, &log.events).is_none(),
        "a newer message waits"
    );
    assert!(
        Follow::replay(id, &Log::new("sys").events).is_none(),
        "no attempt"
    );
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
