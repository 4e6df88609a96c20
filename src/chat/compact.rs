//! Compaction by hand (`POST /v1/sessions/{id}/compact`, `brain sessions compact`): one
//! pass now, whatever the session's size and whatever the backoff, with the chat model's
//! budget and the compaction deadline; cut short by shutdown.

use serde::{Deserialize, Serialize};

use super::budget::{ContextBudget, context_budget, listing_for};
use super::state::{Engine, EngineError};
use super::summarizer::summarizer;
use crate::session::SessionId;
use crate::session::compactor::{Bounds, CompactionError, Interrupt, PassOutcome};

/// What a compaction by hand did (the answer of `POST …/compact`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactReport {
    pub tokens_before: u64,
    pub tokens_after: u64,
    /// False when there was nothing to compact (too few live messages) or another
    /// compaction of the same snapshot landed first.
    pub compacted: bool,
    /// How the summary was written (`llm`, or `extractive` when the summarizer failed),
    /// when it compacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The chat model's window, where it came from, and the compaction trigger.
    pub window: u64,
    pub window_source: String,
    pub trigger_tokens: u64,
}

impl Engine {
    /// Compacts the session now. 409 while one of its attempts runs; a summarizer that
    /// cannot answer leaves an extractive digest instead.
    pub fn compact(&self, id: SessionId) -> Result<CompactReport, EngineError> {
        self.accepting()?;
        if self.turn_active(id) {
            return Err(EngineError::TurnInFlight);
        }
        // No attempt starts on any server while this compaction runs.
        let _claim = self.claim(id)?;
        let inner = &self.inner;
        inner.deps.store.session(id)?;
        let s = &inner.settings;
        let unavailable = |e: &dyn std::fmt::Display| EngineError::Unavailable(e.to_string());
        let model = inner
            .deps
            .provider
            .resolve_model(s.chat_model.as_deref())
            .map_err(|e| unavailable(&e))?;
        let list = listing_for(
            &inner.deps.provider,
            s.chat_model.as_deref(),
            s.context_window,
            &model,
        );
        // The turn's budget, tool definitions included: the trigger reported is the one
        // the next turn compacts at.
        let ContextBudget { budget, window, .. } = context_budget(inner, &model, &list);
        let summarizer = summarizer(inner, &model, budget.window);
        let estimate = || inner.deps.compactor.estimate(id).map(|(_, t)| t);
        let before = estimate().map_err(compaction_error)?;
        let interrupted = || inner.shutting_down().then_some(Interrupt::Shutdown);
        let bounds = Bounds::within(s.compaction_timeout, &interrupted);
        let outcome = inner
            .deps
            .compactor
            .pass(id, budget, &summarizer, true, &bounds);
        let (tokens_before, tokens_after, method) = match outcome {
            Ok(PassOutcome::Compacted {
                tokens_before,
                tokens_after,
                method,
                ..
            }) => (tokens_before, tokens_after, Some(method)),
            Ok(_) | Err(CompactionError::Refused(_)) => {
                (before, estimate().map_err(compaction_error)?, None)
            }
            Err(e) => return Err(compaction_error(e)),
        };
        Ok(CompactReport {
            tokens_before,
            tokens_after,
            compacted: method.is_some(),
            method,
            window: window.tokens,
            window_source: window.source.to_owned(),
            trigger_tokens: budget.trigger_tokens(),
        })
    }
}

fn compaction_error(e: CompactionError) -> EngineError {
    match e {
        CompactionError::Store(s) => EngineError::Store(s),
        CompactionError::Interrupted(_) => EngineError::ShuttingDown,
        other => EngineError::Unavailable(other.to_string()),
    }
}
