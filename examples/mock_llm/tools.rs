//! The mock's tool calling (see the header of `mock_llm.rs`): scripted calls streamed the
//! way OpenAI streams them, a server that refuses `tools`, and answers that quote the
//! `tool` messages received.

use serde_json::{Value, json};

/// How many pieces a call's arguments are streamed in, unless the step says.
const DEFAULT_PIECES: u64 = 3;

/// One scripted call.
pub struct Call {
    pub id: Option<String>,
    pub name: String,
    pub arguments: String,
}

/// A step's `tool_calls`.
pub fn calls(step: &Value) -> Vec<Call> {
    step["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| Call {
            id: c["id"].as_str().map(str::to_owned),
            name: c["name"].as_str().unwrap_or_default().to_owned(),
            arguments: match &c["arguments"] {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            },
        })
        .collect()
}

/// Whether this step refuses this request (`reject_tools` and the request has `tools`).
pub fn rejects(step: &Value, body: &Value) -> bool {
    step["reject_tools"] == true && body.get("tools").is_some()
}

/// The error llama.cpp without `--jinja` answers.
pub fn rejection() -> Value {
    json!({"error": {"message": "tools param requires --jinja flag", "code": 400}})
}

/// The `tool` messages of a request.
fn tool_messages(body: &Value) -> Vec<&Value> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .collect()
}

/// Whether the last message is not the user's (a later step of a turn): the user
/// message's `[[mock …]]` was for its first step only.
pub fn after_user(body: &Value) -> bool {
    body["messages"]
        .as_array()
        .and_then(|ms| ms.last())
        .is_some_and(|m| m["role"] != "user")
}

/// Whether the answer quotes the `tool` messages: asked for, or a step with nothing else
/// to say answering a request that has some.
pub fn quotes(step: &Value, body: &Value) -> bool {
    step["quote_tools"] == true
        || (step.get("text").is_none()
            && step.get("tool_calls").is_none()
            && !tool_messages(body).is_empty())
}

/// `tool <tool_call_id>: <content>`, one line per `tool` message.
pub fn quote(body: &Value) -> String {
    tool_messages(body)
        .iter()
        .map(|m| {
            let content = m["content"]
                .as_str()
                .map_or_else(|| m["content"].to_string(), str::to_owned);
            format!(
                "tool {}: {content}",
                m["tool_call_id"].as_str().unwrap_or("?")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The calls as streamed deltas: per call, a first piece with its index, id (when
/// scripted), type and name, then its arguments cut in `tool_call_pieces`.
pub fn deltas(step: &Value, calls: &[Call]) -> Vec<Value> {
    let pieces = step["tool_call_pieces"]
        .as_u64()
        .unwrap_or(DEFAULT_PIECES)
        .max(1) as usize;
    let mut frames = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        let mut first = json!({"index": i, "type": "function",
            "function": {"name": c.name, "arguments": ""}});
        if let Some(id) = &c.id {
            first["id"] = json!(id);
        }
        frames.push(first);
        let chars: Vec<char> = c.arguments.chars().collect();
        let size = chars.len().div_ceil(pieces).max(1);
        for part in chars.chunks(size) {
            let part: String = part.iter().collect();
            frames.push(json!({"index": i, "function": {"arguments": part}}));
        }
    }
    frames
        .into_iter()
        .map(|tc| json!({"choices": [{"index": 0, "delta": {"tool_calls": [tc]}}]}))
        .collect()
}

/// The calls of a whole (non-streamed) message.
pub fn whole(calls: &[Call]) -> Value {
    Value::Array(
        calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                json!({"id": c.id.clone().unwrap_or_else(|| format!("call_mock_{i}")),
                    "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect(),
    )
}

/// The words a request's tools and calls add to the mock's prompt tokens: tools first (a
/// real server renders them into the system prompt, so changing them breaks the cache).
pub fn tools_tokens(body: &Value) -> Vec<String> {
    body.get("tools")
        .map(|t| vec![format!("<|tools|>{t}")])
        .unwrap_or_default()
}

/// The words of a message's `tool_calls`.
pub fn calls_tokens(message: &Value) -> Vec<String> {
    message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| {
            let f = &c["function"];
            let args = f["arguments"].as_str().unwrap_or_default();
            std::iter::once(format!("<|call|>{}", f["name"].as_str().unwrap_or("?")))
                .chain(args.split_whitespace().map(str::to_owned))
        })
        .collect()
}
