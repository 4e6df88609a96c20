//! A circuit breaker per (purpose, model) for background calls, as a pure state machine
//! over a clock value: after [`BREAKER_THRESHOLD`] consecutive failures (invalid output,
//! timeouts, errors) the purpose pauses for that model for [`BREAKER_COOLDOWN`]; then one
//! call probes it: a success closes the breaker, a failure pauses it again. A model that
//! cannot distil costs at most the threshold's calls, then one per cooldown.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::session::store::Purpose;

/// Consecutive failures after which a purpose pauses for a model.
pub const BREAKER_THRESHOLD: u32 = 3;
/// How long a paused purpose stays paused before one call probes it again.
pub const BREAKER_COOLDOWN: Duration = Duration::from_secs(10 * 60);

#[derive(Debug, Default)]
struct Entry {
    /// Consecutive failures.
    failures: u32,
    /// Paused until then.
    until: Option<Instant>,
    /// A probe after the cooldown is running: no other call meanwhile.
    probing: bool,
}

/// The breakers of every (purpose, model) seen.
#[derive(Debug)]
pub struct Breakers {
    threshold: u32,
    cooldown: Duration,
    entries: HashMap<(Purpose, String), Entry>,
}

impl Default for Breakers {
    fn default() -> Breakers {
        Breakers::new(BREAKER_THRESHOLD, BREAKER_COOLDOWN)
    }
}

impl Breakers {
    pub fn new(threshold: u32, cooldown: Duration) -> Breakers {
        Breakers {
            threshold: threshold.max(1),
            cooldown,
            entries: HashMap::new(),
        }
    }

    /// Whether a call for `purpose` may go to `model` now. After the cooldown the first
    /// caller gets the probe; the call must then be reported ([`Breakers::succeeded`],
    /// [`Breakers::failed`] or [`Breakers::released`]).
    pub fn allow(&mut self, purpose: Purpose, model: &str, now: Instant) -> bool {
        let Some(e) = self.entries.get_mut(&(purpose, model.to_owned())) else {
            return true;
        };
        match e.until {
            None => true,
            Some(until) if now < until => false,
            Some(_) if e.probing => false,
            Some(_) => {
                e.probing = true;
                true
            }
        }
    }

    pub fn succeeded(&mut self, purpose: Purpose, model: &str) {
        self.entries.remove(&(purpose, model.to_owned()));
    }

    /// A failed call. `true` when this failure paused the purpose (log it).
    pub fn failed(&mut self, purpose: Purpose, model: &str, now: Instant) -> bool {
        let e = self.entries.entry((purpose, model.to_owned())).or_default();
        e.failures = e.failures.saturating_add(1);
        e.probing = false;
        if e.failures >= self.threshold {
            e.until = Some(now + self.cooldown);
            return true;
        }
        false
    }

    /// A call that neither succeeded nor failed (cancelled for a chat, skipped): a probe
    /// it held is free again.
    pub fn released(&mut self, purpose: Purpose, model: &str) {
        if let Some(e) = self.entries.get_mut(&(purpose, model.to_owned())) {
            e.probing = false;
        }
    }

    /// The purposes paused for `model` now, by name, sorted.
    pub fn paused(&self, model: &str, now: Instant) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = self
            .entries
            .iter()
            .filter(|((_, m), e)| m == model && e.until.is_some_and(|u| now < u))
            .map(|((p, _), _)| p.as_str())
            .collect();
        names.sort_unstable();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COOL: Duration = Duration::from_secs(600);

    fn at(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    #[test]
    fn a_purpose_pauses_after_the_threshold_of_consecutive_failures() {
        let t0 = Instant::now();
        let mut b = Breakers::new(3, COOL);
        for i in 0..2 {
            assert!(b.allow(Purpose::Distill, "m", at(t0, i)));
            assert!(!b.failed(Purpose::Distill, "m", at(t0, i)));
        }
        assert!(b.allow(Purpose::Distill, "m", at(t0, 2)));
        assert!(
            b.failed(Purpose::Distill, "m", at(t0, 2)),
            "the third pauses it"
        );
        assert!(!b.allow(Purpose::Distill, "m", at(t0, 3)));
        assert_eq!(b.paused("m", at(t0, 3)), vec!["distill"]);
        assert!(b.allow(Purpose::Title, "m", at(t0, 3)), "per purpose");
        assert!(b.allow(Purpose::Distill, "other", at(t0, 3)), "per model");
        assert!(b.paused("other", at(t0, 3)).is_empty());
    }

    #[test]
    fn a_success_resets_the_count() {
        let t0 = Instant::now();
        let mut b = Breakers::new(3, COOL);
        b.failed(Purpose::Title, "m", t0);
        b.failed(Purpose::Title, "m", t0);
        b.succeeded(Purpose::Title, "m");
        b.failed(Purpose::Title, "m", t0);
        b.failed(Purpose::Title, "m", t0);
        assert!(b.allow(Purpose::Title, "m", t0), "not three in a row");
    }

    #[test]
    fn after_the_cooldown_one_probe_decides() {
        let t0 = Instant::now();
        let mut b = Breakers::new(2, COOL);
        b.failed(Purpose::Distill, "m", t0);
        b.failed(Purpose::Distill, "m", t0);
        assert!(!b.allow(Purpose::Distill, "m", at(t0, 599)));
        assert!(b.allow(Purpose::Distill, "m", at(t0, 600)), "the probe");
        assert!(
            !b.allow(Purpose::Distill, "m", at(t0, 600)),
            "one probe at a time"
        );
        assert!(b.paused("m", at(t0, 600)).is_empty(), "probing, not paused");
        assert!(b.failed(Purpose::Distill, "m", at(t0, 601)), "paused again");
        assert!(!b.allow(Purpose::Distill, "m", at(t0, 1200)));
        assert!(b.allow(Purpose::Distill, "m", at(t0, 1201)));
        b.released(Purpose::Distill, "m");
        assert!(
            b.allow(Purpose::Distill, "m", at(t0, 1202)),
            "a cancelled probe frees it"
        );
        b.succeeded(Purpose::Distill, "m");
        assert!(b.allow(Purpose::Distill, "m", at(t0, 1203)));
        assert!(b.allow(Purpose::Distill, "m", at(t0, 1203)), "closed again");
    }
}
