//! `brain sessions fork ID [--at SEQ]` (SPEC §14): in-process when this command holds the
//! database's lock (no server, so no attempt can be running), else through the server that
//! holds it, as `sessions compact` does.

use std::io::Write;
use std::time::Duration;

use serde_json::{Value, json};

use super::CliError;
use crate::chat::follow::Follow;
use crate::session::{SessionId, SessionRow, Store};

/// How long a fork through the server may take (it copies in one transaction).
const FORK_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// On PostgreSQL a server may be running an attempt of the session meanwhile (SPEC §16):
/// the fork leaves it out, as a fork through that server would.
pub fn in_process(
    store: &Store,
    db: &std::path::Path,
    id: SessionId,
    at: Option<u64>,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let (mut active, mut upto) = (None, u64::MAX);
    let coord = super::coordinator(db)?;
    if coord.shared() {
        // How far the log reached before the look, so an attempt starting after it
        // writes past what is copied.
        upto = store.last_seq(id)?;
        if coord.claimed(&[id])?.contains(&id) {
            let events = store.events_for_context(id)?;
            active = Some(Follow::new(id, &events).running());
        }
    }
    let row = store.write(|w| w.fork(id, at, active, upto))?;
    let session = crate::api::views::session(&row, Some(false));
    print(id, &row_fields(&row), &session, as_json, out)
}

pub fn on_server(
    url: &str,
    id: &str,
    at: Option<u64>,
    token: Option<&str>,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let id: SessionId = id.parse()?;
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(FORK_REQUEST_TIMEOUT))
        .build()
        .new_agent();
    let address = format!("{}/v1/sessions/{id}/fork", url.trim_end_matches('/'));
    let mut request = agent
        .post(&address)
        .header("Content-Type", "application/json");
    if let Some(t) = token {
        request = request.header("Authorization", &format!("Bearer {t}"));
    }
    let unreachable = |e: &dyn std::fmt::Display| {
        CliError::Serve(format!(
            "the brain server at {url} holds the database, but: {e}"
        ))
    };
    let body = match at {
        Some(seq) => json!({"through_seq": seq}),
        None => json!({}),
    };
    let resp = request
        .send(body.to_string())
        .map_err(|e| unreachable(&e))?;
    let status = resp.status().as_u16();
    let text = resp
        .into_body()
        .read_to_string()
        .map_err(|e| unreachable(&e))?;
    let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if status != 201 {
        let message = answer["message"]
            .as_str()
            .unwrap_or("it refused")
            .to_owned();
        return Err(CliError::Serve(format!("the server at {url}: {message}")));
    }
    let fields = (
        answer["id"].as_str().unwrap_or_default().to_owned(),
        answer["title"].as_str().map(str::to_owned),
    );
    print(id, &fields, &answer, as_json, out)
}

fn row_fields(row: &SessionRow) -> (String, Option<String>) {
    (row.id.to_string(), row.title.clone())
}

/// The new id first on its line, so a script can take it with `cut -f1`.
fn print(
    source: SessionId,
    (new_id, title): &(String, Option<String>),
    session: &Value,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    if as_json {
        writeln!(out, "{session}")?;
    } else {
        let title = title.as_deref().unwrap_or("(untitled)");
        writeln!(
            out,
            "{new_id}\tforked from {source}: {}",
            super::term::printable(title)
        )?;
    }
    Ok(())
}
