//! Text on its way to a terminal. Model and user text is untrusted: an escape sequence in
//! it could clear the screen, retitle the window, rewrite what was printed before, or
//! worse on some terminals. Every control character except newline and tab is shown in
//! caret notation (`ESC` as `^[`, BEL as `^G`, DEL as `^?`, the C1 control U+009B as
//! `^[[`), so a sequence becomes visible, inert text.
//!
//! Each character is handled on its own, with no state: streamed chunks can be passed
//! through one by one even when a sequence is split between them.

use std::borrow::Cow;

/// `text` with every control character made visible (newlines and tabs kept, carriage
/// returns dropped: `\r\n` is a line end, and a lone `\r` would let text overwrite the
/// line before it).
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        push_printable(&mut out, c);
    }
    Cow::Owned(out)
}

/// Appends `c` to `out` as [`printable`] shows it.
pub fn push_printable(out: &mut String, c: char) {
    let code = u32::from(c);
    match c {
        '\n' | '\t' => out.push(c),
        '\r' => {}
        '\u{7f}' => out.push_str("^?"),
        _ if code < 0x20 => {
            out.push('^');
            out.push(char::from_u32(code + 0x40).unwrap_or('?'));
        }
        // C1 controls are 8-bit forms of ESC + a letter: show them as that.
        _ if (0x80..0xa0).contains(&code) => {
            out.push_str("^[");
            out.push(char::from_u32(code - 0x40).unwrap_or('?'));
        }
        _ if is_bidi(c) => out.push_str(&format!("<U+{code:04X}>")),
        _ => out.push(c),
    }
}

fn is_escaped(c: char) -> bool {
    let code = u32::from(c);
    (code < 0x20 && c != '\n' && c != '\t') || (0x7f..0xa0).contains(&code) || is_bidi(c)
}

/// Bidirectional controls: invisible, they reorder what a terminal shows (a "Trojan
/// Source" line reads differently from what it is). Shown as `<U+202E>`.
fn is_bidi(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `1 session`, `2 sessions`: a count and its noun, in the right number (English plurals
/// brain prints are all regular).
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// JSON text for a terminal: what serde_json leaves raw inside strings (DEL, the C1
/// controls, bidirectional controls) written as `\uXXXX` escapes, which decode to the
/// same value, so `--json` output stays exact and inert.
pub fn json_text(value: &serde_json::Value) -> String {
    let text = value.to_string();
    if !text
        .chars()
        .any(|c| (0x7f..0xa0).contains(&u32::from(c)) || is_bidi(c))
    {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if (0x7f..0xa0).contains(&u32::from(c)) || is_bidi(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_say_one_thing_and_many_things() {
        use super::count;
        assert_eq!(
            [count(0, "token"), count(1, "session"), count(2, "event")],
            ["0 tokens", "1 session", "2 events"]
        );
    }

    use super::*;

    #[test]
    fn csi_sequences_become_visible_text() {
        assert_eq!(printable("a\x1b[2Jb"), "a^[[2Jb");
        assert_eq!(printable("\x1b[31mred\x1b[0m"), "^[[31mred^[[0m");
    }

    #[test]
    fn osc_sequences_with_either_terminator_become_visible_text() {
        assert_eq!(printable("\x1b]0;pwned\x07"), "^[]0;pwned^G");
        assert_eq!(printable("\x1b]0;pwned\x1b\\"), "^[]0;pwned^[\\");
        assert_eq!(
            printable("\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\"),
            "^[]8;;http://evil^[\\click^[]8;;^[\\"
        );
    }

    #[test]
    fn a_lone_escape_and_other_c0_controls_are_shown() {
        assert_eq!(printable("\x1b"), "^[");
        assert_eq!(printable("bell\x07 nul\x00 bs\x08"), "bell^G nul^@ bs^H");
    }

    #[test]
    fn carriage_returns_are_dropped_so_a_line_cannot_overwrite_itself() {
        assert_eq!(printable("safe\rEVIL"), "safeEVIL");
        assert_eq!(printable("line one\r\nline two"), "line one\nline two");
    }

    #[test]
    fn c1_controls_and_del_are_shown() {
        assert_eq!(printable("\u{9b}2J"), "^[[2J");
        assert_eq!(printable("\u{9d}0;x\u{9c}"), "^[]0;x^[\\");
        assert_eq!(printable("del\u{7f}"), "del^?");
    }

    #[test]
    fn bidirectional_controls_are_shown() {
        assert_eq!(
            printable("access\u{202e}nimda\u{2066}x\u{2069}"),
            "access<U+202E>nimda<U+2066>x<U+2069>"
        );
    }

    #[test]
    fn json_for_a_terminal_escapes_what_serde_leaves_raw_and_decodes_the_same() {
        let v = serde_json::json!({"t": "a\u{9b}2J\u{202e}b\u{7f}\u{1b}c"});
        let text = json_text(&v);
        assert!(
            !text.chars().any(|c| c.is_control() || is_bidi(c)),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap(), v);
    }

    #[test]
    fn newlines_tabs_and_other_text_are_kept_as_they_are() {
        let text = "line\n\tindented — ünïcödé, 中文, emoji 🦩, NBSP\u{a0}here";
        assert!(matches!(printable(text), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn a_sequence_split_between_chunks_is_still_made_visible() {
        let chunks = ["before \x1b", "[2J\x1b]0;pw", "ned\x07 after"];
        let joined: String = chunks.iter().map(|c| printable(c)).collect();
        assert_eq!(joined, printable(&chunks.concat()));
        assert!(!joined.contains('\x1b') && !joined.contains('\x07'));
    }
}
