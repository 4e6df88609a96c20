//! The JSON shapes of the API's values (SPEC §7), shared by the HTTP routes and the
//! command line's `--json` output so the two never drift apart.

use serde_json::{Value, json};

use crate::session::store::SearchHit;
use crate::session::{Event, SessionRow};

/// `Session`; `turn_active` is left out when the caller cannot know it (no server).
pub fn session(s: &SessionRow, turn_active: Option<bool>) -> Value {
    let mut v = json!({
        "id": s.id.to_string(),
        "title": s.title,
        "archived": s.archived,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
    });
    if let Some(active) = turn_active {
        v["turn_active"] = json!(active);
    }
    v
}

/// An event with its payload embedded as the JSON it is.
pub fn event(e: &Event) -> Value {
    let payload = serde_json::from_str::<Value>(&e.payload)
        .unwrap_or_else(|_| Value::String(e.payload.clone()));
    json!({"seq": e.seq, "kind": e.kind, "payload": payload, "created_at": e.created_at})
}

/// A search hit.
pub fn hit(h: &SearchHit) -> Value {
    json!({
        "session_id": h.session_id.to_string(),
        "title": h.title,
        "seq": h.seq,
        "kind": h.kind,
        "label": crate::session::search::label(&h.kind),
        "snippet": h.snippet,
        "highlights": h.highlights,
        "created_at": h.created_at,
        "abandoned": h.abandoned,
        "also_in": h.also_in.iter().map(|c| json!({
            "session_id": c.session_id.to_string(), "title": c.title, "abandoned": c.abandoned,
        })).collect::<Vec<_>>(),
    })
}

/// `GET /v1/tools`: every tool (denied ones with their policy) and each server's state.
pub fn tools(status: &crate::tools::ToolsStatus) -> Value {
    let tools: Vec<Value> = status
        .tools
        .iter()
        .map(|t| {
            json!({
                "name": t.name, "server": t.server, "description": t.description,
                "policy": t.policy, "read_only": t.read_only,
            })
        })
        .collect();
    json!({"tools": tools, "servers": status.servers})
}

/// An import's report (`POST /v1/import`, and what `brain sessions import` prints from):
/// counts by outcome, the forks made, messages written, what was left out, time.
pub fn imported(i: &crate::import::file::Imported) -> Value {
    use crate::import::file::Imported;
    match i {
        Imported::Nothing(what) => json!({"source": null, "nothing": what, "conversations": 0}),
        Imported::Brain { sessions, done } => json!({
            "source": "brain", "sessions": sessions, "events": done.events,
            "created": done.created, "extended": done.extended, "unchanged": done.unchanged,
        }),
        Imported::Conversations { source, report: r } => {
            let forked: Vec<Value> = r
                .forked
                .iter()
                .map(|f| {
                    json!({"conversation": f.conversation, "title": f.title,
                        "id": f.id.to_string(), "from": f.from.to_string(), "seq": f.seq})
                })
                .collect();
            json!({
                "source": source.name(), "conversations": r.conversations,
                "created": r.created, "extended": r.extended, "unchanged": r.unchanged,
                "forked": forked, "messages": r.messages, "skipped": r.skipped,
                "elapsed_s": r.elapsed.as_secs_f64(),
                "writer_held_s": r.writer_held.as_secs_f64(),
            })
        }
    }
}
