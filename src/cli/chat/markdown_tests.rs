use std::ffi::OsStr;

use proptest::prelude::*;

use super::*;

const BOLD: &str = "\x1b[0;1m";
const ITALIC: &str = "\x1b[0;3m";
const DIM: &str = "\x1b[0;2m";
const CODE: &str = "\x1b[0;36m";
const RESET: &str = "\x1b[0m";

/// The chunks pushed one by one, then the end.
fn render(chunks: &[&str]) -> String {
    let mut md = Markdown::default();
    let mut out: String = chunks.iter().map(|c| md.push(c)).collect();
    out.push_str(&md.finish());
    out
}

/// Each character shown with the SGR parameters in force for it (ours set them whole).
fn decode(text: &str) -> Vec<(char, String)> {
    let mut shown = Vec::new();
    let mut style = String::from("0");
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            style = chars.by_ref().skip(1).take_while(|&c| c != 'm').collect();
        } else {
            shown.push((c, style.clone()));
        }
    }
    shown
}

/// `text` without the SGR sequences.
fn strip(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // `ESC [ … m`: ours are all SGR.
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn a_heading_is_bold_and_its_markers_are_gone() {
    assert_eq!(
        render(&["# Title\n### Sub\n"]),
        format!("\x1b[0;1;4mTitle{RESET}\n{BOLD}Sub{RESET}\n")
    );
    assert_eq!(render(&["#hashtag and #### x"]), "#hashtag and #### x");
}

#[test]
fn bold_split_between_chunks_is_bold() {
    assert_eq!(
        render(&["a **bo", "ld** and *it*", "alic*"]),
        format!("a {BOLD}bold{RESET} and {ITALIC}it{RESET}alic*")
    );
}

#[test]
fn a_marker_never_closed_is_shown_as_typed_at_the_line_end() {
    assert_eq!(render(&["a **b\n", "c"]), "a **b\nc");
    assert_eq!(render(&["`open and ~~x"]), "`open and ~~x");
}

#[test]
fn markers_that_are_not_emphasis_stay_as_they_are() {
    for text in ["snake_case_name", "2 * 3 * 4", "a ** b", "~one~"] {
        assert_eq!(render(&[text]), text);
    }
    assert_eq!(render(&["\\*not\\* \\a"]), "*not* \\a");
}

#[test]
fn code_spans_are_coloured_and_keep_what_is_inside() {
    assert_eq!(
        render(&["use `a*b*", "c` or ``x`y``"]),
        format!("use {CODE}a*b*c{RESET} or {CODE}x`y{RESET}")
    );
}

#[test]
fn a_fenced_block_keeps_its_fences_dim_and_its_lines_as_code() {
    let text = "```rust\n# not a heading\n**x**\n``` \n**y**\n";
    assert_eq!(
        render(&[text]),
        format!(
            "{DIM}```rust{RESET}\n{CODE}# not a heading{RESET}\n{CODE}**x**{RESET}\n\
             {DIM}``` {RESET}\n{BOLD}y{RESET}\n"
        )
    );
    // A shorter fence does not close it; a tilde fence is closed by tildes only.
    assert_eq!(
        render(&["~~~~\n~~~\n```\n~~~~"]),
        format!("{DIM}~~~~{RESET}\n{CODE}~~~{RESET}\n{CODE}```{RESET}\n{DIM}~~~~{RESET}")
    );
}

#[test]
fn bullets_quotes_and_rules_get_their_signs() {
    assert_eq!(
        render(&["- one\n  * two\n+ three"]),
        format!("{DIM}•{RESET} one\n  {DIM}•{RESET} two\n{DIM}•{RESET} three")
    );
    assert_eq!(
        render(&["> said **so**\n"]),
        format!("{DIM}│\x1b[0;3m said \x1b[0;1;3mso{RESET}\n")
    );
    assert_eq!(render(&["---\n"]), format!("{DIM}{RULE}{RESET}\n"));
    assert_eq!(render(&["-- x\n"]), "-- x\n");
}

#[test]
fn text_shows_as_it_comes_without_waiting_for_the_line_end() {
    let mut md = Markdown::default();
    assert_eq!(md.push("Hello, wor"), "Hello, wor");
    assert_eq!(md.push("ld **bo"), "ld ");
    assert_eq!(md.push("ld** then"), format!("{BOLD}bold{RESET} then"));
    assert!(md.pending.is_empty(), "{:?}", md.pending);
    assert_eq!(
        md.push("*it"),
        "",
        "held back, and nothing left styled between chunks"
    );
    assert_eq!(md.push("* `x"), format!("{ITALIC}it{RESET} "));
    assert_eq!(md.finish(), "`x");
}

#[test]
fn an_opener_without_a_closer_nearby_is_not_held() {
    let mut md = Markdown::default();
    let long = "a".repeat(HOLD_CHARS + 1);
    let shown = md.push(&format!("**{long}"));
    assert_eq!(shown, format!("**{long}"));
}

#[test]
fn escapes_in_model_text_stay_visible_and_only_ours_are_sent() {
    let mut answer = Shown::new(true);
    let shown = answer.whole("\x1b[31m**red**\x07");
    assert_eq!(shown, format!("^[[31m{BOLD}red{RESET}^G"));
    let mut raw = Shown::new(false);
    assert_eq!(raw.whole("\x1b[31m**red**\n"), "^[[31m**red**\n");
}

#[test]
fn colour_only_on_a_terminal_without_no_color_or_a_dumb_term() {
    let os = |s: &'static str| Some(OsStr::new(s));
    assert!(wanted(true, None, os("xterm-256color")));
    assert!(wanted(true, os(""), None), "an empty NO_COLOR is unset");
    assert!(!wanted(true, os("1"), os("xterm")));
    assert!(!wanted(false, None, os("xterm")));
    assert!(!wanted(true, None, os("dumb")));
}

/// Text made of markdown's markers, words and line ends, so the cases meet each other.
fn markdownish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("#"),
        Just("# "),
        Just("*"),
        Just("**"),
        Just("_"),
        Just("`"),
        Just("```"),
        Just("~~"),
        Just("~~~"),
        Just("- "),
        Just("---"),
        Just("> "),
        Just("\\"),
        Just(" "),
        Just("\t"),
        Just("\n"),
        Just("word"),
        Just("é中"),
        Just("x1"),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|p| p.concat())
}

/// Whether the last escape in `text`, if any, is the reset.
fn ends_plain(text: &str) -> bool {
    let last = text.rfind('\x1b').map(|at| &text[at..]);
    last.is_none_or(|l| l.starts_with(RESET))
}

/// Characters no markup rule removes, adds or replaces.
fn kept(text: &str) -> String {
    text.chars()
        .filter(|c| !"#*_`~->\\+ \t•│─".contains(*c))
        .collect()
}

proptest! {
    #[test]
    fn how_the_text_is_cut_into_chunks_never_changes_what_is_shown(
        text in markdownish(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let chars: Vec<char> = text.chars().collect();
        let mut at: Vec<usize> = cuts.iter().map(|c| c.index(chars.len() + 1)).collect();
        at.sort_unstable();
        let mut chunks = Vec::new();
        let mut from = 0;
        for to in at.into_iter().chain([chars.len()]) {
            chunks.push(chars[from..to].iter().collect::<String>());
            from = to;
        }
        let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
        prop_assert_eq!(decode(&render(&chunks)), decode(&render(&[&text])));
        let mut md = Markdown::default();
        for chunk in &chunks {
            let shown = md.push(chunk);
            prop_assert!(ends_plain(&shown), "{:?} left styled: {:?}", chunk, shown);
        }
    }

    #[test]
    fn no_text_is_lost_and_every_line_ends_plain(text in markdownish()) {
        let shown = render(&[&text]);
        let plain = strip(&shown);
        prop_assert_eq!(kept(&plain), kept(&text));
        prop_assert_eq!(plain.matches('\n').count(), text.matches('\n').count());
        prop_assert!(!plain.contains('\x1b'));
        for line in shown.split('\n') {
            prop_assert!(ends_plain(line), "{:?}", line);
        }
    }

    #[test]
    fn any_text_renders_without_panicking(text in "\\PC{0,200}") {
        let shown = render(&[&text]);
        prop_assert_eq!(kept(&strip(&shown)), kept(&text));
    }
}
