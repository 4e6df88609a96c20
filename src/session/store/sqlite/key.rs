//! The search key of an event (`session_events.id`, FTS5's rowid): the event's time in
//! milliseconds since 1970, or the next free one when that is taken.
//!
//! FTS5 reads its matches by rowid, newest first without sorting, and both search orders
//! stop early because of it (`order=recent` at the page, best first at its window). So
//! the key must grow with the event's `created_at`, not with when the row reached this
//! database: an import of older history appends rows whose time is in the past, and keyed
//! by arrival they came back first (issue 27 item 8). Keyed by time they land among the
//! events of their own time. Events of one millisecond take consecutive free keys, in
//! the order they are written; V14 re-keyed existing databases with the same rule
//! (`migrations/sqlite/V14__event_key_in_time_order.sql`).

use rusqlite::Connection;

use crate::session::store::error::Result;

/// The time of a `created_at` in milliseconds, as SQLite reads it (the same expression as
/// the V14 migration, so a database re-keyed there and one written here agree). A time
/// SQLite cannot read, or one before 1970, sorts as the oldest (1): keys stay positive,
/// so 0 names no event.
macro_rules! time_ms {
    ($e:literal) => {
        concat!(
            "MAX(1, COALESCE(CAST(round(unixepoch(",
            $e,
            ", 'subsec') * 1000) AS INTEGER), 1))"
        )
    };
}

/// How many taken keys are read per step of the search for a free one.
const STEP: usize = 64;

/// After this many taken keys in a row (an import into the past whose events share a few
/// milliseconds, thousands deep), the key is the one after the largest: still unique,
/// only its order among those events' times is lost.
const MAX_WALK: usize = 4096;

/// The key for an event written at `created_at`: inside the writer's transaction, which
/// makes the read and the insert one step.
///
/// Live, events arrive in time order, several in a millisecond when a turn writes a
/// burst: when the newest event is not newer than this one, the key is its time or the
/// one after the largest, with one index lookup. Only an event older than the newest
/// (an import, a fork's copies) looks for the first free key from its time on.
pub(super) fn next_key(conn: &Connection, created_at: &str) -> Result<i64> {
    // One statement: this event's time, and the largest key with its event's time.
    let (want, newest): (i64, Option<(i64, i64)>) = conn
        .prepare_cached(concat!(
            "SELECT ",
            time_ms!("?1"),
            ", n.id, n.ms FROM (SELECT 1) LEFT JOIN (SELECT id, ",
            time_ms!("created_at"),
            " AS ms FROM session_events ORDER BY id DESC LIMIT 1) n"
        ))?
        .query_row([created_at], |r| {
            let newest = match (r.get::<_, Option<i64>>(1)?, r.get::<_, Option<i64>>(2)?) {
                (Some(id), Some(ms)) => Some((id, ms)),
                _ => None,
            };
            Ok((r.get(0)?, newest))
        })?;
    let Some((largest, newest_ms)) = newest else {
        return Ok(want);
    };
    if newest_ms <= want || want > largest {
        return Ok(want.max(largest + 1));
    }
    let mut taken =
        conn.prepare_cached("SELECT id FROM session_events WHERE id >= ?1 ORDER BY id LIMIT ?2")?;
    let mut want = want;
    let mut walked = 0;
    while walked < MAX_WALK {
        let mut rows = taken.query(rusqlite::params![want, STEP as i64])?;
        let mut seen = 0;
        while let Some(row) = rows.next()? {
            if row.get::<_, i64>(0)? != want {
                return Ok(want);
            }
            want += 1;
            seen += 1;
        }
        if seen < STEP {
            return Ok(want);
        }
        walked += STEP;
    }
    Ok(largest + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(
            "CREATE TABLE session_events (id INTEGER NOT NULL UNIQUE, created_at TEXT NOT NULL)",
        )
        .unwrap();
        c
    }

    fn take(c: &Connection, at: &str) -> i64 {
        let k = next_key(c, at).unwrap();
        c.execute(
            "INSERT INTO session_events (id, created_at) VALUES (?1, ?2)",
            rusqlite::params![k, at],
        )
        .unwrap();
        k
    }

    #[test]
    fn the_key_is_the_time_in_milliseconds_as_brain_writes_it() {
        let c = db();
        // 2026-12-05T12:49:39.123456Z: microseconds are cut to the millisecond.
        assert_eq!(take(&c, "2026-12-05T12:49:39.123456Z"), 1_796_474_979_123);
        assert_eq!(take(&c, "1970-01-01T00:00:00.002000Z"), 2);
    }

    #[test]
    fn a_taken_millisecond_gives_the_next_free_key() {
        let c = db();
        let at = "2026-12-05T12:49:39.123000Z";
        let first = take(&c, at);
        assert_eq!(take(&c, at), first + 1);
        assert_eq!(take(&c, "2026-12-05T12:49:39.124000Z"), first + 2);
        // In time order, a burst in one millisecond takes the keys after the largest.
        for n in 0..(STEP as i64 * 2) {
            assert_eq!(take(&c, "2026-12-05T12:49:39.124000Z"), first + 3 + n);
        }
    }

    #[test]
    fn an_older_event_takes_the_first_free_key_from_its_time() {
        let c = db();
        let at = "2026-12-05T12:49:39.123000Z";
        let first = take(&c, at);
        for _ in 0..(STEP + 10) {
            take(&c, at);
        }
        let newer = take(&c, "2026-12-05T12:49:40.000000Z");
        assert_eq!(newer, first + 877);
        // Past a whole step of taken keys, to the gap before the newer event.
        assert_eq!(take(&c, at), first + STEP as i64 + 11);
        // Older than everything: its own time.
        assert_eq!(take(&c, "2026-12-05T12:49:38.000000Z"), first - 1123);
    }

    #[test]
    fn unreadable_and_old_times_sort_as_the_oldest() {
        let c = db();
        assert_eq!(take(&c, "yesterday"), 1);
        assert_eq!(take(&c, "1969-12-31T23:59:59Z"), 2);
        assert_eq!(take(&c, ""), 3);
    }

    #[test]
    fn a_run_longer_than_the_walk_takes_the_key_after_the_largest() {
        let c = db();
        c.execute_batch(&format!(
            "WITH RECURSIVE n(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM n WHERE v < {})
             INSERT INTO session_events (id, created_at) SELECT v, 'garbage' FROM n",
            MAX_WALK + 10
        ))
        .unwrap();
        c.execute(
            "INSERT INTO session_events (id, created_at) VALUES (99999, '2026-12-05T00:00:00Z')",
            [],
        )
        .unwrap();
        assert_eq!(take(&c, "garbage"), 100_000);
    }
}
