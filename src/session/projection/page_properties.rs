//! A transcript page read from a window of the log equals the whole log's transcript,
//! sliced: for every `before_seq` and several limits, over generated logs with retries,
//! interrupted and running attempts straddling page boundaries, rewinds, permission
//! questions and compactions.

use proptest::prelude::*;

use super::page::{InMemory, Page, transcript_page};
use super::properties::{Sim, action};
use super::*;
use crate::session::testlog::Log;

/// What the route did before pages read windows: the whole log, projected, then sliced.
pub(crate) fn whole_log_page(
    events: &[Event],
    before: u64,
    limit: usize,
    active: Option<(u64, u32)>,
) -> Page {
    let older: Vec<Item> = ui_transcript(events, active)
        .into_iter()
        .filter(|i| i.seq < before)
        .collect();
    let start = older.len().saturating_sub(limit);
    Page {
        items: older[start..].to_vec(),
        more: start > 0,
    }
}

fn check_every_page(log: &Log, active: Option<(u64, u32)>) -> Result<(), TestCaseError> {
    let last = log.events.last().map_or(0, |e| e.seq);
    for limit in [1, 3, 500] {
        for before in 1..=last + 2 {
            let Ok(page) = transcript_page(&mut InMemory(&log.events), before, limit, active);
            let want = whole_log_page(&log.events, before, limit, active);
            prop_assert_eq!(page, want, "before_seq {} limit {}", before, limit);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_page_read_from_a_window_equals_the_whole_log_sliced(
        actions in proptest::collection::vec(action(), 1..40),
        running in proptest::option::of((any::<bool>(), 1u8..4)),
    ) {
        let (mut log, mut sim) = Sim::run(&actions);
        let active = running.map(|(retry, cps)| sim.running(&mut log, retry, cps));
        check_every_page(&log, active)?;
        // The same log read by a client that does not know the attempt runs.
        check_every_page(&log, None)?;
    }
}

/// A long interrupted attempt whose checkpoints straddle pages of one item, with other
/// items between them, and a question answered far after it was asked.
#[test]
fn an_interrupted_attempt_straddling_pages_is_one_item_on_the_page_of_its_first_checkpoint() {
    let mut log = Log::new("s");
    let u1 = log.user("one");
    let first = log.checkpoint(u1, 1, "a");
    log.asked(u1, "c1", "fs__write_file");
    log.tool();
    log.checkpoint(u1, 1, "b");
    log.title("t");
    log.checkpoint(u1, 1, "c");
    log.answered("c1", "deny", true);
    log.checkpoint(u1, 2, "retry");
    log.answer(u1, 2, "done");
    check_every_page(&log, None).unwrap();
    let Ok(page) = transcript_page(&mut InMemory(&log.events), first + 1, 1, None);
    match &page.items[..] {
        [item] => assert!(
            matches!(&item.body, ItemBody::Interrupted { text, .. } if text == "abc"),
            "{item:?}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(page.more);
}
