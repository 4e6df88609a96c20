//! Claude's data export, `conversations.json`: a JSON array of conversations, each with
//! `uuid`, `name`, `created_at` (RFC 3339) and `chat_messages` in order: `uuid`, `sender`
//! (`human` or `assistant`), `text` or `content` (blocks; those of type `text` carry the
//! words, others such as `tool_use` or `image` are counted as skipped), `created_at`, and
//! `attachments`/`files` (counted as skipped). The messages are a chain.

use std::io::BufRead;

use jiff::Timestamp;
use serde_json::Value;

use super::stream::{ArrayStream, text_field};
use super::{Conversation, Message, ReadError, Role, Source, count_skipped};

/// The conversations of an export, one at a time.
pub fn read(input: impl BufRead) -> impl Iterator<Item = Result<Conversation, ReadError>> {
    ArrayStream::new(input).map(|r| r.and_then(|(index, v)| conversation(index, &v)))
}

fn time(v: Option<&Value>) -> Option<Timestamp> {
    v?.as_str()?.parse().ok()
}

fn conversation(index: usize, v: &Value) -> Result<Conversation, ReadError> {
    let id = text_field(v, &["uuid"]);
    let title = text_field(v, &["name"]);
    let fail = |reason: String| ReadError {
        index,
        id: id.clone(),
        reason: match &title {
            Some(t) if !t.is_empty() => format!("“{t}”: {reason}"),
            _ => reason,
        },
    };
    let Some(conv_id) = id.clone() else {
        return Err(fail("it has no `uuid`".into()));
    };
    let list = v
        .get("chat_messages")
        .and_then(Value::as_array)
        .ok_or_else(|| fail("it has no `chat_messages` array".into()))?;
    let mut messages: Vec<Message> = Vec::with_capacity(list.len());
    for (n, m) in list.iter().enumerate() {
        let message =
            message(n, m, messages.last()).map_err(|why| fail(format!("message {n}: {why}")))?;
        messages.push(message);
    }
    Ok(Conversation {
        source: Source::Claude,
        id: conv_id,
        title: title.filter(|t| !t.is_empty()),
        created_at: time(v.get("created_at")),
        current: messages.last().map(|m| m.id.clone()),
        messages,
    })
}

/// The `n`th of `chat_messages`, following `last` unless it names its parent; an error
/// says why it cannot be read.
fn message(n: usize, m: &Value, last: Option<&Message>) -> Result<Message, String> {
    if !m.is_object() {
        return Err("it is not an object".into());
    }
    let role = match m.get("sender").and_then(Value::as_str) {
        Some("human") => Role::User,
        Some("assistant") => Role::Assistant,
        Some(other) => return Err(format!("unknown sender {other:?}")),
        None => return Err("it has no `sender`".into()),
    };
    let mut skipped: Vec<(String, u64)> = Vec::new();
    let text = message_text(m, &mut skipped);
    let files = m.get("files").and_then(Value::as_array).map_or(0, Vec::len);
    count_skipped(&mut skipped, "file", files as u64);
    let id = text_field(m, &["uuid"]).unwrap_or_else(|| format!("#{n}"));
    // Claude keeps every branch in the list and links each message to its parent;
    // without a link (older exports) the list is one chain.
    let parent = match m.get("parent_message_uuid").and_then(Value::as_str) {
        Some(p) if p == CLAUDE_ROOT => None,
        Some(p) => Some(p.to_owned()),
        None => last.map(|p| p.id.clone()),
    };
    Ok(Message {
        id,
        parent,
        role,
        text,
        created_at: time(m.get("created_at")),
        model: None,
        tool_name: None,
        skipped,
    })
}

/// A message's words: its `text` blocks (or else its `text`), then any pasted text;
/// other blocks and attachments are counted in `skipped`.
fn message_text(m: &Value, skipped: &mut Vec<(String, u64)>) -> String {
    let mut texts: Vec<&str> = Vec::new();
    if let Some(blocks) = m.get("content").and_then(Value::as_array) {
        for b in blocks {
            match (
                b.get("type").and_then(Value::as_str),
                b.get("text").and_then(Value::as_str),
            ) {
                (Some("text"), Some(t)) => texts.push(t),
                (Some(kind), _) => count_skipped(skipped, kind, 1),
                (None, _) => count_skipped(skipped, "unknown block", 1),
            }
        }
    }
    let text = if texts.is_empty() {
        m.get("text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    } else {
        texts.join("\n\n")
    };
    // Pasted text arrives as an attachment with its `extracted_content`: kept, after
    // the message; other attachments and files are left out (and counted).
    let mut text = text;
    for a in m
        .get("attachments")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        match a.get("extracted_content").and_then(Value::as_str) {
            Some(pasted) if !pasted.trim().is_empty() => {
                if !text.is_empty() {
                    text.push_str("\n\n");
                }
                text.push_str(pasted);
            }
            _ => count_skipped(skipped, "attachment", 1),
        }
    }
    text
}

/// The parent Claude gives a conversation's first messages.
const CLAUDE_ROOT: &str = "00000000-0000-4000-8000-000000000000";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_chain_with_blocks_and_attachments_counted() {
        let json = r#"[{"uuid":"c1","name":"Hi","created_at":"2024-05-01T10:00:00.123Z","chat_messages":[
            {"uuid":"m1","sender":"human","text":"hello","created_at":"2024-05-01T10:00:01Z","attachments":[{"file_name":"a.txt"}],"files":[]},
            {"uuid":"m2","sender":"assistant","text":"","content":[{"type":"text","text":"hi"},{"type":"tool_use","name":"x"}]}]}]"#;
        let c = read(json.as_bytes()).next().unwrap().unwrap();
        assert_eq!(c.messages[0].skipped, [("attachment".to_owned(), 1)]);
        assert_eq!(c.messages[1].parent.as_deref(), Some("m1"));
        assert_eq!(c.messages[1].text, "hi");
        assert_eq!(c.messages[1].skipped, [("tool_use".to_owned(), 1)]);
        assert_eq!(c.current.as_deref(), Some("m2"));
    }

    /// Branches come from `parent_message_uuid` (found by an outside review: a
    /// regenerated answer was chained after the first one); pasted text is kept.
    #[test]
    fn branches_follow_the_parent_links_and_pasted_text_is_kept() {
        let root = CLAUDE_ROOT;
        let json = format!(
            r#"[{{"uuid":"c1","name":"Hi","chat_messages":[
            {{"uuid":"q","sender":"human","text":"1+2?","parent_message_uuid":"{root}","attachments":[{{"file_name":"p.txt","extracted_content":"pasted words"}}]}},
            {{"uuid":"a1","sender":"assistant","text":"It is 3.","parent_message_uuid":"q"}},
            {{"uuid":"a2","sender":"assistant","text":"It is 2.","parent_message_uuid":"q"}}]}}]"#
        );
        let c = read(json.as_bytes()).next().unwrap().unwrap();
        let by = |id: &str| c.messages.iter().find(|m| m.id == id).unwrap();
        assert_eq!(by("q").parent, None);
        assert_eq!(by("q").text, "1+2?\n\npasted words");
        assert!(by("q").skipped.is_empty());
        assert_eq!(by("a1").parent.as_deref(), Some("q"));
        assert_eq!(by("a2").parent.as_deref(), Some("q"));
        assert_eq!(c.current.as_deref(), Some("a2"));
    }

    #[test]
    fn an_unknown_sender_names_the_conversation_and_message() {
        let json = r#"[{"uuid":"c1","name":"Hi","chat_messages":[{"sender":"robot"}]}]"#;
        let e = read(json.as_bytes())
            .next()
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("(c1)") && e.contains("message 0") && e.contains("robot"),
            "{e}"
        );
    }
}
