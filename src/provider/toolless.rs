//! Models whose server refused `tools` (SPEC §13), as pure decisions over a clock value:
//! such a model is sent no tools for [`config::TOOL_LESS_FOR`], then offered them again
//! (the server may have been restarted with tool support).

use std::collections::HashMap;
use std::time::Instant;

use crate::config;

/// Model → when it was found tool-less.
#[derive(Debug, Default)]
pub struct ToolLess {
    since: HashMap<String, Instant>,
}

impl ToolLess {
    pub fn new() -> ToolLess {
        ToolLess::default()
    }

    /// Remembers that `model`'s server refused tools at `now`.
    pub fn mark(&mut self, model: &str, now: Instant) {
        let ttl = config::TOOL_LESS_FOR;
        // Forgets what expired, so the map stays as small as the set of models in use.
        self.since
            .retain(|_, at| now.saturating_duration_since(*at) < ttl);
        self.since.insert(model.to_owned(), now);
    }

    /// Whether `model` may be offered tools at `now`.
    pub fn offers(&self, model: &str, now: Instant) -> bool {
        self.since
            .get(model)
            .is_none_or(|at| now.saturating_duration_since(*at) >= config::TOOL_LESS_FOR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_refusal_holds_for_its_time_and_per_model() {
        let t0 = Instant::now();
        let mut t = ToolLess::new();
        assert!(t.offers("a", t0));
        t.mark("a", t0);
        assert!(!t.offers("a", t0));
        assert!(t.offers("b", t0), "per model");
        let later = t0 + config::TOOL_LESS_FOR;
        assert!(!t.offers("a", later - Duration::from_secs(1)));
        assert!(t.offers("a", later), "offered again after TOOL_LESS_FOR");
        t.mark("b", later);
        assert_eq!(t.since.len(), 1, "the expired mark is forgotten");
    }
}
