//! The session list's keyset cursor (SPEC §7): sessions are listed by
//! `(updated_at DESC, id DESC)`, and a page ends with the pair of its last row. The next
//! page is every session strictly below that pair, so rows that share an `updated_at` are
//! neither repeated nor skipped across a page boundary, whatever is written meanwhile.
//!
//! Pure: parsing and validation only; the store runs the query.

use std::fmt;
use std::str::FromStr;

use crate::clock::{format_timestamp, parse_timestamp};
use crate::session::events::SessionId;

/// A position in the session list: list what comes strictly after (older than) it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cursor {
    /// The stored timestamp format (normalised when parsed).
    pub updated_at: String,
    pub id: SessionId,
}

/// A cursor that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    #[error("a cursor needs both `before` and `before_id`, or neither")]
    Half,
    #[error("`before` is not an RFC 3339 timestamp")]
    BadTimestamp,
    #[error("`before_id` is not a session id")]
    BadId,
}

impl Cursor {
    /// Builds a cursor from its two halves as a client sends them: both or neither.
    /// `before` may be any RFC 3339 instant; it is normalised to the stored format, so
    /// the comparison in SQL (text) agrees with time.
    pub fn from_parts(
        before: Option<&str>,
        before_id: Option<&str>,
    ) -> Result<Option<Cursor>, CursorError> {
        match (before, before_id) {
            (None, None) => Ok(None),
            (Some(_), None) | (None, Some(_)) => Err(CursorError::Half),
            (Some(at), Some(id)) => {
                let ts = parse_timestamp(at).ok_or(CursorError::BadTimestamp)?;
                let id = id.parse().map_err(|_| CursorError::BadId)?;
                Ok(Some(Cursor {
                    updated_at: format_timestamp(ts),
                    id,
                }))
            }
        }
    }
}

/// Which sessions a list shows, by their archived flag.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ArchivedFilter {
    /// Only sessions that are not archived (the list's default).
    #[default]
    Exclude,
    /// Both.
    Include,
    /// Only archived sessions.
    Only,
}

impl ArchivedFilter {
    /// The range of the `archived` column (0 or 1) the filter admits.
    pub fn archived_range(self) -> (bool, bool) {
        match self {
            ArchivedFilter::Exclude => (false, false),
            ArchivedFilter::Include => (false, true),
            ArchivedFilter::Only => (true, true),
        }
    }
}

/// Not one of `exclude`, `include`, `only`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`archived` must be exclude, include or only")]
pub struct BadArchivedFilter;

impl FromStr for ArchivedFilter {
    type Err = BadArchivedFilter;
    fn from_str(s: &str) -> Result<ArchivedFilter, BadArchivedFilter> {
        match s {
            "exclude" => Ok(ArchivedFilter::Exclude),
            "include" => Ok(ArchivedFilter::Include),
            "only" => Ok(ArchivedFilter::Only),
            _ => Err(BadArchivedFilter),
        }
    }
}

impl fmt::Display for ArchivedFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ArchivedFilter::Exclude => "exclude",
            ArchivedFilter::Include => "include",
            ArchivedFilter::Only => "only",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_halves_or_neither() {
        let id = SessionId::generate().to_string();
        assert_eq!(Cursor::from_parts(None, None), Ok(None));
        assert_eq!(
            Cursor::from_parts(Some("2026-11-30T00:00:00Z"), None),
            Err(CursorError::Half)
        );
        assert_eq!(Cursor::from_parts(None, Some(&id)), Err(CursorError::Half));
        let c = Cursor::from_parts(Some("2026-11-30T01:00:00+01:00"), Some(&id))
            .unwrap()
            .unwrap();
        assert_eq!(c.updated_at, "2026-11-30T00:00:00.000000Z");
        assert_eq!(c.id.to_string(), id);
    }

    #[test]
    fn bad_halves_are_named() {
        let id = SessionId::generate().to_string();
        assert_eq!(
            Cursor::from_parts(Some("yesterday"), Some(&id)),
            Err(CursorError::BadTimestamp)
        );
        assert_eq!(
            Cursor::from_parts(Some("2026-11-30T00:00:00Z"), Some("42")),
            Err(CursorError::BadId)
        );
        assert_eq!(
            Cursor::from_parts(Some(""), Some("")),
            Err(CursorError::BadTimestamp)
        );
    }

    #[test]
    fn archived_filter_parses_its_three_names_only() {
        for f in [
            ArchivedFilter::Exclude,
            ArchivedFilter::Include,
            ArchivedFilter::Only,
        ] {
            assert_eq!(f.to_string().parse(), Ok(f));
        }
        assert_eq!("all".parse::<ArchivedFilter>(), Err(BadArchivedFilter));
        assert_eq!("".parse::<ArchivedFilter>(), Err(BadArchivedFilter));
    }
}
