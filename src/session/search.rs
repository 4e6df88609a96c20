//! Search queries and snippets (SPEC §7), as pure functions.
//!
//! A plain query is what a person types: each whitespace-separated word becomes a quoted
//! FTS5 string (inner quotes doubled), and all of them must match; control characters
//! separate words. Nothing a person types
//! is FTS5 syntax, so `e-mail`, `don't`, `C++`, `NEAR(` or a lone `*` just work. A word
//! with no letters or digits tokenizes to nothing and FTS5 ignores it.
//!
//! Snippets come from FTS5 `snippet()` with markers made of a random nonce, so message
//! text can never forge a highlight; [`parse_marked`] turns the marked text into plain text
//! plus `[start, end)` ranges counted in characters (Unicode scalar values).

/// The FTS5 expression for a plain-text query; `None` when it has no words.
pub fn plain_to_fts(text: &str) -> Option<String> {
    // Control characters are never part of a token, and FTS5's parser stops at a NUL:
    // they separate words like whitespace does.
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let terms: Vec<String> = text
        .split_whitespace()
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" "))
}

/// Characters that end or open a sentence around a word; trimmed before deciding
/// whether a word is a [literal](literal_words).
const SENTENCE_MARKS: &[char] = &[
    '.', ',', ';', ':', '!', '?', '"', '\'', '(', ')', '[', ']', '{', '}',
];

/// The query's words that must match verbatim (lower-cased): those with a symbol at an
/// edge once sentence punctuation is trimmed (`C++`, `C#`, `#42`, `@alice`, `50%`), or a
/// dot before a letter (`.NET`, `.env`). The index keeps only letters and digits, so
/// `C++` alone is the term `c` and found every "c"; the stores require a literal as text
/// too. A symbol inside a word (`node.js`, `e-mail`, `a-b`, `don't`) stays a phrase of
/// its parts: `node.js` finds "node js" and "Node.JS". A word of symbols alone (`++`) has
/// no term and is ignored, as before.
pub fn literal_words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in words(text) {
        let core = word
            .trim_end_matches(SENTENCE_MARKS)
            .trim_start_matches(['"', '\'', '(', '[', '{']);
        let chars: Vec<char> = core.chars().collect();
        let symbol = |c: &char| !c.is_alphanumeric() && !SENTENCE_MARKS.contains(c);
        let (Some(first), Some(last)) = (chars.first(), chars.last()) else {
            continue;
        };
        let dotted = *first == '.' && chars.get(1).is_some_and(|c| c.is_alphanumeric());
        let literal =
            chars.iter().any(|c| c.is_alphanumeric()) && (symbol(first) || symbol(last) || dotted);
        let lower = core.to_lowercase();
        if literal && !out.contains(&lower) {
            out.push(lower);
        }
    }
    out
}

/// The lower-cased letter-and-digit runs of the query's words that are not
/// [literals](literal_words): the terms a highlight may cover on its own.
pub fn query_tokens(text: &str) -> Vec<String> {
    let literals = literal_words(text);
    words(text)
        .filter(|w| {
            !literals
                .iter()
                .any(|l| w.to_lowercase().contains(l.as_str()))
        })
        .flat_map(|w| {
            alnum_runs(&w.to_lowercase())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The runs of letters and digits in `text`.
pub fn alnum_runs(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
}

/// A plain query's words: split at whitespace and control characters.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
}

/// The SQL `LIKE` pattern that finds `literal` anywhere in a text, `\` escaping
/// `%`, `_` and itself (both stores read it with `\` as the escape).
pub fn like_pattern(literal: &str) -> String {
    let mut out = String::from("%");
    for c in literal.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('%');
    out
}

/// The opening and closing highlight markers for one query. Private-use characters
/// around a random nonce: not something text contains by accident, and not guessable.
pub fn markers(nonce: &str) -> (String, String) {
    (
        format!("\u{E000}{nonce}\u{E001}"),
        format!("\u{E002}{nonce}\u{E003}"),
    )
}

/// Plain text and the character ranges that were between `open` and `close`.
/// Unbalanced markers cannot come from `snippet()`; any left over are dropped.
pub fn parse_marked(marked: &str, open: &str, close: &str) -> (String, Vec<[usize; 2]>) {
    let mut text = String::with_capacity(marked.len());
    let mut ranges = Vec::new();
    let mut chars = 0usize;
    let mut start: Option<usize> = None;
    let mut rest = marked;
    while !rest.is_empty() {
        let next_open = rest.find(open);
        let next_close = rest.find(close);
        let (at, is_open) = match (next_open, next_close) {
            (Some(o), Some(c)) if o < c => (o, true),
            (Some(o), None) => (o, true),
            (_, Some(c)) => (c, false),
            (None, None) => {
                text.push_str(rest);
                break;
            }
        };
        let before = &rest[..at];
        text.push_str(before);
        chars += before.chars().count();
        if is_open {
            start = Some(chars);
            rest = &rest[at + open.len()..];
        } else {
            if let Some(s) = start.take().filter(|s| *s < chars) {
                ranges.push([s, chars]);
            }
            rest = &rest[at + close.len()..];
        }
    }
    (text, ranges)
}

/// A hit's kind in words for people (`label` in the API, the CLI's listing): the event kind
/// stays machine-readable in `kind`, this is what a reader sees.
pub fn label(kind: &str) -> String {
    use crate::session::events::kind as k;
    match kind {
        k::USER_MESSAGE => "message".to_owned(),
        k::ASSISTANT_TURN => "answer".to_owned(),
        k::PENDING_STATE => "interrupted answer".to_owned(),
        k::COMPACTION_APPLIED => "summary".to_owned(),
        // A session's first title is in its `session_started`.
        k::SESSION_TITLED | k::SESSION_STARTED => "title".to_owned(),
        other => other.replace('_', " "),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hits_are_labelled_in_words() {
        use super::label;
        let labels: Vec<String> = [
            "user_message",
            "assistant_turn",
            "pending_state",
            "compaction_applied",
            "session_titled",
            "tool_execution",
            "session_started",
        ]
        .iter()
        .map(|k| label(k))
        .collect();
        assert_eq!(
            labels,
            [
                "message",
                "answer",
                "interrupted answer",
                "summary",
                "title",
                "tool execution",
                "title"
            ]
        );
    }

    use super::*;
    use proptest::prelude::*;

    /// Reads a sequence of space-separated FTS5 strings (`"a ""b"""` is `a "b"`); `None` if
    /// anything is not inside a string.
    fn read_fts_strings(fts: &str) -> Option<Vec<String>> {
        let mut out = Vec::new();
        let mut chars = fts.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '"' {
                return None;
            }
            let mut word = String::new();
            loop {
                match chars.next()? {
                    '"' if chars.peek() == Some(&'"') => {
                        chars.next();
                        word.push('"');
                    }
                    '"' => break,
                    other => word.push(other),
                }
            }
            out.push(word);
            match chars.next() {
                None => break,
                Some(' ') => {}
                Some(_) => return None,
            }
        }
        Some(out)
    }

    #[test]
    fn each_word_becomes_a_quoted_term() {
        assert_eq!(
            plain_to_fts("e-mail don't"),
            Some(r#""e-mail" "don't""#.into())
        );
        assert_eq!(
            plain_to_fts("  C++\tNEAR( * "),
            Some(r#""C++" "NEAR(" "*""#.into())
        );
        assert_eq!(
            plain_to_fts(r#"say "hi""#),
            Some(r#""say" """hi""""#.into())
        );
        assert_eq!(plain_to_fts(""), None);
        assert_eq!(plain_to_fts(" \n\t "), None);
        assert_eq!(plain_to_fts("a\u{0}b\u{1b}"), Some(r#""a" "b""#.into()));
        assert_eq!(plain_to_fts("\u{0}\u{7}"), None);
    }

    #[test]
    fn marked_text_becomes_plain_text_with_char_ranges() {
        let (o, c) = markers("n1");
        let marked = format!("…the {o}zébra{c} and {o}🦓{c}");
        let (text, ranges) = parse_marked(&marked, &o, &c);
        assert_eq!(text, "…the zébra and 🦓");
        assert_eq!(ranges, vec![[5, 10], [15, 16]]);
        let chars: Vec<char> = text.chars().collect();
        assert_eq!(chars[5..10].iter().collect::<String>(), "zébra");
    }

    #[test]
    fn text_that_looks_like_markup_stays_text() {
        let (o, c) = markers("nonce");
        let (text, ranges) = parse_marked("<b>x</b> \u{E000}\u{E001}", &o, &c);
        assert_eq!(text, "<b>x</b> \u{E000}\u{E001}");
        assert!(ranges.is_empty());
    }

    proptest! {
        /// A plain query is always one well-formed FTS5 string per word: reading the
        /// strings back (the way FTS5 does) gives exactly the words.
        #[test]
        fn plain_queries_are_always_well_quoted(q in any::<String>()) {
            let words: Vec<String> = q
                .split(|c: char| c.is_whitespace() || c.is_control())
                .filter(|w| !w.is_empty())
                .map(str::to_owned)
                .collect();
            match plain_to_fts(&q) {
                None => prop_assert!(words.is_empty()),
                Some(fts) => prop_assert_eq!(read_fts_strings(&fts), Some(words)),
            }
        }

        /// Marking arbitrary ranges of arbitrary text and parsing it back gives the text
        /// and the ranges.
        #[test]
        fn parse_inverts_marking(text in "\\PC{0,40}", cuts in proptest::collection::vec(0usize..40, 0..6)) {
            let chars: Vec<char> = text.chars().collect();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(chars.len())).collect();
            cuts.sort_unstable();
            cuts.dedup();
            let (o, c) = markers("x");
            let mut marked = String::new();
            let mut expected = Vec::new();
            let mut prev = 0;
            for pair in cuts.chunks(2) {
                if let [a, b] = *pair {
                    marked.extend(&chars[prev..a]);
                    marked.push_str(&o);
                    marked.extend(&chars[a..b]);
                    marked.push_str(&c);
                    expected.push([a, b]);
                    prev = b;
                }
            }
            marked.extend(&chars[prev..]);
            let (plain, ranges) = parse_marked(&marked, &o, &c);
            prop_assert_eq!(plain, text);
            prop_assert_eq!(ranges, expected);
        }
    }
}
