//! Markdown in the terminal chat, styled as it streams (issue 34): headings, bold, italics,
//! strikethrough, code spans, fenced code, bullets, quotes and rules are shown with
//! terminal attributes (SGR) instead of their markers. Pure: text in, text with escapes out.
//!
//! Text is shown as soon as its meaning is settled, not at the end of its line: a line's
//! start is held only until its kind is known (a `#` may begin a heading, a closing fence
//! needs its whole line), and inline markup from an opening marker until its closer (or
//! the line's end, where an unclosed marker is shown as typed). A marker whose closer is
//! not within [`HOLD_CHARS`] is plain text, so nothing is held long and an answer that
//! never sends a newline still shows as it comes. What is shown (each character and its
//! style) depends only on the text, never on how it was cut into chunks (a property test).
//!
//! The text given is already `printable` (no escape of its own), so every escape out is
//! one of ours, and each line ends with the attributes reset.

use std::borrow::Cow;
use std::ffi::OsStr;

use crate::cli::term::printable;

/// How far (in characters) an opening marker looks for its closer: an emphasis longer
/// than this is shown with its markers rather than held back.
pub const HOLD_CHARS: usize = 300;

/// What a rule (`---`) is shown as.
const RULE: &str = "────────────────────────────────────────";

/// Whether answers are styled: only on a terminal, and never under `NO_COLOR`
/// (https://no-color.org: set and not empty) or `TERM=dumb`.
pub fn wanted(stdout_is_terminal: bool, no_color: Option<&OsStr>, term: Option<&OsStr>) -> bool {
    stdout_is_terminal && no_color.is_none_or(OsStr::is_empty) && term.is_none_or(|t| t != "dumb")
}

/// How an answer's text reaches the terminal: as it came (through a pipe, byte for byte
/// what it always was), or styled.
pub enum Shown {
    Raw,
    Styled(Markdown),
}

impl Shown {
    pub fn new(styled: bool) -> Shown {
        if styled {
            Shown::Styled(Markdown::default())
        } else {
            Shown::Raw
        }
    }

    /// A chunk of model text, made printable, as it is to be shown now.
    pub fn text<'a>(&mut self, text: &'a str) -> Cow<'a, str> {
        match self {
            Shown::Raw => printable(text),
            Shown::Styled(md) => Cow::Owned(md.push(&printable(text))),
        }
    }

    /// What was held back, shown before anything else is written (a tool call, the end).
    pub fn finish(&mut self) -> String {
        match self {
            Shown::Raw => String::new(),
            Shown::Styled(md) => md.finish(),
        }
    }

    /// A whole text (a resumed session's answer), styled as a stream would be.
    pub fn whole(&mut self, text: &str) -> String {
        let mut shown = self.text(text).into_owned();
        shown.push_str(&self.finish());
        shown
    }
}

/// Terminal attributes of a character.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Style {
    bold: bool,
    italic: bool,
    underline: bool,
    dim: bool,
    strike: bool,
    code: bool,
}

impl Style {
    const PLAIN: Style = Style {
        bold: false,
        italic: false,
        underline: false,
        dim: false,
        strike: false,
        code: false,
    };
    const DIM: Style = Style {
        dim: true,
        ..Style::PLAIN
    };
    const CODE: Style = Style {
        code: true,
        ..Style::PLAIN
    };

    /// The SGR sequence that sets exactly this style (a reset first, so nothing before
    /// lingers).
    fn sgr(self) -> String {
        let mut s = String::from("\x1b[0");
        for (on, code) in [
            (self.bold, ";1"),
            (self.dim, ";2"),
            (self.italic, ";3"),
            (self.underline, ";4"),
            (self.strike, ";9"),
            (self.code, ";36"),
        ] {
            if on {
                s.push_str(code);
            }
        }
        s.push('m');
        s
    }

    fn with(self, add: Emphasis) -> Style {
        match add {
            Emphasis::Italic => Style {
                italic: true,
                ..self
            },
            Emphasis::Bold => Style { bold: true, ..self },
            Emphasis::BoldItalic => Style {
                bold: true,
                italic: true,
                ..self
            },
            Emphasis::Strike => Style {
                strike: true,
                ..self
            },
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Emphasis {
    Italic,
    Bold,
    BoldItalic,
    Strike,
}

/// Characters with their styles, as escapes only where the style changes (so the bytes
/// out depend on the characters and styles alone, not on the calls that made them).
struct Out<'a> {
    text: &'a mut String,
    shown: &'a mut Style,
}

impl Out<'_> {
    fn push(&mut self, c: char, style: Style) {
        if style != *self.shown {
            self.text.push_str(&style.sgr());
            *self.shown = style;
        }
        self.text.push(c);
    }

    fn push_str(&mut self, s: &str, style: Style) {
        for c in s.chars() {
            self.push(c, style);
        }
    }

    fn plain(&mut self) {
        if *self.shown != Style::PLAIN {
            self.text.push_str("\x1b[0m");
            *self.shown = Style::PLAIN;
        }
    }
}

/// An open fenced code block: its fence character and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fence {
    ch: char,
    len: usize,
}

/// What a line is, once its start is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Inline markdown over a base style.
    Text(Style),
    /// A line inside a fenced block: shown as it is, in the code colour.
    Code,
    /// A fence line (opening or closing): shown as it is, dim.
    Fence,
    /// A thematic break: shown as [`RULE`].
    Rule,
}

/// A line's start, decided: its kind, what replaces its marker and how many bytes of the
/// line that takes.
struct Start {
    kind: Kind,
    indent: usize,
    marker: &'static str,
    consumed: usize,
    fence: Option<Option<Fence>>,
}

/// The streaming renderer: feed it text with [`Markdown::push`], end with
/// [`Markdown::finish`].
#[derive(Debug, Default)]
pub struct Markdown {
    /// The current line's text not shown yet.
    pending: String,
    /// The current line's kind, once known.
    kind: Option<Kind>,
    /// The last character shown on this line (emphasis depends on what precedes it).
    prev: Option<char>,
    fence: Option<Fence>,
    shown: Style,
}

impl Markdown {
    /// Takes the next piece of text; returns what can be shown of it now, ending with the
    /// attributes reset: whatever is written between chunks (a Ctrl-C notice, the shell
    /// after an exit) is never drawn in the answer's bold or colour.
    pub fn push(&mut self, text: &str) -> String {
        let mut out = String::new();
        let mut lines = text.split('\n');
        if let Some(first) = lines.next() {
            self.pending.push_str(first);
            self.advance(false, &mut out);
        }
        for line in lines {
            self.end_line(&mut out);
            out.push('\n');
            self.pending.push_str(line);
            self.advance(false, &mut out);
        }
        self.out(&mut out).plain();
        out
    }

    /// Shows what was held back as the line's end would, and starts afresh: what comes
    /// next (after a tool call, say) is a new text.
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        self.end_line(&mut out);
        self.fence = None;
        out
    }

    fn end_line(&mut self, out: &mut String) {
        self.advance(true, out);
        self.out(out).plain();
        self.pending.clear();
        self.kind = None;
        self.prev = None;
    }

    fn out<'a>(&'a mut self, text: &'a mut String) -> Out<'a> {
        Out {
            text,
            shown: &mut self.shown,
        }
    }

    /// Shows what is settled of the pending text (all of it when the line is complete).
    fn advance(&mut self, complete: bool, text: &mut String) {
        let kind = match self.kind {
            Some(kind) => kind,
            None => match classify(&self.pending, self.fence, complete) {
                Some(start) => self.begin(start, text),
                None => return,
            },
        };
        let mut out = Out {
            text,
            shown: &mut self.shown,
        };
        let settled = match kind {
            Kind::Code => {
                out.push_str(&self.pending, Style::CODE);
                self.pending.len()
            }
            Kind::Fence => {
                out.push_str(&self.pending, Style::DIM);
                self.pending.len()
            }
            Kind::Rule => {
                out.push_str(RULE, Style::DIM);
                self.pending.len()
            }
            Kind::Text(base) => {
                let chars: Vec<char> = self.pending.chars().collect();
                let n = inline(&chars, self.prev, complete, base, &mut out);
                chars[..n].iter().map(|c| c.len_utf8()).sum()
            }
        };
        if let Some(last) = self.pending[..settled].chars().next_back() {
            self.prev = Some(last);
        }
        self.pending.drain(..settled);
    }

    /// Shows a line's start as decided: its indent, and its sign in place of its marker.
    fn begin(&mut self, start: Start, text: &mut String) -> Kind {
        if let Some(fence) = start.fence {
            self.fence = fence;
        }
        let (indent, rest) = self.pending.split_at(start.indent);
        let marker = &rest[..start.consumed - start.indent];
        let mut out = Out {
            text,
            shown: &mut self.shown,
        };
        out.push_str(indent, Style::PLAIN);
        out.push_str(start.marker, Style::DIM);
        self.prev = marker.chars().next_back().or(indent.chars().next_back());
        self.pending.drain(..start.consumed);
        self.kind = Some(start.kind);
        start.kind
    }
}

/// The kind of the line `line` starts, or `None` while that cannot be known yet.
fn classify(line: &str, fence: Option<Fence>, complete: bool) -> Option<Start> {
    let rest = line.trim_start_matches([' ', '\t']);
    let indent = line.len() - rest.len();
    if rest.is_empty() && !complete {
        return None;
    }
    let start = |kind, marker, consumed| Start {
        kind,
        indent,
        marker,
        consumed,
        fence: None,
    };
    if let Some(open) = fence {
        return in_fence(rest, open, indent, complete);
    }
    let Some(first) = rest.chars().next() else {
        return Some(start(Kind::Text(Style::PLAIN), "", indent));
    };
    let run = rest.chars().take_while(|&c| c == first).count();
    let after = rest[run * first.len_utf8()..].chars().next();
    let block = indent <= 3;
    // The line so far is one repeated character: what it is depends on what follows.
    if after.is_none() && !complete && matches!(first, '#' | '`' | '~' | '-' | '*' | '_' | '+') {
        return None;
    }
    let text = Some(start(Kind::Text(Style::PLAIN), "", indent));
    match first {
        '#' if block && run <= 6 && after.is_none_or(|c| c == ' ' || c == '\t') => {
            let heading = Style {
                bold: true,
                underline: run <= 2,
                ..Style::PLAIN
            };
            let consumed = (indent + run + 1).min(line.len());
            Some(start(Kind::Text(heading), "", consumed))
        }
        '`' | '~' if block && run >= 3 => Some(Start {
            fence: Some(Some(Fence {
                ch: first,
                len: run,
            })),
            ..start(Kind::Fence, "", indent)
        }),
        '-' | '*' | '+' if run == 1 && after == Some(' ') => {
            Some(start(Kind::Text(Style::PLAIN), "•", indent + 1))
        }
        '-' | '*' | '_' if block && run >= 3 && after.is_none() => {
            Some(start(Kind::Rule, "", line.len()))
        }
        '>' => {
            let quote = Style {
                italic: true,
                ..Style::PLAIN
            };
            Some(start(Kind::Text(quote), "│", indent + 1))
        }
        _ => text,
    }
}

/// A line inside an open fence: the closing fence (known only once the line is whole) or
/// code.
fn in_fence(rest: &str, open: Fence, indent: usize, complete: bool) -> Option<Start> {
    let run = rest.chars().take_while(|&c| c == open.ch).count();
    let tail = &rest[run * open.ch.len_utf8()..];
    let may_close = indent <= 3 && tail.chars().all(char::is_whitespace);
    let closes = may_close && run >= open.len;
    if may_close && !complete && (closes || tail.is_empty()) {
        return None;
    }
    Some(if closes {
        Start {
            kind: Kind::Fence,
            indent,
            marker: "",
            consumed: indent,
            fence: Some(None),
        }
    } else {
        Start {
            kind: Kind::Code,
            indent: 0,
            marker: "",
            consumed: 0,
            fence: None,
        }
    })
}

/// What to do at one position of a line's inline text.
enum Step {
    /// Not known until more text comes.
    Wait,
    /// These many characters, as they are.
    Literal(usize),
    /// A backslash and the punctuation it escapes: the punctuation alone.
    Escaped,
    /// A code span: `open` backticks, its text up to `end`, as many backticks again.
    Code { open: usize, end: usize },
    /// An emphasis: `open` markers, its text up to `end`, as many markers again.
    Span {
        open: usize,
        end: usize,
        add: Emphasis,
    },
}

/// Shows the inline text `s` over `base`; returns how many characters of it are settled
/// (all of them when the line is `complete`). `prev` is the character before `s`.
fn inline(s: &[char], prev: Option<char>, complete: bool, base: Style, out: &mut Out) -> usize {
    let mut i = 0;
    while i < s.len() {
        let before = if i == 0 { prev } else { Some(s[i - 1]) };
        let step = match s[i] {
            '\\' => escape(s, i, complete),
            '`' => code_span(s, i, complete),
            '*' | '_' | '~' => emphasis(s, i, before, complete),
            _ => Step::Literal(1),
        };
        match step {
            Step::Wait => return i,
            Step::Literal(n) => {
                for &c in &s[i..i + n] {
                    out.push(c, base);
                }
                i += n;
            }
            Step::Escaped => {
                out.push(s[i + 1], base);
                i += 2;
            }
            Step::Code { open, end } => {
                for &c in &s[i + open..end] {
                    out.push(c, Style { code: true, ..base });
                }
                i = end + open;
            }
            Step::Span { open, end, add } => {
                inline(&s[i + open..end], Some(s[i]), true, base.with(add), out);
                i = end + open;
            }
        }
    }
    i
}

/// How many times `s[i]` repeats from `i`.
fn run(s: &[char], i: usize) -> usize {
    s[i..].iter().take_while(|&&c| c == s[i]).count()
}

fn escape(s: &[char], i: usize, complete: bool) -> Step {
    match s.get(i + 1) {
        None if !complete => Step::Wait,
        Some(c) if c.is_ascii_punctuation() => Step::Escaped,
        _ => Step::Literal(1),
    }
}

fn code_span(s: &[char], i: usize, complete: bool) -> Step {
    let open = run(s, i);
    if i + open == s.len() {
        return if complete {
            Step::Literal(open)
        } else {
            Step::Wait
        };
    }
    closer(s, '`', i + open, complete, Step::Literal(open), |j, r| {
        (r == open).then_some(Step::Code { open, end: j })
    })
}

fn emphasis(s: &[char], i: usize, before: Option<char>, complete: bool) -> Step {
    let (c, open) = (s[i], run(s, i));
    let Some(&next) = s.get(i + open) else {
        return if complete {
            Step::Literal(open)
        } else {
            Step::Wait
        };
    };
    let add = match (c, open) {
        ('*' | '_', 1) => Emphasis::Italic,
        ('*' | '_', 2) => Emphasis::Bold,
        ('*' | '_', 3) => Emphasis::BoldItalic,
        ('~', 2) => Emphasis::Strike,
        _ => return Step::Literal(open),
    };
    // An opener comes before text, and `_` never inside a word (snake_case stays).
    let intraword = c == '_' && before.is_some_and(char::is_alphanumeric);
    if next.is_whitespace() || intraword {
        return Step::Literal(open);
    }
    closer(s, c, i + open + 1, complete, Step::Literal(open), |j, r| {
        let after = s.get(j + r);
        let closes = r == open
            && !s[j - 1].is_whitespace()
            && (c != '_' || after.is_none_or(|a| !a.is_alphanumeric()));
        closes.then_some(Step::Span { open, end: j, add })
    })
}

/// Looks from `from` for a run of `marker` that `matches` accepts, within
/// [`HOLD_CHARS`]: waits while the text ends before it is found (and the line is not
/// complete), and is `unclosed` past the window or at the line's end.
fn closer(
    s: &[char],
    marker: char,
    from: usize,
    complete: bool,
    unclosed: Step,
    matches: impl Fn(usize, usize) -> Option<Step>,
) -> Step {
    let limit = from + HOLD_CHARS;
    let mut j = from;
    while j < s.len().min(limit) {
        if s[j] != marker {
            j += 1;
            continue;
        }
        let r = run(s, j);
        // A run at the end may grow, and what follows it is not known yet.
        if j + r == s.len() && !complete {
            return Step::Wait;
        }
        if let Some(step) = matches(j, r) {
            return step;
        }
        j += r;
    }
    if j < limit && !complete {
        Step::Wait
    } else {
        unclosed
    }
}

#[cfg(test)]
#[path = "markdown_tests.rs"]
mod tests;
