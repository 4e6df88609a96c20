//! The read side on PostgreSQL: the same answers as the SQLite store's reads
//! (`store/read.rs`), as free functions over any client or transaction.
//!
//! A function that issues more than one statement (a page, the context tail, a search's
//! abandoned marks) sees one snapshot only inside a `REPEATABLE READ` transaction: run it
//! in [`snapshot`]. On a bare client each statement sees the newest commits; because the
//! log is append-only that gives an answer a moment newer in part, never a wrong shape.
//! A session always holds its `session_started`, so the existence check is made only when
//! a read comes back empty (one round trip saved on every read of a real session).

use std::collections::HashMap;

use postgres::{GenericClient, IsolationLevel, Transaction};

use postgres::types::Type;

use super::rows::{event_row, session_row, to_i64, typed};
use crate::session::events::{Decoded, Event, Payload, SessionId};
use crate::session::projection::page::{Page, PageSource, transcript_page as project_page};
use crate::session::projection::visible_compaction_boundary;
use crate::session::store::{Result, SessionRow, StoreError};

/// [`super::rows::SESSION_COLUMNS`] as a literal, so statements can be `const` (`concat!`
/// takes literals only); a test keeps the two equal.
macro_rules! session_columns {
    () => {
        concat!(
            "id::text, title, archived, system, ",
            $crate::session::store::pg::rows::ts_text!("created_at"),
            ", ",
            $crate::session::store::pg::rows::ts_text!("updated_at")
        )
    };
}
pub(crate) use session_columns;

/// [`super::rows::EVENT_COLUMNS`] as a literal (see [`session_columns`]).
macro_rules! event_columns {
    () => {
        concat!(
            "seq, kind, payload::text, ",
            $crate::session::store::pg::rows::ts_text!("created_at")
        )
    };
}

const SESSION: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM sessions WHERE id = $1"
);
const EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1)";
const LAST_SEQ: &str = "SELECT COALESCE(MAX(seq), 0) FROM session_events WHERE session_id = $1";
/// `LIMIT NULL` is no limit.
const EVENTS_AFTER: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM session_events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
);
/// The kinds are literals so the partial indexes (V1 compactions, V4 rewinds) match.
const SHAPING: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM session_events WHERE session_id = $1
      AND kind IN ('compaction_applied', 'rewind') ORDER BY seq"
);
const REWINDS: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM session_events WHERE session_id = $1 AND kind = 'rewind' ORDER BY seq"
);
const EVENTS_BEFORE: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM session_events WHERE session_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3"
);
/// Through `session_events_attempts` (V5): the turn is compared as JSON text, which is
/// how the index holds it.
const TURN_ATTEMPTS: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM session_events WHERE session_id = $1
      AND kind IN ('pending_state', 'assistant_turn') AND payload ->> 'turn' = $2"
);
/// The attempts of several turns in one statement (a page's window names many), through
/// `session_events_attempts` (V5); the turn as JSON text comes fifth, to group them by.
const TURNS_ATTEMPTS: &str = concat!(
    "SELECT ",
    event_columns!(),
    ", payload ->> 'turn' FROM session_events WHERE session_id = $1
      AND kind IN ('pending_state', 'assistant_turn') AND payload ->> 'turn' = ANY($2)"
);
/// Through `session_events_permission_answers` (V5).
const PERMISSION_ANSWERS: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM session_events WHERE session_id = $1
      AND kind = 'permission_resolved' AND payload ->> 'call_id' = $2"
);
/// The answers to several questions in one statement (see [`TURNS_ATTEMPTS`]).
const CALLS_ANSWERS: &str = concat!(
    "SELECT ",
    event_columns!(),
    ", payload ->> 'call_id' FROM session_events WHERE session_id = $1
      AND kind = 'permission_resolved' AND payload ->> 'call_id' = ANY($2)"
);
const SESSION_IDS: &str = "SELECT id::text FROM sessions ORDER BY sessions.created_at, sessions.id";

/// A read-only transaction on one snapshot (`REPEATABLE READ`): what a read of several
/// statements runs in to see the log as of one moment, as SQLite's reader transactions do.
pub fn snapshot(c: &mut postgres::Client) -> Result<Transaction<'_>> {
    Ok(c.build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()?)
}

/// A session's cache row.
pub fn session(c: &mut impl GenericClient, id: SessionId) -> Result<SessionRow> {
    match c.query_typed_opt(SESSION, &[typed(&id.as_uuid(), Type::UUID)])? {
        Some(r) => session_row(&r),
        None => Err(StoreError::SessionNotFound(id)),
    }
}

/// The session's newest seq (0 for none).
pub fn last_seq(c: &mut impl GenericClient, id: SessionId) -> Result<u64> {
    let n: i64 = c
        .query_typed_one(LAST_SEQ, &[typed(&id.as_uuid(), Type::UUID)])?
        .try_get(0)?;
    seq(n)
}

/// A session's events with `seq > after_seq`, oldest first, at most `limit` of them (all
/// when `None`).
pub fn events(
    c: &mut impl GenericClient,
    id: SessionId,
    after_seq: u64,
    limit: Option<u32>,
) -> Result<Vec<Event>> {
    let events = events_after(c, id, after_seq, limit)?;
    if events.is_empty() {
        require_session(c, id)?;
    }
    Ok(events)
}

/// What the LLM context needs (SPEC §4 steps 0 and 1): `session_started`, then every event
/// after the newest *visible* compaction's boundary (the compaction among them; one a
/// later rewind hid does not count). Without one, the whole log.
pub fn events_for_context(c: &mut impl GenericClient, id: SessionId) -> Result<Vec<Event>> {
    let shaping = decode_all(&c.query_typed(SHAPING, &[typed(&id.as_uuid(), Type::UUID)])?)?;
    let boundary = visible_compaction_boundary(&shaping);
    let mut events = Vec::new();
    if boundary > 0 {
        events.extend(events_after(c, id, 0, Some(1))?);
    }
    events.extend(events_after(c, id, boundary, None)?);
    if events.is_empty() {
        require_session(c, id)?;
    }
    Ok(events)
}

/// One page of the UI transcript (SPEC §7): the newest `limit` items before `before_seq`,
/// read as a window back from `before_seq` plus what straddling items need (see
/// [`crate::session::projection::page`]), never the whole log. `active` as for
/// [`crate::session::projection::ui_transcript`].
pub fn transcript_page(
    c: &mut impl GenericClient,
    id: SessionId,
    before_seq: u64,
    limit: usize,
    active: Option<(u64, u32)>,
) -> Result<Page> {
    let mut source = PgPage {
        c: &mut *c,
        id,
        attempts: HashMap::new(),
        answers: HashMap::new(),
    };
    let page = project_page(&mut source, before_seq, limit, active)?;
    if page.items.is_empty() {
        require_session(c, id)?;
    }
    Ok(page)
}

/// Every session id, oldest first (tests and export).
pub fn session_ids(c: &mut impl GenericClient) -> Result<Vec<SessionId>> {
    c.query_typed(SESSION_IDS, &[])?
        .iter()
        .map(|r| {
            let id: String = r.try_get(0)?;
            id.parse()
                .map_err(|_| StoreError::Corrupt(format!("session id {id:?} is not a UUID")))
        })
        .collect()
}

/// The session's rewinds, in seq order (what marks a search hit abandoned).
pub(super) fn rewinds(c: &mut impl GenericClient, id: SessionId) -> Result<Vec<Event>> {
    decode_all(&c.query_typed(REWINDS, &[typed(&id.as_uuid(), Type::UUID)])?)
}

fn require_session(c: &mut impl GenericClient, id: SessionId) -> Result<()> {
    let exists: bool = c
        .query_typed_one(EXISTS, &[typed(&id.as_uuid(), Type::UUID)])?
        .try_get(0)?;
    if exists {
        Ok(())
    } else {
        Err(StoreError::SessionNotFound(id))
    }
}

fn events_after(
    c: &mut impl GenericClient,
    id: SessionId,
    after_seq: u64,
    limit: Option<u32>,
) -> Result<Vec<Event>> {
    let limit = limit.map(i64::from);
    decode_all(&c.query_typed(
        EVENTS_AFTER,
        &[
            typed(&id.as_uuid(), Type::UUID),
            typed(&to_i64(after_seq)?, Type::INT8),
            typed(&limit, Type::INT8),
        ],
    )?)
}

fn decode_all(rows: &[postgres::Row]) -> Result<Vec<Event>> {
    rows.iter().map(event_row).collect()
}

fn seq(n: i64) -> Result<u64> {
    u64::try_from(n).map_err(|_| StoreError::Corrupt(format!("a negative seq ({n})")))
}

/// The transcript page's reads, each through the index that finds it (V4, V5). A window's
/// turns and questions are looked up together when the window is read (one statement
/// each, not one per item: a page of 500 items names ~250 turns), and handed out as the
/// walk asks for them.
struct PgPage<'c, C> {
    c: &'c mut C,
    id: SessionId,
    /// By turn as JSON text (`payload ->> 'turn'`): the attempts of every turn looked up.
    attempts: HashMap<String, Vec<Event>>,
    /// By call id: the answers to every question looked up.
    answers: HashMap<String, Vec<Event>>,
}

impl<C: GenericClient> PgPage<'_, C> {
    /// Looks up, in one statement each, the attempts of the window's turns and the answers
    /// to its questions that are not looked up yet.
    fn prefetch(&mut self, window: &[Event]) -> Result<()> {
        let (mut turns, mut calls) = (Vec::new(), Vec::new());
        for e in window {
            match e.decode() {
                Decoded::Known(Payload::PendingState(c)) => {
                    let turn = c.turn.to_string();
                    if !self.attempts.contains_key(&turn) {
                        self.attempts.insert(turn.clone(), Vec::new());
                        turns.push(turn);
                    }
                }
                Decoded::Known(Payload::PermissionRequested(q)) => {
                    if !self.answers.contains_key(&q.call_id) {
                        self.answers.insert(q.call_id.clone(), Vec::new());
                        calls.push(q.call_id);
                    }
                }
                _ => {}
            }
        }
        let id = self.id.as_uuid();
        if !turns.is_empty() {
            let rows = self.c.query_typed(
                TURNS_ATTEMPTS,
                &[typed(&id, Type::UUID), typed(&turns, Type::TEXT_ARRAY)],
            )?;
            group(&rows, &mut self.attempts)?;
        }
        if !calls.is_empty() {
            let rows = self.c.query_typed(
                CALLS_ANSWERS,
                &[typed(&id, Type::UUID), typed(&calls, Type::TEXT_ARRAY)],
            )?;
            group(&rows, &mut self.answers)?;
        }
        Ok(())
    }
}

/// Adds each row's event to the list of its key (the fifth column).
fn group(rows: &[postgres::Row], into: &mut HashMap<String, Vec<Event>>) -> Result<()> {
    for r in rows {
        let key: String = r.try_get(4)?;
        into.entry(key).or_default().push(event_row(r)?);
    }
    Ok(())
}

impl<C: GenericClient> PageSource for PgPage<'_, C> {
    type Error = StoreError;

    fn events_before(&mut self, before: u64, n: usize) -> Result<Vec<Event>> {
        // A seq past bigint's range is before every stored one.
        let before = i64::try_from(before).unwrap_or(i64::MAX);
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let window = decode_all(&self.c.query_typed(
            EVENTS_BEFORE,
            &[
                typed(&self.id.as_uuid(), Type::UUID),
                typed(&before, Type::INT8),
                typed(&n, Type::INT8),
            ],
        )?)?;
        self.prefetch(&window)?;
        Ok(window)
    }

    fn turn_attempts(&mut self, turn: u64) -> Result<Vec<Event>> {
        // As JSON text: a turn past bigint's range (an import may name one) is found the
        // same way, where SQLite needs a slow path.
        let turn = turn.to_string();
        if let Some(found) = self.attempts.remove(&turn) {
            return Ok(found);
        }
        decode_all(&self.c.query_typed(
            TURN_ATTEMPTS,
            &[
                typed(&self.id.as_uuid(), Type::UUID),
                typed(&turn, Type::TEXT),
            ],
        )?)
    }

    fn permission_answers(&mut self, call_id: &str) -> Result<Vec<Event>> {
        if let Some(found) = self.answers.remove(call_id) {
            return Ok(found);
        }
        decode_all(&self.c.query_typed(
            PERMISSION_ANSWERS,
            &[
                typed(&self.id.as_uuid(), Type::UUID),
                typed(&call_id, Type::TEXT),
            ],
        )?)
    }

    fn rewinds(&mut self) -> Result<Vec<Event>> {
        rewinds(self.c, self.id)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    use super::*;
    use crate::session::projection::{llm_context, ui_transcript};
    use crate::session::store::pg::fixture::{Twin, same_events, twin};
    use crate::session::store::pg::rows::{EVENT_COLUMNS, SESSION_COLUMNS};
    use crate::session::testlog::Log;

    #[test]
    fn the_column_literals_are_the_rows_columns() {
        assert_eq!(session_columns!(), SESSION_COLUMNS);
        assert_eq!(event_columns!(), EVENT_COLUMNS);
    }

    /// A session with one of everything a page or the context has to get right: an
    /// interrupted attempt whose checkpoints lie far apart (more than a first window),
    /// its completed retry, a permission question answered much later, a compaction, and
    /// an edit whose rewind hides that compaction.
    fn long_log() -> Log {
        let mut log = Log::new("be brief");
        log.title("Otters");
        let t1 = log.user("where do otters live?");
        log.checkpoint(t1, 1, "By rivers ");
        let asked = log.asked(t1, "call-1", "fs__write_file");
        for _ in 0..80 {
            log.tool();
        }
        log.checkpoint(t1, 1, "and lakes");
        log.ended(t1, 1, " and seas", "cut");
        log.answered("call-1", "allow", true);
        log.checkpoint(t1, 2, "Rivers, ");
        log.answer(t1, 2, "Rivers, lakes and seas.");
        log.memory(t1, 2, "otters like water");
        let t2 = log.user("and what do they eat?");
        log.answer(t2, 1, "Fish.");
        log.compaction("They asked about otters.", asked);
        let t3 = log.user("how big are they?");
        log.checkpoint(t3, 1, "About a metre");
        for _ in 0..10 {
            log.tool();
        }
        log.failed(t3, 1, "provider_error");
        log.edit(t2, "and what do they drink?");
        assert!(log.next_seq() > 100);
        log
    }

    #[test]
    fn rows_ids_and_last_seq_equal_sqlites() {
        let Some(mut t) = twin("rows_ids_and_last_seq_equal_sqlites") else {
            return;
        };
        let log = long_log();
        let a = t.import(&log.events);
        let b = t.import(&Log::new("other").events);
        for id in [a, b] {
            assert_eq!(
                session(&mut t.pg, id).unwrap(),
                t.sqlite.session(id).unwrap()
            );
            assert_eq!(
                last_seq(&mut t.pg, id).unwrap(),
                t.sqlite.last_seq(id).unwrap()
            );
        }
        assert_eq!(
            session(&mut t.pg, a).unwrap().title.as_deref(),
            Some("Otters")
        );
        assert_eq!(last_seq(&mut t.pg, a).unwrap(), log.next_seq() - 1);
        assert_eq!(
            session_ids(&mut t.pg).unwrap(),
            t.sqlite.session_ids().unwrap()
        );
        let missing = SessionId::generate();
        assert!(matches!(
            session(&mut t.pg, missing),
            Err(StoreError::SessionNotFound(m)) if m == missing
        ));
        assert_eq!(last_seq(&mut t.pg, missing).unwrap(), 0);
    }

    #[test]
    fn events_equal_sqlites_and_a_missing_session_is_not_found() {
        let Some(mut t) = twin("events_equal_sqlites_and_a_missing_session_is_not_found") else {
            return;
        };
        let log = long_log();
        let id = t.import(&log.events);
        let n = log.next_seq() - 1;
        for (after, limit) in [
            (0, None),
            (0, Some(1)),
            (5, Some(10)),
            (n - 1, None),
            (n, None),
        ] {
            let pg = events(&mut t.pg, id, after, limit).unwrap();
            let sqlite = t.sqlite.events(id, after, limit).unwrap();
            assert!(same_events(&pg, &sqlite), "after {after}, limit {limit:?}");
        }
        assert!(same_events(
            &events(&mut t.pg, id, 0, None).unwrap(),
            &log.events
        ));
        assert!(events(&mut t.pg, id, n, None).unwrap().is_empty());
        let missing = SessionId::generate();
        assert!(matches!(
            events(&mut t.pg, missing, 0, None),
            Err(StoreError::SessionNotFound(_))
        ));
        assert!(matches!(
            events_for_context(&mut t.pg, missing),
            Err(StoreError::SessionNotFound(_))
        ));
        assert!(matches!(
            transcript_page(&mut t.pg, missing, u64::MAX, 10, None),
            Err(StoreError::SessionNotFound(_))
        ));
    }

    /// After a rewind hides the newest compaction, the tail starts at the older boundary
    /// (here: none, so the whole log); while the compaction is visible, at its boundary.
    /// Either way the context equals the whole log's, and the tail equals SQLite's.
    #[test]
    fn the_context_tail_starts_at_the_newest_visible_compaction() {
        let Some(mut t) = twin("the_context_tail_starts_at_the_newest_visible_compaction") else {
            return;
        };
        let mut log = Log::new("s");
        let t1 = log.user("one");
        log.answer(t1, 1, "1");
        let t2 = log.user("two");
        log.answer(t2, 1, "2");
        let compaction = log.compaction("one and two", t2);
        let t3 = log.user("three");
        log.answer(t3, 1, "3");
        let visible = t.import(&log.events);
        let tail = events_for_context(&mut t.pg, visible).unwrap();
        assert_eq!(
            tail.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [vec![1], (t2 + 1..log.next_seq()).collect()].concat()
        );
        assert!(tail.iter().any(|e| e.seq == compaction));
        assert!(same_events(
            &tail,
            &t.sqlite.events_for_context(visible).unwrap()
        ));
        assert_eq!(llm_context(&tail), llm_context(&log.events));

        // Editing the second message (before the compaction) abandons the compaction.
        log.edit(t2, "two, edited");
        let hidden = t.import(&log.events);
        let tail = events_for_context(&mut t.pg, hidden).unwrap();
        assert_eq!(tail.len() as u64, log.next_seq() - 1, "the whole log");
        assert!(same_events(
            &tail,
            &t.sqlite.events_for_context(hidden).unwrap()
        ));
        assert_eq!(llm_context(&tail), llm_context(&log.events));
        assert!(
            !llm_context(&tail).messages[0]
                .content
                .contains("one and two")
        );

        let long = long_log();
        let id = t.import(&long.events);
        let tail = events_for_context(&mut t.pg, id).unwrap();
        assert!(same_events(
            &tail,
            &t.sqlite.events_for_context(id).unwrap()
        ));
        assert_eq!(llm_context(&tail), llm_context(&long.events));
    }

    /// Every page of a long session, from every `before_seq` and several limits, active
    /// attempt or not, equals the whole log's transcript sliced, and SQLite's page.
    /// `stride` thins the `before_seq`s tried (the first and last are always tried).
    fn check_pages(
        t: &mut Twin,
        id: SessionId,
        log: &[Event],
        active: Option<(u64, u32)>,
        stride: usize,
    ) {
        let whole = ui_transcript(log, active);
        let n = log.len() as u64;
        for limit in [1usize, 3, 64, 500] {
            // SQLite cannot bind a seq past i64 (PostgreSQL's read clamps it).
            let befores = (1..=n + 1).step_by(stride).chain([n, n + 1]);
            for before in befores.chain([i64::MAX as u64, u64::MAX]) {
                let mut tx = snapshot(&mut t.pg).unwrap();
                let page = transcript_page(&mut tx, id, before, limit, active).unwrap();
                tx.commit().unwrap();
                let older: Vec<_> = whole.iter().filter(|i| i.seq < before).cloned().collect();
                let start = older.len().saturating_sub(limit);
                assert_eq!(page.items, older[start..], "before {before}, limit {limit}");
                assert_eq!(page.more, start > 0, "before {before}, limit {limit}");
                if before <= i64::MAX as u64 {
                    let sqlite = t.sqlite.transcript_page(id, before, limit, active).unwrap();
                    assert_eq!(page, sqlite, "before {before}, limit {limit}");
                }
            }
        }
    }

    #[test]
    fn pages_straddling_attempts_and_answers_equal_the_whole_transcript_and_sqlites() {
        let Some(mut t) =
            twin("pages_straddling_attempts_and_answers_equal_the_whole_transcript_and_sqlites")
        else {
            return;
        };
        let log = long_log();
        let id = t.import(&log.events);
        let items = ui_transcript(&log.events, None);
        assert!(
            items.iter().any(|i| i.abandoned),
            "the log has an abandoned branch"
        );
        check_pages(&mut t, id, &log.events, None, 1);
        // The same log with the first turn's retry still streaming.
        let mut open = Log::new("s");
        let t1 = open.user("q");
        open.checkpoint(t1, 1, "a");
        for _ in 0..70 {
            open.tool();
        }
        open.checkpoint(t1, 1, "b");
        let id = t.import(&open.events);
        check_pages(&mut t, id, &open.events, Some((t1, 1)), 3);
        check_pages(&mut t, id, &open.events, None, 3);
    }

    /// One random step of a generated log (indexes pick among what exists).
    #[derive(Clone, Debug)]
    enum Step {
        User,
        Checkpoint(usize),
        Complete(usize),
        Fail(usize),
        Ask(usize),
        Answer(usize),
        Edit(usize),
        Compact(usize),
        Tool,
        Unreadable,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => Just(Step::User),
            5 => any::<usize>().prop_map(Step::Checkpoint),
            2 => any::<usize>().prop_map(Step::Complete),
            1 => any::<usize>().prop_map(Step::Fail),
            1 => any::<usize>().prop_map(Step::Ask),
            1 => any::<usize>().prop_map(Step::Answer),
            1 => any::<usize>().prop_map(Step::Edit),
            1 => any::<usize>().prop_map(Step::Compact),
            3 => Just(Step::Tool),
            1 => Just(Step::Unreadable),
        ]
    }

    fn build(steps: &[Step]) -> Log {
        let mut log = Log::new("s");
        let mut turns: Vec<u64> = vec![];
        let mut attempts: Vec<(u64, u32)> = vec![];
        let mut calls: Vec<String> = vec![];
        let pick = |i: usize, n: usize| i % n.max(1);
        for s in steps {
            match *s {
                Step::User => turns.push(log.user("q")),
                Step::Checkpoint(i) if !turns.is_empty() => {
                    let t = turns[pick(i, turns.len())];
                    let a = attempts.iter().filter(|x| x.0 == t).count() as u32;
                    let a = if a == 0 || i % 3 == 0 { a + 1 } else { a };
                    attempts.push((t, a));
                    log.checkpoint(t, a, "part ");
                }
                Step::Complete(i) if !attempts.is_empty() => {
                    let (t, a) = attempts[pick(i, attempts.len())];
                    log.answer(t, a, "done");
                }
                Step::Fail(i) if !attempts.is_empty() => {
                    let (t, a) = attempts[pick(i, attempts.len())];
                    log.failed(t, a, "cut");
                }
                Step::Ask(i) if !turns.is_empty() => {
                    let call = format!("call{}", log.next_seq());
                    log.asked(turns[pick(i, turns.len())], &call, "fs__write_file");
                    calls.push(call);
                }
                Step::Answer(i) if !calls.is_empty() => {
                    log.answered(&calls[pick(i, calls.len())], "deny", i % 2 == 0);
                }
                Step::Edit(i) if !turns.is_empty() => {
                    turns.push(log.edit(turns[pick(i, turns.len())], "edited"));
                }
                Step::Compact(i) => {
                    let through = pick(i, log.next_seq() as usize - 1) as u64 + 1;
                    log.compaction("summary", through);
                }
                Step::Tool => {
                    log.tool();
                }
                Step::Unreadable => {
                    log.raw("pending_state", r#"{"turn": "x"}"#);
                }
                _ => {}
            }
        }
        log
    }

    /// Generated logs: every page and the context tail agree with the whole log's
    /// projections and with SQLite's answers (one database, a session per case).
    #[test]
    fn generated_logs_page_and_shape_the_context_as_the_whole_log() {
        let Some(t) = twin("generated_logs_page_and_shape_the_context_as_the_whole_log") else {
            return;
        };
        let t = RefCell::new(t);
        let mut runner = TestRunner::new(Config {
            cases: 16,
            ..Config::default()
        });
        let steps = proptest::collection::vec(step(), 0..120);
        runner
            .run(&steps, |steps| {
                let log = build(&steps);
                let mut t = t.borrow_mut();
                let id = t.import(&log.events);
                let tail = events_for_context(&mut t.pg, id).unwrap();
                prop_assert_eq!(llm_context(&tail), llm_context(&log.events));
                prop_assert!(same_events(
                    &tail,
                    &t.sqlite.events_for_context(id).unwrap()
                ));
                check_pages(&mut t, id, &log.events, None, 7);
                Ok(())
            })
            .unwrap();
    }
}
