//! `brain serve`: settings validated at startup, the database's lock, the server, and
//! a shutdown on SIGTERM or Ctrl-C that ends every attempt within 10 s.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use signal_hook::consts::{SIGINT, SIGTERM};

use super::{CliError, ServeArgs, coordinator, lock_db, open_at, resolve_db_path};
use crate::api::{self, ApiConfig};
use crate::chat::engine::{Engine, EngineSettings, SHUTDOWN_DEADLINE};

/// Of the 10 s a shutdown may take (SPEC §6), what ending the attempts may use; the rest
/// is for streams to deliver their `end` frames and for the process to exit.
const ATTEMPTS_DEADLINE: Duration = SHUTDOWN_DEADLINE.saturating_sub(Duration::from_secs(2));

/// How long open streams get to write their last frames before connections are closed.
const STREAMS_GRACE: Duration = Duration::from_secs(1);
use crate::provider::Provider;
use crate::session::{Store, SyncMode};
use crate::tools::mcp::LinkOptions;
use crate::tools::{ToolLimits, Tools};

fn validate(args: &ServeArgs) -> Result<(), CliError> {
    if !args.listen.ip().is_loopback()
        && args
            .api_token
            .as_deref()
            .is_none_or(|t| t.trim().is_empty())
    {
        return Err(CliError::Serve(format!(
            "refusing to listen on {} (not loopback) without --api-token: anyone on the \
             network could read and write your sessions",
            args.listen
        )));
    }
    Ok(())
}

pub fn run(
    db: Option<PathBuf>,
    sync: SyncMode,
    args: ServeArgs,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    validate(&args)?;
    let db = resolve_db_path(db)?;
    // Taken before the database is opened or migrated; held until this function returns,
    // after shutdown has ended every attempt.
    let mut lock = lock_db(
        &db,
        "serve",
        "one server per database: stop it first, or give this one another --db",
    )?;
    let store = Arc::new(open_at(&db, sync)?);

    let p = &args.provider;
    let mut cfg = p.provider_config();
    cfg.first_token_timeout = Duration::from_secs(args.first_token_timeout);
    cfg.idle_timeout = Duration::from_secs(args.stream_idle_timeout);
    let settings = engine_settings(&args);
    // Servers start in parallel, each within its bound; a name collision stops startup.
    let links = LinkOptions {
        groups: super::tools::server_groups(&db),
        ..LinkOptions::for_results(settings.tool_limits.max_tool_result_bytes)
    };
    let tools = Arc::new(args.tools.start(Some(Arc::clone(&store)), links)?);
    // On PostgreSQL, other servers may share the database: claims (I7), `/stop` and
    // permission answers travel through it (SPEC §16), and a listener thread starts here.
    let engine = Engine::coordinated(
        Arc::clone(&store),
        Arc::new(Provider::new(cfg)),
        settings,
        Arc::clone(&tools),
        coordinator(&db)?,
    );
    recover_questions(&engine);
    let config = api_config(&args);
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])
        .map_err(|e| CliError::Serve(format!("cannot handle signals: {e}")))?;
    let mut running = api::start(config, engine.clone()).map_err(CliError::Serve)?;
    lock.set_url(&running.url())
        .map_err(|e| CliError::Serve(e.to_string()))?;
    writeln!(
        out,
        "brain serving {} (database {}, provider {})",
        running.url(),
        store.path().display(),
        p.provider_url
    )?;
    out.flush()?;
    let signal = signals.forever().next();
    log::info!(
        "{} received: shutting down",
        if signal == Some(SIGINT) {
            "interrupt"
        } else {
            "SIGTERM"
        }
    );
    shut_down(&mut running, &engine, &tools, &store);
    drop(lock);
    Ok(())
}

/// The engine's settings: the provider's flags with the server's own (mini model,
/// distilling, titles, message and tool limits).
fn engine_settings(args: &ServeArgs) -> EngineSettings {
    EngineSettings {
        mini_model: args.mini_model.clone(),
        temperature: args.temperature,
        distill: args.distill == "on",
        titles: args.titles == "on",
        max_message_bytes: args.max_message_bytes as usize,
        tool_limits: ToolLimits {
            tool_timeout: Duration::from_secs(args.tools.tool_timeout),
            max_tool_steps: args.max_tool_steps,
            permission_timeout: Duration::from_secs(args.permission_timeout),
            max_tool_result_bytes: args.max_tool_result_bytes as usize,
        },
        ..args.provider.engine_settings()
    }
}

/// The HTTP server's settings from the flags (a blank token is no token).
fn api_config(args: &ServeArgs) -> ApiConfig {
    ApiConfig {
        listen: args.listen,
        token: args.api_token.clone().filter(|t| !t.trim().is_empty()),
        allowed_hosts: args.allowed_hosts.clone(),
        max_body_bytes: args.max_body_bytes as usize,
        max_import_bytes: args.max_import_bytes,
        request_timeout: Duration::from_secs(args.request_timeout),
        idle_timeout: api::KEEP_ALIVE_IDLE_TIMEOUT,
        max_connections: args.max_connections as usize,
        system_prompt: args.system_prompt.clone(),
    }
}

/// Shuts down in order: no new connections, the attempts ended, the streams given their
/// last frames, then the tool servers and the store's maintenance.
fn shut_down(running: &mut api::Running, engine: &Engine, tools: &Tools, store: &Store) {
    // Attempts end first (their partials saved, their `end` frames sent to the streams
    // still open), then the connections close: a stuck client cannot delay the records.
    running.stop_accepting();
    let report = engine.shutdown(ATTEMPTS_DEADLINE);
    log::info!(
        "ended {} running attempts ({} unfinished), skipped {} post-turn jobs",
        report.ended_attempts,
        report.unfinished_attempts,
        report.skipped_background
    );
    running.close(STREAMS_GRACE);
    // The tool servers end with brain.
    tools.shutdown();
    // A purge in progress stops after its batch and resumes at the next start.
    store.stop_maintenance();
}

/// Denies (`by: restart`) the questions of attempts a kill left waiting, before any request
/// is taken. A failure is logged, not fatal: the questions then stay open until next start.
pub(crate) fn recover_questions(engine: &Engine) {
    match engine.resolve_orphaned_questions() {
        Ok(0) => {}
        Ok(n) => log::info!("denied {n} permission questions left open by an earlier run"),
        Err(e) => log::error!("cannot close the questions an earlier run left open: {e}"),
    }
}
