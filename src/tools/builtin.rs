//! `search_history`: brain's own plain search over every session (SPEC §7's `/v1/search`
//! semantics) as a tool, so the assistant remembers across chats. Policy `allow`.

use serde_json::{Value, json};

use super::{BUILTIN_SERVER, Policy, ToolOutcome, ToolSpec};
use crate::session::Store;
use crate::session::store::{SearchHit, SearchQuery, Syntax};

pub const SEARCH_HISTORY: &str = "search_history";

/// The most hits one call may ask for, and the default.
pub const MAX_SEARCH_LIMIT: u64 = 20;
pub const DEFAULT_SEARCH_LIMIT: u64 = 5;

/// The longest query accepted (a model that pastes a whole answer as its query is wrong).
pub const MAX_QUERY_CHARS: usize = 500;

pub fn search_history_spec() -> ToolSpec {
    ToolSpec {
        name: SEARCH_HISTORY.into(),
        server: BUILTIN_SERVER.into(),
        tool: SEARCH_HISTORY.into(),
        description: "Search the user's earlier conversations with you (every chat, full \
                      text; all words must match). Answers each hit's chat title, date, \
                      message number and a snippet."
            .into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to find"},
                "limit": {
                    "type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT,
                    "description": format!("At most this many hits (default {DEFAULT_SEARCH_LIMIT})"),
                },
            },
            "required": ["query"],
            "additionalProperties": false,
        }),
        policy: Policy::Allow,
        read_only: true,
    }
}

/// The query and limit from a call's arguments, or what is wrong with them.
pub fn search_args(args: &Value) -> Result<(String, u32), String> {
    let query = match args.get("query") {
        Some(Value::String(q)) if !q.trim().is_empty() => q.trim().to_owned(),
        Some(Value::String(_)) => return Err("`query` is empty".into()),
        Some(_) => return Err("`query` must be a string".into()),
        None => return Err("`query` is required".into()),
    };
    if query.chars().count() > MAX_QUERY_CHARS {
        return Err(format!(
            "`query` is longer than {MAX_QUERY_CHARS} characters"
        ));
    }
    let limit = match args.get("limit") {
        None | Some(Value::Null) => DEFAULT_SEARCH_LIMIT,
        Some(l) => match l.as_u64() {
            Some(n) if (1..=MAX_SEARCH_LIMIT).contains(&n) => n,
            _ => {
                return Err(format!(
                    "`limit` must be a whole number from 1 to {MAX_SEARCH_LIMIT}"
                ));
            }
        },
    };
    Ok((query, limit as u32))
}

/// Hits as text for the model: title, date, seq and snippet each.
pub fn render_hits(query: &str, hits: &[SearchHit]) -> String {
    if hits.is_empty() {
        return format!("No earlier messages match {query:?}.");
    }
    let mut out = format!("{} earlier messages match {query:?}:\n", hits.len());
    for (i, h) in hits.iter().enumerate() {
        let date = h.created_at.get(..10).unwrap_or(&h.created_at);
        out.push_str(&format!(
            "\n{}. \"{}\" ({date}, session {}, seq {}, {}{})\n   {}\n",
            i + 1,
            h.title.as_deref().unwrap_or("untitled"),
            h.session_id,
            h.seq,
            crate::session::search::label(&h.kind),
            // The model should know a hit is a version the user replaced (SPEC §14).
            if h.abandoned {
                "; an earlier version, later edited"
            } else {
                ""
            },
            h.snippet.replace('\n', " "),
        ));
    }
    out
}

/// Runs `search_history`.
pub fn search_history(store: Option<&Store>, args: &Value) -> ToolOutcome {
    let (query, limit) = match search_args(args) {
        Ok(a) => a,
        Err(why) => return ToolOutcome::error(why),
    };
    let Some(store) = store else {
        return ToolOutcome::error("the history is not available here");
    };
    match store.search(&SearchQuery {
        text: query.clone(),
        syntax: Syntax::Plain,
        limit,
        offset: 0,
        order: Default::default(),
        stem: false,
    }) {
        Ok(hits) => ToolOutcome::ok(render_hits(&query, &hits)),
        Err(e) => {
            log::error!("search_history: {e}");
            ToolOutcome::error("the history search failed")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked_with_a_clear_reason() {
        assert_eq!(
            search_args(&json!({"query": " rust "})),
            Ok(("rust".into(), DEFAULT_SEARCH_LIMIT as u32))
        );
        assert_eq!(
            search_args(&json!({"query": "a", "limit": 20})),
            Ok(("a".into(), 20))
        );
        for (args, want) in [
            (json!({}), "`query` is required"),
            (json!({"query": ""}), "`query` is empty"),
            (json!({"query": 3}), "`query` must be a string"),
            (json!({"query": "a", "limit": 0}), "`limit`"),
            (json!({"query": "a", "limit": 21}), "`limit`"),
            (json!({"query": "a", "limit": 2.5}), "`limit`"),
            (json!({"query": "a", "limit": "3"}), "`limit`"),
            (json!({"query": "x".repeat(501)}), "longer than"),
        ] {
            let e = search_args(&args).unwrap_err();
            assert!(e.contains(want), "{args}: {e}");
        }
    }

    #[test]
    fn hits_render_title_date_seq_and_snippet() {
        let id: crate::session::SessionId = "0190f0f0-0000-7000-8000-000000000001".parse().unwrap();
        let hit = SearchHit {
            session_id: id,
            title: Some("Rust lifetimes".into()),
            seq: 7,
            kind: "user_message".into(),
            snippet: "why does the\nborrow checker".into(),
            highlights: vec![],
            created_at: "2025-03-04T05:06:07.000Z".into(),
            abandoned: false,
            also_in: vec![],
        };
        let text = render_hits("borrow", &[hit]);
        assert!(
            text.starts_with("1 earlier messages match \"borrow\":"),
            "{text}"
        );
        assert!(
            text.contains("1. \"Rust lifetimes\" (2025-03-04, session ")
                && text.contains("seq 7, message)")
                && text.contains("   why does the borrow checker"),
            "{text}"
        );
        assert_eq!(render_hits("x", &[]), "No earlier messages match \"x\".");
    }
}
