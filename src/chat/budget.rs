//! The context budget of a turn (SPEC §5, I4), computed in one place: the model's window,
//! the output reserve with the tool definitions a request on that model carries, and the
//! compaction trigger. The turn, `GET …/context` and compaction by hand (`POST …/compact`,
//! `brain sessions compact`) all use it, so what the page shows is what the turn does.

use std::sync::Arc;

use super::state::{Engine, Inner};
use crate::provider::{ModelInfo, Provider, ToolDef, Window, window_in};
use crate::session::compactor::Budget;
use crate::tools::ToolSpec;

/// What a turn on one model has to fit in.
#[derive(Clone, Debug)]
pub struct ContextBudget {
    pub budget: Budget,
    /// The window and where it came from.
    pub window: Window,
    /// The estimated tokens of the tool definitions every request carries (part of the
    /// output reserve, as room the messages cannot use).
    pub tools_tokens: u64,
    /// The tools offered to the model (none for a tool-less model).
    pub offered: Vec<ToolSpec>,
}

/// `--context-window`, when it applies to `model`: it is the chat model's.
pub(super) fn window_override(
    chat_model: Option<&str>,
    context_window: Option<u64>,
    model: &str,
) -> Option<u64> {
    context_window.filter(|_| chat_model.is_none_or(|m| m == model))
}

/// The listing a window is looked up in: none needed when `--context-window` applies,
/// else the provider's (waited for as a turn waits; a failed one gives the default).
pub(super) fn listing_for(
    provider: &Provider,
    chat_model: Option<&str>,
    context_window: Option<u64>,
    model: &str,
) -> Arc<Vec<ModelInfo>> {
    if window_override(chat_model, context_window, model).is_some() {
        return Arc::default();
    }
    provider.models().unwrap_or_default()
}

/// The budget of a turn on `model`, its window looked up in `list`.
pub(super) fn context_budget(inner: &Inner, model: &str, list: &[ModelInfo]) -> ContextBudget {
    let s = &inner.settings;
    let window = window_in(
        list,
        model,
        window_override(s.chat_model.as_deref(), s.context_window, model),
    );
    let offered = if inner.deps.provider.offers_tools(model) {
        inner.deps.tools.offered()
    } else {
        Vec::new()
    };
    let tools_tokens = definitions_tokens(inner, &offered);
    let budget = Budget {
        window: window.tokens,
        compact_at: s.compact_at,
        output_reserve: s.max_output_tokens.map_or(0, u64::from) + tools_tokens,
    };
    ContextBudget {
        budget,
        window,
        tools_tokens,
        offered,
    }
}

impl Engine {
    /// The budget a turn on `model` would have, its window looked up in `list` (for
    /// `GET …/context`, which must not wait for a hung provider).
    pub fn context_budget(&self, model: &str, list: &[ModelInfo]) -> ContextBudget {
        context_budget(&self.inner, model, list)
    }
}

/// The definitions of the tools offered, as a request carries them.
pub(super) fn definitions(offered: &[ToolSpec]) -> Vec<ToolDef> {
    offered
        .iter()
        .map(|t| ToolDef {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters: t.parameters.clone(),
        })
        .collect()
}

/// The estimated tokens of the tool definitions a request carries.
pub(super) fn definitions_tokens(inner: &Inner, offered: &[ToolSpec]) -> u64 {
    if offered.is_empty() {
        return 0;
    }
    let wire = crate::provider::wire::tools_json(&definitions(offered));
    inner.deps.estimator.count(&wire.to_string())
}
