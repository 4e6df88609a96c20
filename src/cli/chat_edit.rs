//! `brain chat`'s `/edit`: the new text of the last user message, from the command line
//! (`/edit new text`) or asked for, then sent through `edit_of` (SPEC §14).

use std::io::Write;

use super::CliError;
use super::chat::{Backend, Frames};
use super::term::printable;
use crate::session::SessionId;

/// The prompt for the new text when `/edit` comes alone.
const EDIT_PROMPT: &str = "new text › ";

/// The new text: what follows `/edit`, else the next line read. `None` when there is none
/// (blank, or the input ended): nothing is sent.
pub fn edit_text(
    command: &str,
    terminal: bool,
    editor: bool,
    read_line: &mut dyn FnMut(&str) -> Option<String>,
    out: &mut dyn Write,
) -> Result<Option<String>, CliError> {
    let inline = command.strip_prefix("/edit").unwrap_or_default().trim();
    if !inline.is_empty() {
        return Ok(Some(inline.to_owned()));
    }
    if terminal && !editor {
        write!(out, "{EDIT_PROMPT}")?;
    }
    out.flush()?;
    let line = read_line(EDIT_PROMPT).unwrap_or_default();
    let text = line.trim();
    if !terminal && !text.is_empty() {
        writeln!(out, "{EDIT_PROMPT}{}", printable(text))?;
    }
    if text.is_empty() {
        writeln!(out, "[nothing to send; the message stays as it was]\n")?;
        return Ok(None);
    }
    Ok(Some(text.to_owned()))
}

/// Edits the newest user message of the current branch and resends it.
pub fn edit_last(backend: &dyn Backend, id: SessionId, text: &str) -> Result<Frames, CliError> {
    let seq = backend
        .history(id)?
        .iter()
        .rev()
        .find(|i| i["kind"] == "user" && i["abandoned"] != true)
        .and_then(|i| i["seq"].as_u64())
        .ok_or_else(|| CliError::Serve("there is no message of yours here to edit".into()))?;
    backend.edit(id, seq, text)
}
