//! `delta.tool_calls` assembled into whole calls (pure).
//!
//! Servers stream a call in pieces, and not all alike. OpenAI sends `index`, `id`,
//! `type` and `function.name` in a call's first piece and `function.arguments` in many;
//! llama.cpp and vLLM do the same with their own cuts; Ollama sends each call whole and
//! may reuse index 0 for every call of a step, telling them apart only by `id`; some
//! servers omit `index` when there is one call, some omit `id`, some repeat the name or a
//! fresh id in later pieces. The rules, in order:
//!
//! - A piece belongs to the latest call with its `index` (no `index`: the latest call),
//!   unless it starts another call: it has a name and an id that differ from that call's
//!   (Ollama), or, without an index or id, it has a name and arguments and that call's
//!   arguments are already a whole JSON value (whole calls one after the other; a server
//!   that repeats the name in every piece of one call has not closed its arguments yet).
//! - The first non-empty `id` is the call's; later ids are ignored (some servers send a
//!   fresh one in every piece). A call without one gets `call_<position>`, and so does a
//!   call whose id an earlier call of the step already has.
//! - A name piece equal to the name so far is a repetition; any other is appended.
//! - Argument pieces are appended, as text: the engine decides what text that is not a
//!   JSON object means. Arguments sent as a JSON value rather than a string are kept as
//!   that value's text.
//! - Calls come out in `index` order (ties in arrival order).
//! - At most [`config::MAX_TOOL_CALLS_PER_STEP`] calls: pieces of later ones are dropped
//!   and [`Assembler::overflowed`] says so. Arguments over
//!   [`config::MAX_TOOL_ARGUMENT_BYTES`], or an id or name over
//!   [`config::MAX_TOOL_CALL_NAME_BYTES`], are an error.

use serde_json::Value;

use super::ToolCall;
use crate::config;

/// One element of `delta.tool_calls` (or of a whole message's `tool_calls`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolCallPiece {
    pub index: Option<u64>,
    pub id: Option<String>,
    pub name: Option<String>,
    pub arguments: Option<String>,
}

impl ToolCallPiece {
    fn is_empty(&self) -> bool {
        self.id.as_deref().is_none_or(str::is_empty)
            && self.name.as_deref().is_none_or(str::is_empty)
            && self.arguments.as_deref().is_none_or(str::is_empty)
    }
}

/// The pieces of a `tool_calls` array. A whole message's calls (`whole`) without an
/// `index` take their position in the array.
pub fn pieces(tool_calls: &Value, whole: bool) -> Vec<ToolCallPiece> {
    let Some(items) = tool_calls.as_array() else {
        return vec![];
    };
    items
        .iter()
        .enumerate()
        .filter(|(_, item)| item.is_object())
        .map(|(i, item)| {
            let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
            let function = item.get("function");
            let arguments = match function.and_then(|f| f.get("arguments")) {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(other) => Some(other.to_string()),
            };
            let index = item.get("index").and_then(Value::as_u64);
            ToolCallPiece {
                index: index.or(whole.then_some(i as u64)),
                id: text(item.get("id")),
                name: text(function.and_then(|f| f.get("name"))),
                arguments,
            }
        })
        .collect()
}

/// Why a step's calls cannot be assembled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AssemblyError {
    #[error("the arguments of tool call {index} are longer than {limit} bytes")]
    ArgumentsTooLong { index: u64, limit: usize },
    #[error("the {what} of tool call {index} is longer than {limit} bytes")]
    NameTooLong {
        what: &'static str,
        index: u64,
        limit: usize,
    },
}

#[derive(Debug, Default)]
struct Partial {
    index: u64,
    id: String,
    name: String,
    arguments: String,
}

/// The calls of one step, as their pieces arrive.
#[derive(Debug, Default)]
pub struct Assembler {
    calls: Vec<Partial>,
    overflowed: bool,
}

impl Assembler {
    pub fn new() -> Assembler {
        Assembler::default()
    }

    /// Whether a piece arrived at all.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Whether the model asked for more than [`config::MAX_TOOL_CALLS_PER_STEP`] calls
    /// (the rest were dropped).
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    pub fn push(&mut self, piece: ToolCallPiece) -> Result<(), AssemblyError> {
        if piece.is_empty() {
            return Ok(());
        }
        let Some(at) = self.slot_for(&piece) else {
            return Ok(());
        };
        let call = &mut self.calls[at];
        let index = call.index;
        let too_long = |what, s: &str| {
            (s.len() > config::MAX_TOOL_CALL_NAME_BYTES).then_some(AssemblyError::NameTooLong {
                what,
                index,
                limit: config::MAX_TOOL_CALL_NAME_BYTES,
            })
        };
        if let Some(id) = piece.id.filter(|id| !id.is_empty()) {
            if call.id.is_empty() {
                if let Some(e) = too_long("id", &id) {
                    return Err(e);
                }
                call.id = id;
            }
        }
        if let Some(name) = piece.name.filter(|n| !n.is_empty() && *n != call.name) {
            call.name.push_str(&name);
            if let Some(e) = too_long("name", &call.name) {
                return Err(e);
            }
        }
        if let Some(args) = piece.arguments {
            if call.arguments.len() + args.len() > config::MAX_TOOL_ARGUMENT_BYTES {
                return Err(AssemblyError::ArgumentsTooLong {
                    index,
                    limit: config::MAX_TOOL_ARGUMENT_BYTES,
                });
            }
            call.arguments.push_str(&args);
        }
        Ok(())
    }

    /// Where a piece goes: an existing call, a new one, or nowhere (past the limit).
    fn slot_for(&mut self, piece: &ToolCallPiece) -> Option<usize> {
        let existing = match piece.index {
            Some(i) => self.calls.iter().rposition(|c| c.index == i),
            None => self.calls.len().checked_sub(1),
        };
        let new_index = match (existing, piece.index) {
            (Some(at), _) if !starts_another(&self.calls[at], piece) => return Some(at),
            (_, Some(i)) => i,
            (Some(at), None) => self.calls[at].index.saturating_add(1),
            (None, None) => 0,
        };
        if self.calls.len() >= config::MAX_TOOL_CALLS_PER_STEP {
            self.overflowed = true;
            return None;
        }
        self.calls.push(Partial {
            index: new_index,
            ..Partial::default()
        });
        Some(self.calls.len() - 1)
    }

    /// The calls, in `index` order, each with an id unique in the step.
    pub fn finish(self) -> Vec<ToolCall> {
        let mut calls = self.calls;
        calls.sort_by_key(|c| c.index);
        let mut out: Vec<ToolCall> = Vec::with_capacity(calls.len());
        for (position, c) in calls.into_iter().enumerate() {
            let taken = |id: &str| out.iter().any(|o| o.id == id);
            let mut id = c.id;
            if id.is_empty() || taken(&id) {
                id = format!("call_{position}");
                while taken(&id) {
                    id.push('_');
                }
            }
            out.push(ToolCall {
                id,
                name: c.name,
                arguments: c.arguments,
            });
        }
        out
    }
}

/// Whether `piece` opens a call of its own rather than continuing `call`.
fn starts_another(call: &Partial, piece: &ToolCallPiece) -> bool {
    let name = piece.name.as_deref().unwrap_or("");
    let id = piece.id.as_deref().unwrap_or("");
    let new_id = !id.is_empty() && !call.id.is_empty() && id != call.id;
    if !name.is_empty() && !call.name.is_empty() && new_id {
        return true;
    }
    piece.index.is_none()
        && id.is_empty()
        && !name.is_empty()
        && piece.arguments.as_deref().is_some_and(|a| !a.is_empty())
        && !call.name.is_empty()
        && complete_json(&call.arguments)
}

/// Whether `text` is a whole JSON value (the cheap test first: this runs per piece).
fn complete_json(text: &str) -> bool {
    text.trim_end().ends_with(['}', ']'])
        && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn assemble(chunks: &[Value]) -> Result<Vec<ToolCall>, AssemblyError> {
        let mut a = Assembler::new();
        for c in chunks {
            for p in pieces(&c["choices"][0]["delta"]["tool_calls"], false) {
                a.push(p)?;
            }
        }
        Ok(a.finish())
    }

    fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    fn delta(tool_calls: Value) -> Value {
        json!({"choices": [{"index": 0, "delta": {"tool_calls": tool_calls}}]})
    }

    #[test]
    fn openai_streams_id_and_name_first_then_arguments_in_pieces() {
        // The shape of OpenAI's chat.completion.chunk with two parallel calls.
        let chunks = [
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null,
                "tool_calls": [{"index": 0, "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA",
                    "type": "function", "function": {"name": "get_weather", "arguments": ""}}]},
                "finish_reason": null}]}),
            delta(json!([{"index": 0, "function": {"arguments": "{\"lo"}}])),
            delta(json!([{"index": 0, "function": {"arguments": "cation\": \"Par"}}])),
            delta(json!([{"index": 0, "function": {"arguments": "is\"}"}}])),
            delta(json!([{"index": 1, "id": "call_2", "type": "function",
                "function": {"name": "get_time", "arguments": ""}}])),
            delta(json!([{"index": 1, "function": {"arguments": "{}"}}])),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ];
        assert_eq!(
            assemble(&chunks).unwrap(),
            vec![
                call(
                    "call_DdmO9pD3xa9XTPNJ32zg2hcA",
                    "get_weather",
                    r#"{"location": "Paris"}"#
                ),
                call("call_2", "get_time", "{}"),
            ]
        );
    }

    #[test]
    fn ollama_sends_whole_calls_and_may_reuse_index_zero() {
        let chunks = [
            delta(
                json!([{"id": "call_wteop8bt", "index": 0, "type": "function",
                "function": {"name": "run_command", "arguments": "{\"command\":\"ls\"}"}}]),
            ),
            delta(
                json!([{"id": "call_rk2xye1l", "index": 0, "type": "function",
                "function": {"name": "run_command", "arguments": "{\"command\":\"ls -l\"}"}}]),
            ),
        ];
        assert_eq!(
            assemble(&chunks).unwrap(),
            vec![
                call("call_wteop8bt", "run_command", r#"{"command":"ls"}"#),
                call("call_rk2xye1l", "run_command", r#"{"command":"ls -l"}"#),
            ]
        );
    }

    #[test]
    fn missing_index_and_id_repeated_names_and_fresh_ids_are_tolerated() {
        // One call, no index, no id; the name repeated in every piece.
        let chunks = [
            delta(json!([{"function": {"name": "search", "arguments": "{\"q\":"}}])),
            delta(json!([{"function": {"name": "search", "arguments": "\"x\"}"}}])),
        ];
        assert_eq!(
            assemble(&chunks).unwrap(),
            vec![call("call_0", "search", r#"{"q":"x"}"#)]
        );
        // A fresh id in every argument piece (no name): still one call, the first id.
        let chunks = [
            delta(json!([{"index": 0, "id": "a1", "function": {"name": "f"}}])),
            delta(json!([{"index": 0, "id": "a2", "function": {"arguments": "{"}}])),
            delta(json!([{"index": 0, "id": "a3", "function": {"arguments": "}"}}])),
        ];
        assert_eq!(assemble(&chunks).unwrap(), vec![call("a1", "f", "{}")]);
        // A name split in pieces.
        let chunks = [
            delta(json!([{"index": 0, "function": {"name": "read_"}}])),
            delta(json!([{"index": 0, "function": {"name": "file", "arguments": "{}"}}])),
        ];
        assert_eq!(
            assemble(&chunks).unwrap(),
            vec![call("call_0", "read_file", "{}")]
        );
        // Whole calls without index or id, one after the other.
        let chunks = [
            delta(json!([{"function": {"name": "a", "arguments": "{}"}}])),
            delta(json!([{"function": {"name": "b", "arguments": "{\"x\":1}"}}])),
        ];
        assert_eq!(
            assemble(&chunks).unwrap(),
            vec![call("call_0", "a", "{}"), call("call_1", "b", r#"{"x":1}"#)]
        );
    }

    #[test]
    fn calls_come_in_index_order_with_unique_ids() {
        let chunks = [
            delta(
                json!([{"index": 2, "id": "same", "function": {"name": "c", "arguments": "3"}},
                {"index": 0, "id": "same", "function": {"name": "a", "arguments": "1"}}]),
            ),
            delta(json!([{"index": 1, "function": {"name": "b", "arguments": "2"}}])),
            delta(json!([{"index": 1, "id": "call_1", "function": {}}])),
        ];
        let got = assemble(&chunks).unwrap();
        let names: Vec<&str> = got.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let ids: Vec<&str> = got.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(
            ids,
            ["same", "call_1", "call_2"],
            "a repeated id is replaced"
        );
    }

    #[test]
    fn arguments_that_are_values_or_not_json_pass_through_as_text() {
        let whole = json!([{"id": "x", "function": {"name": "f", "arguments": {"a": 1}}},
            {"id": "y", "function": {"name": "g", "arguments": "not json {"}}]);
        let mut a = Assembler::new();
        for p in pieces(&whole, true) {
            a.push(p).unwrap();
        }
        assert_eq!(
            a.finish(),
            vec![call("x", "f", r#"{"a":1}"#), call("y", "g", "not json {")]
        );
        assert_eq!(pieces(&json!("nope"), false), vec![]);
        assert_eq!(pieces(&json!([1, null]), false), vec![]);
        let mut a = Assembler::new();
        a.push(ToolCallPiece {
            index: Some(0),
            ..ToolCallPiece::default()
        })
        .unwrap();
        assert!(a.is_empty(), "a piece with nothing in it makes no call");
    }

    #[test]
    fn too_many_calls_are_dropped_and_said_so() {
        let mut a = Assembler::new();
        for i in 0..(config::MAX_TOOL_CALLS_PER_STEP as u64 + 10) {
            for part in ["{", "}"] {
                a.push(ToolCallPiece {
                    index: Some(i),
                    id: Some(format!("id{i}")),
                    name: Some("f".into()),
                    arguments: Some(part.into()),
                })
                .unwrap();
            }
        }
        assert!(a.overflowed());
        let calls = a.finish();
        assert_eq!(calls.len(), config::MAX_TOOL_CALLS_PER_STEP);
        assert!(calls.iter().all(|c| c.arguments == "{}"));
        assert_eq!(calls[63].id, "id63");
    }

    #[test]
    fn oversized_arguments_and_names_are_errors() {
        let mut a = Assembler::new();
        let piece = |args: String| ToolCallPiece {
            index: Some(0),
            arguments: Some(args),
            name: Some("f".into()),
            ..ToolCallPiece::default()
        };
        a.push(piece("x".repeat(config::MAX_TOOL_ARGUMENT_BYTES)))
            .unwrap();
        assert!(matches!(
            a.push(piece("y".into())),
            Err(AssemblyError::ArgumentsTooLong { index: 0, .. })
        ));
        let mut a = Assembler::new();
        let long = ToolCallPiece {
            index: Some(3),
            name: Some("n".repeat(config::MAX_TOOL_CALL_NAME_BYTES + 1)),
            ..ToolCallPiece::default()
        };
        assert!(matches!(
            a.push(long),
            Err(AssemblyError::NameTooLong { what: "name", .. })
        ));
    }

    /// Cuts `s` at the given char positions.
    fn cut(s: &str, cuts: &[usize]) -> Vec<String> {
        let chars: Vec<char> = s.chars().collect();
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (chars.len() + 1)).collect();
        at.push(chars.len());
        at.sort_unstable();
        at.dedup();
        let mut out = Vec::new();
        let mut from = 0;
        for end in at {
            out.push(chars[from..end].iter().collect());
            from = end;
        }
        out
    }

    proptest! {
        /// However a server cuts the same calls (arguments in any pieces, several calls in
        /// one chunk or interleaved, id and name first and maybe repeated), they assemble
        /// to the same calls.
        #[test]
        fn any_split_assembles_to_the_same_calls(
            calls in prop::collection::vec(
                ("[a-z0-9]{1,8}", "[a-z_]{1,12}", "\\PC{0,40}"), 1..6),
            cuts in prop::collection::vec(prop::collection::vec(0usize..64, 0..6), 6),
            per_chunk in 1usize..4,
            repeat_name in any::<bool>(),
            interleave in any::<bool>(),
        ) {
            let expected: Vec<ToolCall> = calls
                .iter()
                .enumerate()
                .map(|(i, (id, name, args))| call(&format!("{id}_{i}"), name, args))
                .collect();
            // Every call's pieces, in order.
            let per_call: Vec<Vec<Value>> = expected
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let mut ps = vec![json!({"index": i, "id": c.id, "type": "function",
                        "function": {"name": c.name, "arguments": ""}})];
                    for part in cut(&c.arguments, &cuts[i]) {
                        let mut f = json!({"arguments": part});
                        if repeat_name {
                            f["name"] = json!(c.name);
                        }
                        ps.push(json!({"index": i, "function": f}));
                    }
                    ps
                })
                .collect();
            let mut order: Vec<Value> = Vec::new();
            if interleave {
                let longest = per_call.iter().map(Vec::len).max().unwrap_or(0);
                for k in 0..longest {
                    order.extend(per_call.iter().filter_map(|ps| ps.get(k).cloned()));
                }
            } else {
                order = per_call.into_iter().flatten().collect();
            }
            let chunks: Vec<Value> = order
                .chunks(per_chunk)
                .map(|ps| delta(Value::Array(ps.to_vec())))
                .collect();
            prop_assert_eq!(assemble(&chunks).unwrap(), expected);
        }
    }
}
