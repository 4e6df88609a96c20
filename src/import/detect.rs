//! Which tool wrote a file, from its shape (SPEC §15 `--from auto`): a SQLite database is
//! llm's `logs.db`; JSON lines of events are brain's export; a JSON array is ChatGPT's
//! (`mapping`), Claude's (`chat_messages`) or Open WebUI's (`chat` … `history`) export,
//! told apart by the first of those keys in the file's first bytes.

use std::io::{BufRead, Read};

use super::Source;

/// How much of the file detection looks at: enough for the first conversation's keys.
pub const DETECT_BYTES: usize = 256 * 1024;

/// What a file looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Is(Source),
    /// A JSON array with no conversation in it.
    EmptyArray,
    /// None of the above; says what it is.
    Unknown(&'static str),
}

impl Shape {
    /// For messages: what the file looks like.
    pub fn describe(self) -> &'static str {
        match self {
            Shape::Is(Source::Brain) => "a brain export (JSON lines of events)",
            Shape::Is(Source::ChatGpt) => "a ChatGPT export (conversations with a `mapping`)",
            Shape::Is(Source::Claude) => "a Claude export (conversations with `chat_messages`)",
            Shape::Is(Source::OpenWebUi) => "an Open WebUI export (chats with a `history`)",
            Shape::Is(Source::Llm) => "a SQLite database (llm's logs.db)",
            Shape::EmptyArray => "an empty JSON array",
            Shape::Unknown(what) => what,
        }
    }
}

/// Reads up to [`DETECT_BYTES`] of `input` and gives them back with what they look like;
/// the caller reads the prefix and then the rest.
pub fn sniff(input: &mut dyn Read) -> std::io::Result<(Vec<u8>, Shape)> {
    let mut prefix = Vec::new();
    input.take(DETECT_BYTES as u64).read_to_end(&mut prefix)?;
    let shape = shape(&prefix, prefix.len() < DETECT_BYTES);
    Ok((prefix, shape))
}

/// The shape of a file from its first bytes (`whole`: they are all of it).
pub fn shape(prefix: &[u8], whole: bool) -> Shape {
    if prefix.starts_with(b"SQLite format 3\0") {
        return Shape::Is(Source::Llm);
    }
    let text = prefix.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(prefix);
    let start = text.iter().position(|b| !b.is_ascii_whitespace());
    match start.map(|i| text[i]) {
        None => Shape::Unknown("an empty file"),
        Some(b'{') if key_at(text, b"session_id").is_some() => Shape::Is(Source::Brain),
        Some(b'{') => Shape::Unknown("a JSON object, not an export"),
        Some(b'[') => {
            let found = [
                (b"mapping".as_slice(), Source::ChatGpt),
                (b"chat_messages".as_slice(), Source::Claude),
                (b"history".as_slice(), Source::OpenWebUi),
            ]
            .into_iter()
            .filter_map(|(k, s)| key_at(text, k).map(|at| (at, s)))
            .min_by_key(|(at, _)| *at);
            match found {
                Some((_, s)) => Shape::Is(s),
                None if whole && is_empty_array(text) => Shape::EmptyArray,
                None => Shape::Unknown("a JSON array of something else"),
            }
        }
        Some(_) => Shape::Unknown("neither JSON nor a SQLite database"),
    }
}

fn is_empty_array(text: &[u8]) -> bool {
    let inner: Vec<u8> = text
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    inner == b"[]"
}

/// Where `"key"` first appears as an object key (followed by `:`), not inside a string
/// (where its quotes would be escaped).
fn key_at(text: &[u8], key: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = find(&text[from..], key) {
        let at = from + i;
        let open =
            at.checked_sub(1).map(|o| text[o]) == Some(b'"') && (at < 2 || text[at - 2] != b'\\');
        let after = &text[at + key.len()..];
        let close = after.first() == Some(&b'"')
            && after[1..]
                .iter()
                .find(|b| !b.is_ascii_whitespace())
                .is_some_and(|b| *b == b':');
        if open && close {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The prefix sniffed, then the rest of the input.
pub fn rejoin<R: Read>(prefix: Vec<u8>, rest: R) -> impl BufRead {
    std::io::BufReader::with_capacity(64 * 1024, std::io::Cursor::new(prefix).chain(rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_format_is_told_by_its_shape() {
        let cases: [(&[u8], Shape); 9] = [
            (b"SQLite format 3\0...", Shape::Is(Source::Llm)),
            (br#"{"session_id":"x","seq":1}"#, Shape::Is(Source::Brain)),
            (
                br#"[{"title":"has \"chat_messages\": in it","mapping": {}}]"#,
                Shape::Is(Source::ChatGpt),
            ),
            (
                br#" [ {"uuid":"u","chat_messages" : []}]"#,
                Shape::Is(Source::Claude),
            ),
            (
                br#"[{"id":"1","chat":{"history":{"messages":{}}}}]"#,
                Shape::Is(Source::OpenWebUi),
            ),
            (b" [ ]\n", Shape::EmptyArray),
            (b"", Shape::Unknown("an empty file")),
            (b"[1, 2]", Shape::Unknown("a JSON array of something else")),
            (
                b"hello",
                Shape::Unknown("neither JSON nor a SQLite database"),
            ),
        ];
        for (bytes, want) in cases {
            assert_eq!(
                shape(bytes, true),
                want,
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}
