//! ChatGPT's data export, `conversations.json`: a JSON array of conversations, each with
//! `id` (or `conversation_id`), `title`, `create_time` (epoch seconds, fractional),
//! `mapping` (node id → {`message`, `parent`, `children`}) and `current_node`. A message
//! has `author.role` (user, assistant, system, tool), `author.name` (a tool's), `content`
//! (`content_type` with `parts`: strings, nulls, or objects such as image pointers; or a
//! `text`), `create_time` and `metadata.model_slug`. Nodes without a message (the root)
//! are skipped over.

use std::io::BufRead;

use jiff::Timestamp;
use serde_json::{Map, Value};

use super::stream::{ArrayStream, text_field};
use super::{Conversation, Message, ReadError, Role, Source, count_skipped};

/// The conversations of an export, one at a time.
pub fn read(input: impl BufRead) -> impl Iterator<Item = Result<Conversation, ReadError>> {
    ArrayStream::new(input).map(|r| r.and_then(|(index, v)| conversation(index, &v)))
}

/// A time in epoch seconds (ChatGPT and Open WebUI write them), to the microsecond.
pub fn epoch(v: Option<&Value>) -> Option<Timestamp> {
    let s = v?.as_f64()?;
    // Beyond jiff's range (or NaN) is as good as absent.
    Timestamp::from_microsecond((s * 1e6).round() as i64).ok()
}

fn conversation(index: usize, v: &Value) -> Result<Conversation, ReadError> {
    let id = text_field(v, &["id", "conversation_id"]);
    let title = text_field(v, &["title"]);
    let fail = |reason: String| ReadError {
        index,
        id: id.clone(),
        reason: match &title {
            Some(t) => format!("“{t}”: {reason}"),
            None => reason,
        },
    };
    let Some(conv_id) = id.clone() else {
        return Err(fail("it has no `id`".into()));
    };
    let mapping = v
        .get("mapping")
        .and_then(Value::as_object)
        .ok_or_else(|| fail("it has no `mapping` object".into()))?;
    let mut messages = Vec::with_capacity(mapping.len());
    for (key, node) in mapping {
        if let Some(m) = message(key, node, mapping).map_err(&fail)? {
            messages.push(m);
        }
    }
    Ok(Conversation {
        source: Source::ChatGpt,
        id: conv_id,
        title,
        created_at: epoch(v.get("create_time")),
        messages,
        current: resolve(v.get("current_node").and_then(Value::as_str), mapping),
    })
}

/// The nearest node at or above `id` that carries a message (nodes without one are the
/// root and placeholders). A missing id is passed on for the tree to refuse.
fn resolve<'a>(mut id: Option<&'a str>, mapping: &'a Map<String, Value>) -> Option<String> {
    // A chain longer than the mapping is a cycle: the tree refuses it later.
    for _ in 0..=mapping.len() {
        let key = id?;
        let Some(node) = mapping.get(key) else {
            return Some(key.to_owned());
        };
        if node.get("message").is_some_and(|m| !m.is_null()) {
            return Some(key.to_owned());
        }
        id = node.get("parent").and_then(Value::as_str);
    }
    id.map(str::to_owned)
}

/// The message of the node `key`, `None` when it carries none (the root, placeholders).
fn message(
    key: &str,
    node: &Value,
    mapping: &Map<String, Value>,
) -> Result<Option<Message>, String> {
    let Some(m) = node_message(key, node)? else {
        return Ok(None);
    };
    let parent = match node.get("parent") {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) => resolve(Some(p), mapping),
        Some(_) => return Err(format!("the parent of node {key:?} is not a string")),
    };
    let author = m.get("author");
    let role_name = author
        .and_then(|a| a.get("role"))
        .and_then(Value::as_str)
        .ok_or_else(|| format!("the message of node {key:?} has no `author.role`"))?;
    let mut skipped: Vec<(String, u64)> = Vec::new();
    let mut skip = |kind: &str| count_skipped(&mut skipped, kind, 1);
    let role = role_of(role_name, &mut skip);
    let content_type = m
        .get("content")
        .and_then(|c| c.get("content_type"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (role, text) = if content_type == "user_editable_context" {
        // Custom instructions: what the user told ChatGPT about themselves and how to
        // answer; a system prompt, never a turn of the conversation.
        (Role::System, custom_instructions(m.get("content")))
    } else if REASONING_CONTENT.contains(&content_type) || unshown(m, role) {
        // The model's hidden reasoning, its call to a tool (the tool's output follows as
        // its own node) and messages ChatGPT never showed: not part of what was said;
        // skipped over in the tree.
        return Ok(Some(Message {
            id: key.to_owned(),
            parent,
            role: Role::System,
            text: String::new(),
            created_at: epoch(m.get("create_time")),
            model: None,
            tool_name: None,
            skipped: Vec::new(),
        }));
    } else if role == Role::System && role_name != "system" {
        // An unknown role's text is not a system prompt: it is left out (and counted).
        (role, String::new())
    } else {
        (role, content_text(m.get("content"), &mut skip))
    };
    Ok(Some(Message {
        id: key.to_owned(),
        parent,
        role,
        text,
        created_at: epoch(m.get("create_time")),
        model: m
            .get("metadata")
            .and_then(|md| md.get("model_slug"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        tool_name: (role == Role::Tool)
            .then(|| author.and_then(|a| a.get("name")).and_then(Value::as_str))
            .flatten()
            .map(str::to_owned),
        skipped,
    }))
}

/// A node's `message` once the node is an object; `None` for one without a message.
fn node_message<'a>(key: &str, node: &'a Value) -> Result<Option<&'a Value>, String> {
    if !node.is_object() {
        return Err(format!("node {key:?} is not an object"));
    }
    match node.get("message") {
        None | Some(Value::Null) => Ok(None),
        Some(m) if m.is_object() => Ok(Some(m)),
        Some(_) => Err(format!("the message of node {key:?} is not an object")),
    }
}

/// The role ChatGPT's `author.role` names; an unknown one is a system message, counted
/// as skipped.
fn role_of(role_name: &str, skip: &mut dyn FnMut(&str)) -> Role {
    match role_name {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "system" => Role::System,
        "tool" => Role::Tool,
        other => {
            skip(&format!("{other} message"));
            Role::System
        }
    }
}

/// Whether ChatGPT never showed the message: hidden from the conversation, or the
/// model's call to a tool (addressed to a recipient other than `all`).
fn unshown(m: &Value, role: Role) -> bool {
    let hidden = m
        .pointer("/metadata/is_visually_hidden_from_conversation")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let to_a_tool = role == Role::Assistant
        && m.get("recipient")
            .and_then(Value::as_str)
            .is_some_and(|r| r != "all");
    to_a_tool || hidden
}

/// Content types of the model's own reasoning (o1/o3 and later), never shown as text.
const REASONING_CONTENT: &[&str] = &["thoughts", "reasoning_recap"];

/// Custom instructions' text: the profile and the instructions the user wrote.
fn custom_instructions(content: Option<&Value>) -> String {
    ["user_profile", "user_instructions"]
        .iter()
        .filter_map(|k| content.and_then(|c| c.get(*k)).and_then(Value::as_str))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// A message's text: its string parts (null ones ignored) joined by newlines, or the
/// content's `text`/`result`; every other part is counted as skipped by its type.
fn content_text(content: Option<&Value>, skip: &mut dyn FnMut(&str)) -> String {
    let Some(content) = content else {
        return String::new();
    };
    let kind = content
        .get("content_type")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    if let Some(parts) = content.get("parts").and_then(Value::as_array) {
        let mut texts = Vec::new();
        for p in parts {
            match p {
                Value::String(s) if !s.is_empty() => texts.push(s.as_str()),
                Value::String(_) | Value::Null => {}
                Value::Object(o) => match o.get("text").and_then(Value::as_str) {
                    // An audio transcription carries its words.
                    Some(t) if !t.is_empty() => texts.push(t),
                    _ => skip(
                        o.get("content_type")
                            .and_then(Value::as_str)
                            .unwrap_or("object part"),
                    ),
                },
                _ => skip("non-text part"),
            }
        }
        return texts.join("\n");
    }
    for field in ["text", "result"] {
        if let Some(t) = content.get(field).and_then(Value::as_str) {
            return t.to_owned();
        }
    }
    skip(kind);
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(json: &str) -> Result<Conversation, String> {
        read(json.as_bytes())
            .next()
            .unwrap_or_else(|| {
                Err(ReadError {
                    index: 0,
                    id: None,
                    reason: "none".into(),
                })
            })
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_node_without_a_message_is_skipped_over() {
        let c = one(r#"[{"id":"c","title":"T","create_time":1700000000.5,"current_node":"b",
            "mapping":{"root":{"message":null,"parent":null,"children":["a"]},
            "a":{"message":{"author":{"role":"user"},"content":{"content_type":"text","parts":["hi",null,""]},"create_time":null},"parent":"root","children":["b"]},
            "b":{"message":{"author":{"role":"assistant"},"content":{"content_type":"multimodal_text","parts":["see",{"content_type":"image_asset_pointer"}]},"metadata":{"model_slug":"gpt-4o"}},"parent":"a","children":[]}}}]"#)
        .unwrap();
        assert_eq!(c.messages.len(), 2);
        let a = c.messages.iter().find(|m| m.id == "a").unwrap();
        assert_eq!((a.parent.as_deref(), a.text.as_str()), (None, "hi"));
        let b = c.messages.iter().find(|m| m.id == "b").unwrap();
        assert_eq!(b.model.as_deref(), Some("gpt-4o"));
        assert_eq!(b.skipped, [("image_asset_pointer".to_owned(), 1)]);
        assert_eq!(c.current.as_deref(), Some("b"));
        assert_eq!(
            c.created_at.map(|t| t.as_microsecond()),
            Some(1_700_000_000_500_000)
        );
    }

    /// Custom instructions become the system prompt; reasoning, a call to a tool and a
    /// hidden message are skipped over (found by an outside review: they became turns).
    #[test]
    fn instructions_reasoning_and_tool_calls_are_not_turns() {
        let c = one(r#"[{"id":"c","title":"T","current_node":"d",
            "mapping":{
            "i":{"message":{"author":{"role":"user"},"content":{"content_type":"user_editable_context","user_profile":"I am a baker.","user_instructions":"Be brief."}},"parent":null,"children":["a"]},
            "a":{"message":{"author":{"role":"user"},"content":{"content_type":"text","parts":["why is the sky blue?"]}},"parent":"i","children":["t"]},
            "t":{"message":{"author":{"role":"assistant"},"content":{"content_type":"thoughts","thoughts":[]}},"parent":"a","children":["r"]},
            "r":{"message":{"author":{"role":"assistant"},"content":{"content_type":"reasoning_recap","content":"thought"}},"parent":"t","children":["p"]},
            "p":{"message":{"author":{"role":"assistant"},"recipient":"python","content":{"content_type":"code","text":"print(1)"}},"parent":"r","children":["d"]},
            "d":{"message":{"author":{"role":"assistant"},"content":{"content_type":"text","parts":["Rayleigh scattering."]}},"parent":"p","children":[]}}}]"#)
        .unwrap();
        let by = |id: &str| c.messages.iter().find(|m| m.id == id).unwrap();
        assert_eq!(by("i").role, Role::System);
        assert_eq!(by("i").text, "I am a baker.\n\nBe brief.");
        for hidden in ["t", "r", "p"] {
            assert!(
                by(hidden).text.is_empty() && by(hidden).skipped.is_empty(),
                "{hidden}"
            );
        }
        assert_eq!(by("d").text, "Rayleigh scattering.");
    }

    #[test]
    fn wrong_shapes_name_the_conversation() {
        for (json, why) in [
            (r#"[{"id":"c","title":"T"}]"#, "no `mapping`"),
            (r#"[{"title":"T","mapping":{}}]"#, "no `id`"),
            (
                r#"[{"id":"c","mapping":{"a":{"message":{"content":{}},"parent":null}}}]"#,
                "no `author.role`",
            ),
            (
                r#"[{"id":"c","mapping":{"a":{"message":{"author":{"role":"user"}},"parent":5}}}]"#,
                "parent of node",
            ),
        ] {
            let e = one(json).unwrap_err();
            assert!(e.contains(why) && e.contains("conversation 0"), "{e}");
        }
    }
}
