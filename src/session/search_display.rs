//! What a search shows a person, computed from either store's hits (pure, SPEC §7): the
//! snippet without markdown, highlights that cover a `C++` whole, and a fork's copies of
//! its source's events shown once.
//!
//! **Markdown.** Messages are markdown, and a snippet of `**bold**` read as raw asterisks
//! in every client. [`strip_markdown`] drops what a renderer would not show (emphasis
//! marks, backticks, heading, quote and list markers, fence lines, a link's target) and
//! moves the highlight ranges with the text, so they still cover the same characters.
//!
//! **Words with symbols.** The index drops every character that is not a letter or digit,
//! so `C++` was the term `c`. A word with a symbol at its edge (`C++`, `C#`, `.NET`,
//! `#42`, `@alice`) is a [`literal`](crate::session::search::literal_words): the stores
//! require it verbatim (case-folded) and [`fit_literals`] widens its highlight to the whole
//! word and drops the highlights of its letters elsewhere.
//!
//! **Forks.** A fork copies its source's events 2…S (same seq, kind, payload and time)
//! and says so in its `session_started` (`forked_from`: the source and S). A hit is a copy
//! of another when both have the same seq, kind, time and snippet and its session's fork
//! chain reaches the other's, each fork copied through that seq ([`Lineage`], read by
//! the store for the few sessions where it matters). [`group_copies`] keeps the original
//! at the place of the best of them and lists the copies in `also_in`; two sessions that
//! only say the same words at the same time stay two hits. Copies are grouped within the
//! page a client asked for; they rank side by side (same text, same score), so only a
//! page boundary splits them.

use std::collections::HashMap;

use crate::session::events::SessionId;
use crate::session::search::{alnum_runs, literal_words, query_tokens};
use crate::session::store::list::{HitCopy, SearchHit, SearchQuery, Syntax};

/// `text` without markdown syntax, and `ranges` (sorted `[start, end)` character ranges)
/// moved to cover the same kept characters; a range left empty is dropped.
pub fn strip_markdown(text: &str, ranges: &[[usize; 2]]) -> (String, Vec<[usize; 2]>) {
    let chars: Vec<char> = text.chars().collect();
    let mut keep = vec![true; chars.len()];
    let mut start = 0;
    while start <= chars.len() {
        let end = chars[start..]
            .iter()
            .position(|&c| c == '\n')
            .map_or(chars.len(), |p| start + p);
        line_markers(&chars, start, end, &mut keep);
        start = end + 1;
    }
    inline_markers(&chars, &mut keep);
    // kept[i]: how many characters before i are kept, i.e. where i lands.
    let mut kept = Vec::with_capacity(chars.len() + 1);
    let mut n = 0;
    kept.push(0);
    for k in &keep {
        n += usize::from(*k);
        kept.push(n);
    }
    let out: String = chars
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(c, _)| *c)
        .collect();
    let mut moved: Vec<[usize; 2]> = Vec::new();
    for &[s, e] in ranges {
        let (s, e) = (kept[s.min(chars.len())], kept[e.min(chars.len())]);
        if s >= e {
            continue;
        }
        match moved.last_mut() {
            Some(last) if s <= last[1] => last[1] = last[1].max(e),
            _ => moved.push([s, e]),
        }
    }
    (out, moved)
}

/// Drops one line's block markers: a fence line whole; else quote markers, then a
/// heading's `#`s or a list item's marker (each with the space after it).
fn line_markers(chars: &[char], start: usize, end: usize, keep: &mut [bool]) {
    let line = &chars[start..end];
    let mut i = line.iter().take_while(|c| **c == ' ').count();
    let rest: String = line[i..].iter().collect();
    let fence = rest.starts_with("```") || rest.starts_with("~~~");
    let marks: Vec<char> = rest.chars().filter(|c| !c.is_whitespace()).collect();
    let rule = marks.len() >= 3
        && matches!(marks[0], '-' | '*' | '_')
        && marks.iter().all(|c| *c == marks[0]);
    if fence || rule {
        // The newline after it goes too, so the code follows what came before.
        let stop = (end + 1).min(keep.len());
        keep[start..stop].iter_mut().for_each(|k| *k = false);
        return;
    }
    let drop = |from: usize, to: usize, keep: &mut [bool]| {
        keep[start + from..start + to]
            .iter_mut()
            .for_each(|k| *k = false);
    };
    while line.get(i) == Some(&'>') {
        let to = i + 1 + usize::from(line.get(i + 1) == Some(&' '));
        drop(i, to, keep);
        i = to;
    }
    let hashes = line[i..].iter().take_while(|c| **c == '#').count();
    if (1..=6).contains(&hashes) && line.get(i + hashes) == Some(&' ') {
        drop(i, i + hashes + 1, keep);
        return;
    }
    let digits = line[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    let marker = match line.get(i) {
        Some('-' | '*' | '+') => 1,
        Some(_) if (1..=9).contains(&digits) && matches!(line.get(i + digits), Some('.' | ')')) => {
            digits + 1
        }
        _ => 0,
    };
    if marker > 0 && line.get(i + marker) == Some(&' ') {
        drop(i, i + marker + 1, keep);
    }
}

/// Drops inline syntax: backslash escapes (the escaped character stays), backticks,
/// emphasis runs of `*`, `_` and `~` that open or close a span, and a link or image's
/// brackets and target (its text stays).
fn inline_markers(chars: &[char], keep: &mut [bool]) {
    let mut escaped = vec![false; chars.len()];
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if !keep[i] {
            i += 1;
            continue;
        }
        if c == '\\' && chars.get(i + 1).is_some_and(char::is_ascii_punctuation) {
            keep[i] = false;
            escaped[i + 1] = true;
            i += 2;
            continue;
        }
        if c == '`' {
            keep[i] = false;
        } else if matches!(c, '*' | '_' | '~') {
            let run = chars[i..].iter().take_while(|x| **x == c).count();
            if emphasis(chars, i, run, c) {
                keep[i..i + run].iter_mut().for_each(|k| *k = false);
            }
            i += run;
            continue;
        } else if c == '[' {
            if let Some(close) = link_end(chars, i) {
                keep[i] = false;
                if i > 0 && chars[i - 1] == '!' && !escaped[i - 1] {
                    keep[i - 1] = false;
                }
                keep[close.0..=close.1].iter_mut().for_each(|k| *k = false);
            }
        }
        i += 1;
    }
}

/// Whether a run of `run` × `c` at `at` opens or closes emphasis: a non-space on one side
/// and a space, punctuation or the end on the other. `_` between two letters or digits
/// is part of a word (`snake_case`); `~` counts only doubled (`~~strike~~`).
fn emphasis(chars: &[char], at: usize, run: usize, c: char) -> bool {
    if c == '~' && run < 2 {
        return false;
    }
    let before = at.checked_sub(1).map(|p| chars[p]);
    let after = chars.get(at + run).copied();
    let open_side =
        |x: Option<char>| x.is_none_or(|x| x.is_whitespace() || x.is_ascii_punctuation());
    let word = |x: Option<char>| x.is_some_and(|x| !x.is_whitespace());
    let opens = open_side(before) && word(after);
    let closes = word(before) && open_side(after);
    let inside_word =
        before.is_some_and(char::is_alphanumeric) && after.is_some_and(char::is_alphanumeric);
    (opens || closes) && !(c == '_' && inside_word)
}

/// For a `[` at `open` starting `[text](target)` on one line: the range from its `]` to
/// its `)`, inclusive.
fn link_end(chars: &[char], open: usize) -> Option<(usize, usize)> {
    let close = open
        + 1
        + chars[open + 1..]
            .iter()
            .position(|c| matches!(c, ']' | '\n' | '['))?;
    if chars[close] != ']' || chars.get(close + 1) != Some(&'(') {
        return None;
    }
    let end = close
        + 2
        + chars[close + 2..]
            .iter()
            .position(|c| matches!(c, ')' | '\n' | ' '))?;
    (chars[end] == ')').then_some((close, end))
}

/// `ranges` for a query with `literals` (lower-cased words with symbols, as
/// [`literal_words`](crate::session::search::literal_words) finds them) and the other
/// words' `tokens`: a range inside an occurrence of a literal becomes the whole
/// occurrence; a range over a literal's letters elsewhere (the `c` of a `C` alone) that
/// no other query word asks for is dropped. Sorted, merged.
pub fn fit_literals(
    snippet: &str,
    ranges: &[[usize; 2]],
    literals: &[String],
    tokens: &[String],
) -> Vec<[usize; 2]> {
    if literals.is_empty() {
        return ranges.to_vec();
    }
    let chars: Vec<char> = snippet.chars().collect();
    let mut found: Vec<[usize; 2]> = Vec::new();
    for lit in literals {
        let lit: Vec<char> = lit.chars().collect();
        for at in 0..chars.len().saturating_sub(lit.len() - 1) {
            let same = chars[at..at + lit.len()]
                .iter()
                .zip(&lit)
                .all(|(a, b)| a.to_lowercase().eq(b.to_lowercase()));
            if same && !lit.is_empty() {
                found.push([at, at + lit.len()]);
            }
        }
    }
    let mut out: Vec<[usize; 2]> = Vec::new();
    for &[s, e] in ranges {
        let e = e.min(chars.len());
        if s >= e {
            continue;
        }
        if let Some(f) = found.iter().find(|f| s < f[1] && f[0] < e) {
            out.push([s.min(f[0]), e.max(f[1])]);
            continue;
        }
        let word: String = chars[s..e].iter().collect::<String>().to_lowercase();
        let a_literals_letters = literals.iter().any(|l| alnum_runs(l).any(|t| t == word));
        if !a_literals_letters || tokens.contains(&word) {
            out.push([s, e]);
        }
    }
    out.sort_unstable();
    let mut merged: Vec<[usize; 2]> = Vec::new();
    for r in out {
        match merged.last_mut() {
            Some(last) if r[0] <= last[1] => last[1] = last[1].max(r[1]),
            _ => merged.push(r),
        }
    }
    merged
}

/// Where each session was forked from (`forked_from` of its `session_started`: the
/// source and the seq copied through), for the sessions a page's copies lie in.
pub type Lineage = HashMap<SessionId, (SessionId, u64)>;

/// What a search shows: each hit's highlights fitted to the query's literals, its snippet
/// without markdown, and copies grouped ([`group_copies`], with `lineage`).
pub fn present(hits: Vec<SearchHit>, q: &SearchQuery, lineage: &Lineage) -> Vec<SearchHit> {
    let (literals, tokens) = match q.syntax {
        Syntax::Plain => (literal_words(&q.text), query_tokens(&q.text)),
        Syntax::Fts => (vec![], vec![]),
    };
    let hits = hits
        .into_iter()
        .map(|mut h| {
            let fitted = fit_literals(&h.snippet, &h.highlights, &literals, &tokens);
            (h.snippet, h.highlights) = strip_markdown(&h.snippet, &fitted);
            h
        })
        .collect();
    group_copies(hits, lineage)
}

/// The same event's text and place: what a copy shares with its original.
fn same_event(a: &SearchHit, b: &SearchHit) -> bool {
    a.seq == b.seq && a.kind == b.kind && a.created_at == b.created_at && a.snippet == b.snippet
}

/// The sessions of `hits` that share an event's text and place with a hit in another
/// session: only theirs need a lineage (most pages have none).
pub fn maybe_copies(hits: &[SearchHit]) -> Vec<SessionId> {
    let mut out = Vec::new();
    for (i, a) in hits.iter().enumerate() {
        for b in &hits[i + 1..] {
            if a.session_id != b.session_id && same_event(a, b) {
                out.extend([a.session_id, b.session_id]);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether `copy`'s session holds a copy of `original`'s event: its fork chain reaches
/// `original`'s session, each fork copied through the event's seq.
fn is_copy(copy: &SearchHit, original: &SearchHit, lineage: &Lineage) -> bool {
    let mut at = copy.session_id;
    // A chain is finite; the bound keeps a corrupt cycle from looping.
    for _ in 0..MAX_FORK_DEPTH {
        match lineage.get(&at) {
            Some(&(source, through)) if copy.seq <= through => {
                if source == original.session_id {
                    return true;
                }
                at = source;
            }
            _ => return false,
        }
    }
    false
}

/// How many forks deep a copy is looked for.
pub const MAX_FORK_DEPTH: usize = 16;

/// One hit per event: a hit whose session holds a copy of another hit's event (a fork, see
/// the module's documentation) joins that hit's `also_in`; the hit kept is the original,
/// placed where the first of them was.
pub fn group_copies(hits: Vec<SearchHit>, lineage: &Lineage) -> Vec<SearchHit> {
    let mut out: Vec<SearchHit> = Vec::with_capacity(hits.len());
    for hit in hits {
        let related = |h: &SearchHit| {
            same_event(h, &hit) && (is_copy(&hit, h, lineage) || is_copy(h, &hit, lineage))
        };
        let Some(first) = out.iter_mut().find(|h| related(h)) else {
            out.push(hit);
            continue;
        };
        let (keep, other) = if is_copy(first, &hit, lineage) {
            let mut hit = hit;
            hit.also_in = std::mem::take(&mut first.also_in);
            let copy = std::mem::replace(first, hit);
            (first, copy)
        } else {
            (first, hit)
        };
        keep.also_in.push(HitCopy {
            session_id: other.session_id,
            title: other.title,
            abandoned: other.abandoned,
        });
        keep.also_in.extend(other.also_in);
        keep.also_in.sort_by_key(|c| c.session_id);
    }
    out
}

#[cfg(test)]
#[path = "search_display_tests.rs"]
mod tests;
