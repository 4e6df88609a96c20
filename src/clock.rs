//! The one clock. Every timestamp brain writes comes from a [`Clock`] and is formatted by
//! [`format_timestamp`]: RFC 3339, UTC, exactly six fractional digits and `Z`, so that text
//! order is time order (SPEC §3).
//!
//! Tests use [`Clock::manual`] to make time stand still or jump, which is how ties in
//! `updated_at` and cursor paging are exercised without sleeping.

use std::sync::{Arc, Mutex, PoisonError};

use jiff::{SignedDuration, Timestamp};

/// Where "now" comes from.
#[derive(Clone, Debug)]
pub struct Clock {
    manual: Option<Arc<Mutex<Timestamp>>>,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock { manual: None }
    }

    /// A clock that stays at `start` until moved with [`Clock::advance`] or [`Clock::set`].
    pub fn manual(start: Timestamp) -> Clock {
        Clock {
            manual: Some(Arc::new(Mutex::new(start))),
        }
    }

    /// The current instant.
    pub fn now(&self) -> Timestamp {
        match &self.manual {
            None => Timestamp::now(),
            Some(t) => *t.lock().unwrap_or_else(PoisonError::into_inner),
        }
    }

    /// The current instant, formatted for storage and the API.
    pub fn now_string(&self) -> String {
        format_timestamp(self.now())
    }

    /// Moves a manual clock forward (or back, with a negative duration). No effect on the
    /// system clock.
    pub fn advance(&self, by: SignedDuration) {
        if let Some(t) = &self.manual {
            let mut t = t.lock().unwrap_or_else(PoisonError::into_inner);
            *t = t.saturating_add(by).unwrap_or(*t);
        }
    }

    /// Sets a manual clock. No effect on the system clock.
    pub fn set(&self, to: Timestamp) {
        if let Some(t) = &self.manual {
            *t.lock().unwrap_or_else(PoisonError::into_inner) = to;
        }
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::system()
    }
}

/// Formats an instant as `2026-11-30T04:17:26.123456Z` (microseconds, truncated).
pub fn format_timestamp(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// Parses a timestamp in the stored format (or any RFC 3339 instant).
pub fn parse_timestamp(text: &str) -> Option<Timestamp> {
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_six_fractional_digits_and_z() {
        let ts: Timestamp = "2026-11-30T04:17:26.123456789Z".parse().unwrap();
        assert_eq!(format_timestamp(ts), "2026-11-30T04:17:26.123456Z");
        let whole: Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        assert_eq!(format_timestamp(whole), "2026-01-02T03:04:05.000000Z");
    }

    #[test]
    fn formats_in_utc_whatever_the_offset_given() {
        let ts: Timestamp = "2026-11-30T06:17:26.5+02:00".parse().unwrap();
        assert_eq!(format_timestamp(ts), "2026-11-30T04:17:26.500000Z");
    }

    #[test]
    fn text_order_is_time_order() {
        let a: Timestamp = "2026-11-30T04:17:26.9Z".parse().unwrap();
        let b: Timestamp = "2026-11-30T04:17:27.1Z".parse().unwrap();
        assert!(format_timestamp(a) < format_timestamp(b));
    }

    #[test]
    fn manual_clock_stands_still_until_moved() {
        let start: Timestamp = "2026-11-30T00:00:00Z".parse().unwrap();
        let clock = Clock::manual(start);
        assert_eq!(clock.now(), start);
        assert_eq!(clock.now(), start);
        clock.advance(SignedDuration::from_micros(1));
        assert_eq!(clock.now_string(), "2026-11-30T00:00:00.000001Z");
        assert_eq!(parse_timestamp(&clock.now_string()), Some(clock.now()));
    }
}
