//! The command line: raw arguments (clap) and what each command does.
//!
//! Errors are returned as [`CliError`]; `main` prints them and picks the exit code.
//! Output goes to a writer given by `main`, so a closed pipe (`brain … | head`) is an
//! ordinary error, not a panic.

mod chat;
pub mod lock;
mod serve;
mod sessions;
pub mod term;
mod transfer;

/// Parses `ServeArgs` alone (for `brain` with no command).
#[derive(Parser)]
struct ServeOnly {
    #[command(flatten)]
    args: ServeArgs,
}

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config;
use crate::session::cursor::ArchivedFilter;
use crate::session::events::BadSessionId;
use crate::session::store::{OlderSchema, schema};
use crate::session::{Store, StoreError, StoreOptions, SyncMode};

/// brain: a local LLM chat server whose sessions survive anything.
#[derive(Debug, Parser)]
#[command(name = "brain", version, about, long_about = None)]
pub struct Cli {
    /// The database file [default: the platform data directory's brain/brain.db]
    #[arg(long, env = "BRAIN_DB", global = true, value_name = "PATH")]
    pub db: Option<PathBuf>,

    /// How hard a commit waits for the disk: `full` survives power loss, `normal` only a
    /// crash of brain itself
    #[arg(long, env = "BRAIN_SYNC", global = true, value_enum, default_value_t = SyncArg::Full)]
    pub sync: SyncArg,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SyncArg {
    Full,
    Normal,
}

impl From<SyncArg> for SyncMode {
    fn from(s: SyncArg) -> SyncMode {
        match s {
            SyncArg::Full => SyncMode::Full,
            SyncArg::Normal => SyncMode::Normal,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ArchivedArg {
    Exclude,
    Include,
    Only,
}

impl From<ArchivedArg> for ArchivedFilter {
    fn from(a: ArchivedArg) -> ArchivedFilter {
        match a {
            ArchivedArg::Exclude => ArchivedFilter::Exclude,
            ArchivedArg::Include => ArchivedFilter::Include,
            ArchivedArg::Only => ArchivedFilter::Only,
        }
    }
}

/// Where the models are and how to budget for them (SPEC §10).
#[derive(Debug, Clone, clap::Args)]
pub struct ProviderArgs {
    /// The OpenAI-compatible API base (llama.cpp, Ollama, vLLM, OpenAI…)
    #[arg(
        long,
        env = "BRAIN_PROVIDER_URL",
        default_value = "http://127.0.0.1:11434/v1",
        value_parser = parse_http_url
    )]
    pub provider_url: String,
    /// The environment variable holding the API key (optional for local servers)
    #[arg(long, env = "BRAIN_API_KEY_ENV", default_value = "OPENAI_API_KEY")]
    pub api_key_env: String,
    /// The chat model [default: the first model the provider lists]
    #[arg(long, env = "BRAIN_MODEL")]
    pub model: Option<String>,
    /// The model that writes compaction summaries [default: the chat model]
    #[arg(long, env = "BRAIN_SUMMARIZE_MODEL")]
    pub summarize_model: Option<String>,
    /// The chat model's context window in tokens [default: from the provider's listing,
    /// else 4096]
    #[arg(long, env = "BRAIN_CONTEXT_WINDOW", value_parser = clap::value_parser!(u64).range(256..))]
    pub context_window: Option<u64>,
    /// Compact when the context exceeds this share of the window
    #[arg(long, env = "BRAIN_COMPACT_AT", default_value_t = 0.6, value_parser = parse_compact_at)]
    pub compact_at: f64,
    /// Tokens reserved for the answer (sent as max_tokens) [default: unset]
    #[arg(long, env = "BRAIN_MAX_OUTPUT_TOKENS", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_output_tokens: Option<u32>,
}

fn parse_compact_at(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if (0.1..=0.95).contains(&r) => Ok(r),
        _ => Err(format!("{s:?} is not a ratio between 0.1 and 0.95")),
    }
}

/// `brain serve`'s settings (SPEC §10).
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// The address to listen on (a non-loopback address needs --api-token)
    #[arg(long, env = "BRAIN_LISTEN", default_value = "127.0.0.1:7420")]
    pub listen: std::net::SocketAddr,
    #[command(flatten)]
    pub provider: ProviderArgs,
    /// The model for distillation and titles [default: the chat model]
    #[arg(long, env = "BRAIN_MINI_MODEL")]
    pub mini_model: Option<String>,
    /// The system prompt of new sessions
    #[arg(long, env = "BRAIN_SYSTEM_PROMPT", default_value = crate::config::DEFAULT_SYSTEM_PROMPT)]
    pub system_prompt: String,
    /// Sampling temperature sent to the model [default: the model's own]
    #[arg(long, env = "BRAIN_TEMPERATURE", value_parser = parse_temperature)]
    pub temperature: Option<f32>,
    /// Distil each completed turn into turn memory
    #[arg(long, env = "BRAIN_DISTILL", default_value = "on", value_parser = ["on", "off"])]
    pub distill: String,
    /// Seconds to wait for a model's first token
    #[arg(long, env = "BRAIN_FIRST_TOKEN_TIMEOUT", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub first_token_timeout: u64,
    /// Seconds a stream may stay silent between chunks
    #[arg(long, env = "BRAIN_STREAM_IDLE_TIMEOUT", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub stream_idle_timeout: u64,
    /// The largest user message, in bytes
    #[arg(long, env = "BRAIN_MAX_MESSAGE_BYTES", default_value_t = 262_144, value_parser = clap::value_parser!(u64).range(1..=67_108_864))]
    pub max_message_bytes: u64,
    /// The largest request body, in bytes
    #[arg(long, env = "BRAIN_MAX_BODY_BYTES", default_value_t = 1_048_576, value_parser = clap::value_parser!(u64).range(1024..=268_435_456))]
    pub max_body_bytes: u64,
    /// A bearer token every /v1 request must carry
    #[arg(long, env = "BRAIN_API_TOKEN")]
    pub api_token: Option<String>,
    /// Another Host name this server answers to (repeatable)
    #[arg(
        long = "allowed-host",
        env = "BRAIN_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
    /// Seconds a request's headers and body may take to arrive (else 408)
    #[arg(long, env = "BRAIN_REQUEST_TIMEOUT", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub request_timeout: u64,
    /// The most client connections open at once (past it, new ones are refused at once)
    #[arg(long, env = "BRAIN_MAX_CONNECTIONS", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub max_connections: u64,
}

/// `brain chat`'s settings.
#[derive(Debug, Clone, clap::Args)]
pub struct ChatArgs {
    /// Resume this session instead of starting a new one
    #[arg(long)]
    pub session: Option<String>,
    /// The server to talk to [default: the one holding the database, from its lock file]
    #[arg(long, value_parser = parse_http_url)]
    pub url: Option<String>,
    /// The server's bearer token, when it has one
    #[arg(long, env = "BRAIN_API_TOKEN")]
    pub api_token: Option<String>,
    /// Settings for the in-process engine (used only when no server holds the database)
    #[command(flatten)]
    pub provider: ProviderArgs,
}

/// An `http://` or `https://` URL with a host, or what the user probably meant.
fn parse_http_url(s: &str) -> Result<String, String> {
    let text = s.trim();
    let lower = text.to_ascii_lowercase();
    let Some(rest) = ["http://", "https://"]
        .iter()
        .find_map(|scheme| lower.strip_prefix(scheme))
    else {
        return Err(if lower.contains("://") {
            format!("{text:?} is not an http:// or https:// URL")
        } else {
            format!("{text:?} has no scheme; did you mean http://{text}?")
        });
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    // `[::1]:8080`, `host:8080` or `host`: whatever follows the host's last `:` is a port.
    let port = match host_port.rfind(']') {
        Some(end) => host_port[end + 1..].strip_prefix(':'),
        None => host_port.split_once(':').map(|(_, p)| p),
    };
    let valid = !host_port.is_empty()
        && !host_port.starts_with(':')
        && port.is_none_or(|p| p.parse::<u16>().is_ok())
        && text.parse::<ureq::http::Uri>().is_ok();
    if !valid {
        return Err(format!(
            "{text:?} is not a URL with a host (like http://127.0.0.1:8080/v1)"
        ));
    }
    Ok(text.to_owned())
}

fn parse_temperature(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(t) if (0.0..=2.0).contains(&t) => Ok(t),
        _ => Err(format!("{s:?} is not a temperature between 0 and 2")),
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the API (the default command: `brain --listen …` is `brain serve --listen …`)
    Serve(ServeArgs),
    /// Create the database if needed, apply its migrations, and exit
    Migrate,
    /// History from the terminal: list, show, search, compact, export and import sessions
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Chat in the terminal, through the server holding the database (or --url), or with
    /// the engine in-process when no server holds it
    Chat(ChatArgs),
    /// Write a consistent copy of the database to PATH (safe while a server runs)
    Backup {
        /// Where to write the copy (must not exist)
        path: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    Jsonl,
    Markdown,
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List sessions, most recently active first
    List {
        /// Only sessions whose title or messages contain all these words (archived
        /// sessions included unless --archived says otherwise)
        #[arg(long, short)]
        query: Option<String>,
        /// Which sessions to show by their archived flag [default: exclude, or include
        /// with --query]
        #[arg(long, value_enum)]
        archived: Option<ArchivedArg>,
        /// At most this many sessions [default: all]
        #[arg(long)]
        limit: Option<u32>,
        /// One JSON array instead of lines of text
        #[arg(long)]
        json: bool,
    },
    /// Show one session: its transcript, what the model would be sent, or its raw events
    Show {
        /// The session id
        id: String,
        /// What the model would be sent next, with token counts
        #[arg(long, conflicts_with = "events")]
        llm: bool,
        /// The raw event log
        #[arg(long)]
        events: bool,
        /// JSON instead of text
        #[arg(long)]
        json: bool,
    },
    /// Compact a session now (whatever its size) and print its tokens before and after;
    /// through the running server when one holds the database
    Compact {
        /// The session id
        id: String,
        /// The server's bearer token, when it has one
        #[arg(long, env = "BRAIN_API_TOKEN")]
        api_token: Option<String>,
        /// Settings for compacting in-process (used only when no server holds the database)
        #[command(flatten)]
        provider: ProviderArgs,
    },
    /// Write sessions out: JSONL (every event, lossless, for `import`) or Markdown (the
    /// transcript)
    Export {
        /// The session id (or --all)
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Every session
        #[arg(long)]
        all: bool,
        #[arg(long, value_enum, default_value_t = ExportFormat::Jsonl)]
        format: ExportFormat,
        /// Write to this file instead of standard output (a new file, unless --force)
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Replace the --output file if it exists (never the database or its own files)
        #[arg(long, requires = "output")]
        force: bool,
    },
    /// Read a JSONL export into this database (all of it or, on any bad line, nothing)
    Import {
        /// The JSONL file (`-` for standard input)
        file: PathBuf,
    },
    /// Search messages, answers, summaries and titles
    Search {
        /// Words to find, all of which must match
        #[arg(required = true, num_args = 1..)]
        query: Vec<String>,
        /// Treat the query as FTS5 syntax (AND, OR, NOT, "phrases", prefix*, NEAR)
        #[arg(long)]
        fts: bool,
        /// At most this many hits
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
        /// Skip this many hits (paging)
        #[arg(long, default_value_t = 0)]
        offset: u32,
        /// JSON instead of text
        #[arg(long)]
        json: bool,
    },
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    BadSessionId(#[from] BadSessionId),
    #[error(
        "no default database location on this system (no home directory); pass --db PATH \
         or set BRAIN_DB"
    )]
    NoDataDir,
    #[error("cannot create the directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Provider(#[from] crate::provider::ProviderError),
    #[error("{0}")]
    Compaction(#[from] crate::session::compactor::CompactionError),
    #[error("{0}")]
    Serve(String),
    #[error("line {0} of the import: {1} (nothing was imported)")]
    Import(usize, String),
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
    #[error("cannot read {}: {source}", path.display())]
    Input {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("refusing to write the export to {}: {why}", path.display())]
    OutputRefused { path: PathBuf, why: &'static str },
    #[error("{}", locked_message(.0, .1))]
    Locked(lock::LockError, &'static str),
}

fn locked_message(e: &lock::LockError, advice: &str) -> String {
    match e {
        lock::LockError::Held { .. } => format!("{e}; {advice}"),
        lock::LockError::Io { .. } => e.to_string(),
    }
}

/// Takes the database's lock for `command`, or refuses with who holds it and `advice`.
fn lock_db(
    db: &std::path::Path,
    command: &str,
    advice: &'static str,
) -> Result<lock::DbLock, CliError> {
    lock::DbLock::acquire(db, command).map_err(|e| CliError::Locked(e, advice))
}

impl CliError {
    /// A closed output pipe (`brain … | head`): the reader has what it wanted.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// Parses a command line. `serve` is the default command, so it takes serve's flags:
/// `brain --listen …` is `brain serve --listen …`.
pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString>,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let first = match Cli::try_parse_from(&args) {
        Ok(cli) => return Ok(cli),
        Err(e) => e,
    };
    if first.kind() != clap::error::ErrorKind::UnknownArgument || args.is_empty() {
        return Err(first);
    }
    // A flag `brain` does not know may be serve's: read the line again as `brain serve …`
    // (`--db` and `--sync` are global, so they may stand anywhere).
    let mut as_serve = args;
    as_serve.insert(1, "serve".into());
    match Cli::try_parse_from(&as_serve) {
        Ok(cli) => Ok(cli),
        // Not serve's either (a typo, or a subcommand after serve's flags): the first
        // error says it best.
        Err(e) if e.kind() == clap::error::ErrorKind::UnknownArgument => Err(first),
        Err(e) => Err(e),
    }
}

/// Runs a parsed command line, writing its output to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<(), CliError> {
    let sync = cli.sync.into();
    let command = match cli.command {
        Some(c) => c,
        // No command: serve, with settings from the environment and defaults.
        None => Command::Serve(ServeOnly::parse_from(["brain"]).args),
    };
    match command {
        Command::Serve(args) => serve::run(cli.db, sync, args, out),
        Command::Migrate => migrate(cli.db, sync, out),
        Command::Chat(args) => chat::run(cli.db, sync, args, out),
        Command::Backup { path } => backup(cli.db, sync, &path, out),
        Command::Sessions(cmd) => {
            if !cmd.writes() {
                // Never migrates or writes: a newer brain reading a database an older
                // server runs on must leave it as it is (SPEC §12).
                let store = open_read_only(&db_path(cli.db)?, sync, OlderSchema::Refuse)?;
                return sessions::run(store, cmd, out);
            }
            let db = resolve_db_path(cli.db)?;
            let lock = lock::DbLock::acquire(&db, "sessions");
            // A compaction goes through the server that holds the database, if one does.
            if let (
                SessionsCommand::Compact { id, api_token, .. },
                Err(lock::LockError::Held {
                    holder: lock::Holder { url: Some(url), .. },
                    ..
                }),
            ) = (&cmd, &lock)
            {
                return sessions::compact_on_server(url, id, api_token.as_deref(), out);
            }
            let _lock = lock.map_err(|e| {
                CliError::Locked(
                    e,
                    "stop it before you change sessions from the command line",
                )
            })?;
            sessions::run(open_at(&db, sync)?, cmd, out)
        }
    }
}

impl SessionsCommand {
    /// Whether the command changes the database (and so needs its lock).
    fn writes(&self) -> bool {
        match self {
            SessionsCommand::Compact { .. } | SessionsCommand::Import { .. } => true,
            SessionsCommand::List { .. }
            | SessionsCommand::Show { .. }
            | SessionsCommand::Export { .. }
            | SessionsCommand::Search { .. } => false,
        }
    }
}

/// The database path from `--db`/`BRAIN_DB` or the default.
fn db_path(db: Option<PathBuf>) -> Result<PathBuf, CliError> {
    match db {
        Some(p) => Ok(p),
        None => config::default_db_path().ok_or(CliError::NoDataDir),
    }
}

/// The database path from `--db`/`BRAIN_DB` or the default, its directory created.
pub fn resolve_db_path(db: Option<PathBuf>) -> Result<PathBuf, CliError> {
    let path = db_path(db)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| CliError::CreateDir {
            path: dir.to_owned(),
            source,
        })?;
    }
    Ok(path)
}

fn open_store(db: Option<PathBuf>, sync: SyncMode) -> Result<Store, CliError> {
    open_at(&resolve_db_path(db)?, sync)
}

/// Opens the store at an already resolved path.
fn open_at(path: &std::path::Path, sync: SyncMode) -> Result<Store, CliError> {
    Ok(Store::open(
        path,
        StoreOptions {
            sync,
            ..StoreOptions::default()
        },
    )?)
}

/// Opens an existing database for a command that only reads (nothing created or migrated).
fn open_read_only(
    path: &std::path::Path,
    sync: SyncMode,
    older: OlderSchema,
) -> Result<Store, CliError> {
    let options = StoreOptions {
        sync,
        ..StoreOptions::default()
    };
    Ok(Store::open_read_only(path, options, older)?)
}

impl ProviderArgs {
    /// The provider client's settings these flags give (timeouts at their defaults).
    pub fn provider_config(&self) -> crate::provider::ProviderConfig {
        let mut cfg = crate::provider::ProviderConfig::new(&self.provider_url);
        cfg.api_key = crate::provider::client::api_key_from_env(&self.api_key_env);
        cfg
    }

    /// The turn engine's settings these flags give (the rest at their defaults).
    pub fn engine_settings(&self) -> crate::chat::engine::EngineSettings {
        crate::chat::engine::EngineSettings {
            chat_model: self.model.clone(),
            summarize_model: self.summarize_model.clone(),
            context_window: self.context_window,
            compact_at: self.compact_at,
            max_output_tokens: self.max_output_tokens,
            ..crate::chat::engine::EngineSettings::default()
        }
    }
}

fn backup(
    db: Option<PathBuf>,
    sync: SyncMode,
    path: &std::path::Path,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    // A copy needs no particular schema: an older one is copied as it is (a backup before
    // `brain migrate` is the careful order); a newer one is refused like everywhere.
    let store = open_read_only(&db_path(db)?, sync, OlderSchema::Accept)?;
    store.backup_to(path)?;
    // The copy must open and be whole before we say it is a backup.
    let copy = rusqlite::Connection::open(path).map_err(StoreError::from)?;
    let check: String = copy
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .map_err(StoreError::from)?;
    if check != "ok" {
        return Err(CliError::Serve(format!(
            "the backup at {} failed its integrity check: {check}",
            path.display()
        )));
    }
    writeln!(
        out,
        "backup of {} written to {} (integrity ok)",
        store.path().display(),
        path.display()
    )?;
    Ok(())
}

fn migrate(db: Option<PathBuf>, sync: SyncMode, out: &mut dyn Write) -> Result<(), CliError> {
    let path = resolve_db_path(db)?;
    let _lock = lock_db(&path, "migrate", "stop it before you migrate the database")?;
    let store = open_store(Some(path), sync)?;
    writeln!(
        out,
        "{}: schema at version {}",
        store.path().display(),
        schema::latest_version()
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_flags_without_a_command_mean_serve() {
        let cli = parse_args(["brain", "--listen", "127.0.0.1:1", "--db", "x.db"]).unwrap();
        match cli.command {
            Some(Command::Serve(args)) => assert_eq!(args.listen.port(), 1),
            other => panic!("{other:?}"),
        }
        assert_eq!(cli.db, Some(PathBuf::from("x.db")));
        let cli = parse_args(["brain", "--db", "x.db", "sessions", "list"]).unwrap();
        assert!(matches!(cli.command, Some(Command::Sessions(_))));
        assert!(parse_args(["brain"]).unwrap().command.is_none());
        let e = parse_args(["brain", "--listen", "127.0.0.1:1", "migrate"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
    }

    #[test]
    fn a_url_without_a_scheme_is_refused_with_the_fix() {
        assert_eq!(
            parse_http_url("localhost:8091").unwrap_err(),
            "\"localhost:8091\" has no scheme; did you mean http://localhost:8091?"
        );
        assert!(
            parse_http_url("127.0.0.1:8080/v1")
                .unwrap_err()
                .contains("http://127.0.0.1:8080/v1?")
        );
        assert!(
            parse_http_url("ftp://x/v1")
                .unwrap_err()
                .contains("not an http")
        );
        assert!(parse_http_url("http://").is_err());
        assert!(parse_http_url("http:///v1").is_err());
        assert!(parse_http_url("http://host:notaport/v1").is_err());
        for ok in [
            "http://localhost:8091/v1",
            "HTTPS://api.openai.com/v1",
            "http://[::1]:8080",
        ] {
            assert_eq!(parse_http_url(ok).unwrap(), ok);
        }
    }
}
