//! The token estimate (SPEC §5): tiktoken's `o200k_base`, loaded once per process, on first
//! use (it costs ~115 ms and ~45 MiB): an idle server stays at ~9 MiB and starts listening in
//! ~15 ms; the first turn pays the load once (`examples/bench footprint`).
//!
//! A message costs its content's tokens plus [`MESSAGE_OVERHEAD_TOKENS`]. Counts are cached
//! by content: the LLM context is byte-stable between turns (I3), so each turn counts only
//! what is new, and an event's text is never counted twice.
//!
//! Provider-reported usage is the truth for accounting; this estimate drives the budget.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, OnceLock, PoisonError};

use tiktoken_rs::CoreBPE;

use crate::session::projection::Context;

/// What each message costs beyond its content (role and framing tokens).
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 4;

/// Cached counts kept before the cache is emptied and refilled.
pub const TOKEN_CACHE_ENTRIES: usize = 100_000;

static BPE: OnceLock<Option<CoreBPE>> = OnceLock::new();

fn bpe() -> Option<&'static CoreBPE> {
    BPE.get_or_init(|| tiktoken_rs::o200k_base().ok()).as_ref()
}

/// Tokens in `text`. Should the tokenizer ever fail to load, a byte-based estimate (4
/// bytes a token) keeps the budget working.
pub fn count(text: &str) -> u64 {
    match bpe() {
        Some(b) => b.encode_ordinary(text).len() as u64,
        None => (text.len() as u64).div_ceil(4),
    }
}

/// A context's estimate, message by message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContextTokens {
    pub system: u64,
    pub messages: Vec<u64>,
    pub total: u64,
}

/// Counts with a cache keyed by content.
#[derive(Default)]
pub struct Estimator {
    cache: Mutex<HashMap<u64, u64>>,
}

impl Estimator {
    pub fn new() -> Estimator {
        Estimator::default()
    }

    /// Tokens in `text`, from the cache when it was counted before.
    pub fn count(&self, text: &str) -> u64 {
        let mut h = DefaultHasher::new();
        text.hash(&mut h);
        let key = h.finish();
        if let Some(n) = self.lock().get(&key) {
            return *n;
        }
        let n = count(text);
        let mut cache = self.lock();
        if cache.len() >= TOKEN_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, n);
        n
    }

    /// One message: its content plus the per-message overhead.
    pub fn message(&self, content: &str) -> u64 {
        self.count(content) + MESSAGE_OVERHEAD_TOKENS
    }

    /// The system prompt (as a message) and every message of a context.
    pub fn context(&self, ctx: &Context) -> ContextTokens {
        let system = self.message(&ctx.system);
        let messages: Vec<u64> = ctx
            .messages
            .iter()
            .map(|m| self.message(&m.content))
            .collect();
        let total = system + messages.iter().sum::<u64>();
        ContextTokens {
            system,
            messages,
            total,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, u64>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::projection::{Message, Role};

    #[test]
    fn counts_real_o200k_tokens() {
        assert_eq!(count(""), 0);
        assert_eq!(count("hello"), 1);
        assert_eq!(count("hello world"), 2);
        // Special-token text is ordinary text in a user's message.
        assert!(count("<|endoftext|>") > 1);
    }

    #[test]
    fn a_message_costs_its_content_plus_four() {
        let e = Estimator::new();
        assert_eq!(e.message("hello world"), 2 + MESSAGE_OVERHEAD_TOKENS);
        let ctx = Context {
            system: "be brief".into(),
            messages: vec![Message {
                role: Role::User,
                content: "hello".into(),
                first_seq: 2,
                last_seq: 2,
            }],
        };
        let t = e.context(&ctx);
        assert_eq!(t.system, count("be brief") + 4);
        assert_eq!(t.messages, vec![5]);
        assert_eq!(t.total, t.system + 5);
    }

    #[test]
    fn cached_counts_equal_fresh_ones() {
        let e = Estimator::new();
        for text in ["a", "b c", "a", "ünïcödé 🦓", "b c"] {
            assert_eq!(e.count(text), count(text));
        }
        assert_eq!(e.lock().len(), 3);
    }
}
