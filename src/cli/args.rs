//! The command line as typed: clap's raw arguments, their value parsers, and how `brain`
//! alone reads serve's flags. What each command does lives beside (`super`).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::session::SyncMode;
use crate::session::cursor::ArchivedFilter;

/// brain: a local LLM chat server whose sessions survive anything.
#[derive(Debug, Parser)]
#[command(
    name = "brain",
    version,
    about,
    long_about = None,
    after_help = "Answers need an OpenAI-compatible model server: `brain serve --provider-url URL` \
                  (default http://127.0.0.1:11434/v1, Ollama's; llama.cpp's llama-server is \
                  http://127.0.0.1:8080/v1). `brain serve --help` lists every setting."
)]
pub struct Cli {
    /// The database: a SQLite file, or a PostgreSQL server as a postgres:// URL (README: "Team mode (PostgreSQL)")
    /// [default: the platform data directory's brain/brain.db]
    #[arg(long, env = "BRAIN_DB", global = true, value_name = "PATH|URL")]
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
    /// Background calls (titles, turn memory) that may run at once on the provider, for
    /// servers with parallel slots; they never run while a chat answer is being written
    #[arg(long, env = "BRAIN_BACKGROUND_SLOTS", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub background_slots: u64,
}

fn parse_compact_at(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if (0.1..=0.95).contains(&r) => Ok(r),
        _ => Err(format!("{s:?} is not a ratio between 0.1 and 0.95")),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ToolsArg {
    Auto,
    On,
    Off,
}

impl From<ToolsArg> for crate::tools::Mode {
    fn from(t: ToolsArg) -> crate::tools::Mode {
        match t {
            ToolsArg::Auto => crate::tools::Mode::Auto,
            ToolsArg::On => crate::tools::Mode::On,
            ToolsArg::Off => crate::tools::Mode::Off,
        }
    }
}

/// Which tools a model is offered, and the MCP servers behind them (SPEC §13).
#[derive(Debug, Clone, clap::Args)]
pub struct ToolsArgs {
    /// Offer tools: `auto` once --mcp-config is given (the built-in search_history with
    /// them), `on` the built-in even without, `off` none (and no server started)
    #[arg(long = "tools", env = "BRAIN_TOOLS", value_enum, default_value_t = ToolsArg::Auto)]
    pub mode: ToolsArg,
    /// MCP servers, in the `{"mcpServers": {...}}` file other MCP clients use
    #[arg(long, env = "BRAIN_MCP_CONFIG", value_name = "PATH")]
    pub mcp_config: Option<PathBuf>,
    /// Seconds a tool call may take when its server sets no `timeout_s`
    #[arg(long, env = "BRAIN_TOOL_TIMEOUT", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub tool_timeout: u64,
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
    /// Give untitled sessions an automatic title after their first answer
    #[arg(long, env = "BRAIN_TITLES", default_value = "on", value_parser = ["on", "off"])]
    pub titles: String,
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
    /// The largest export `POST /v1/import` takes, in bytes (and the most of a zip's
    /// conversations.json it reads)
    #[arg(long, env = "BRAIN_MAX_IMPORT_BYTES", default_value_t = crate::api::import::DEFAULT_MAX_IMPORT_BYTES, value_parser = clap::value_parser!(u64).range(1024..))]
    pub max_import_bytes: u64,
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
    /// Seconds a request's headers and body may take to arrive (else 408), and an answer,
    /// or one frame of a stream, to be written (else the connection is closed)
    #[arg(long, env = "BRAIN_REQUEST_TIMEOUT", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub request_timeout: u64,
    /// The most client connections open at once (past it, new ones are refused at once)
    #[arg(long, env = "BRAIN_MAX_CONNECTIONS", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub max_connections: u64,
    #[command(flatten)]
    pub tools: ToolsArgs,
    /// The most model steps (requests) one answer may take with tools; the last is sent
    /// without them
    #[arg(long, env = "BRAIN_MAX_TOOL_STEPS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub max_tool_steps: u32,
    /// The most bytes of one tool result sent to the model (the rest cut, with a marker)
    #[arg(long, env = "BRAIN_MAX_TOOL_RESULT_BYTES", default_value_t = 65_536, value_parser = clap::value_parser!(u64).range(1024..=16_777_216))]
    pub max_tool_result_bytes: u64,
    /// Seconds a tool call waits for the user's permission before it is cancelled
    #[arg(long, env = "BRAIN_PERMISSION_TIMEOUT", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub permission_timeout: u64,
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
    /// Tools for the in-process engine (used only when no server holds the database)
    #[command(flatten)]
    pub tools: ToolsArgs,
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
    if authority.contains('@') {
        // A password in the URL would be shown in the banner, sent in every `end` frame
        // and stored in every answer's `provider`: keys belong in a variable.
        return Err(format!(
            "{text:?} carries credentials; put the key in an environment variable and name              it with --api-key-env instead"
        ));
    }
    if text.contains(['?', '#']) {
        return Err(format!(
            "{text:?} has a query or fragment; give the API base only (like              http://127.0.0.1:8080/v1)"
        ));
    }
    let host_port = authority;
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

// Parsed once per process: the size of serve's settings costs nothing.
#[allow(clippy::large_enum_variant)]
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
    /// The tools a model can use: list them, or run one call to check a configuration
    #[command(subcommand)]
    Tools(ToolsCommand),
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

/// Which tool wrote an import's file (SPEC §15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportFrom {
    /// Recognise the format by its shape
    Auto,
    /// This project's JSONL export
    Brain,
    /// ChatGPT's export: its .zip, or the conversations.json inside
    Chatgpt,
    /// Claude's export: its .zip, or the conversations.json inside
    Claude,
    /// Open WebUI's chat export
    Openwebui,
    /// Simon Willison's llm logs.db
    Llm,
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
        /// The tools a turn would offer (their definitions take room in the window, so
        /// the trigger is the server's only with the server's tools)
        #[command(flatten)]
        tools: ToolsArgs,
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
    /// Copy a session through one of its events into a new session (README: "Edit, branch and versions") and print
    /// the new session's id; through the running server when one holds the database
    Fork {
        /// The session id
        id: String,
        /// Copy through this seq (default: the newest event of the current branch)
        #[arg(long, value_name = "SEQ", value_parser = clap::value_parser!(u64).range(1..=i64::MAX as u64))]
        at: Option<u64>,
        /// The server's bearer token, when it has one
        #[arg(long, env = "BRAIN_API_TOKEN")]
        api_token: Option<String>,
        /// JSON (the new Session, as `POST …/fork` answers) instead of text
        #[arg(long)]
        json: bool,
    },
    /// Import history: brain's JSONL export, or ChatGPT, Claude (their .zip or its
    /// conversations.json), Open WebUI or llm history (all of a file or, on any unreadable
    /// conversation, nothing; importing again adds only what is new); through the running
    /// server when one holds the database
    Import {
        /// The file (`-` for standard input)
        file: PathBuf,
        /// Which tool wrote it
        #[arg(long, value_enum, default_value_t = ImportFrom::Auto)]
        from: ImportFrom,
        /// The server's bearer token, when a server holds the database (the file is sent
        /// to it)
        #[arg(long, env = "BRAIN_API_TOKEN")]
        api_token: Option<String>,
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
        /// Newest first over every match, instead of best first among the newest matches
        #[arg(long)]
        recent: bool,
        /// Match words by their stem: `hostel` finds "hostels"
        #[arg(long)]
        stem: bool,
        /// JSON instead of text
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// Every tool, its server and policy, and each server's status
    List {
        #[command(flatten)]
        tools: ToolsArgs,
        /// JSON (as `GET /v1/tools` answers) instead of text
        #[arg(long)]
        json: bool,
        /// One MCP server at this Streamable HTTP URL, named `mcp` (instead of
        /// --mcp-config; for checking a server, or MCP's conformance runner)
        #[arg(long, value_name = "URL", conflicts_with = "mcp_config")]
        mcp_url: Option<String>,
        /// The running server's bearer token, when it has one (without --mcp-config or
        /// --mcp-url, the server holding the database is asked what it offers)
        #[arg(long, env = "BRAIN_API_TOKEN")]
        api_token: Option<String>,
    },
    /// Run one call and print its result (the exit code says whether it failed)
    Call {
        /// The tool's name as offered (`SERVER__tool`, or `search_history`)
        name: String,
        /// Its arguments, a JSON object
        #[arg(default_value = "{}")]
        arguments: String,
        #[command(flatten)]
        tools: ToolsArgs,
        /// One MCP server at this Streamable HTTP URL, named `mcp` (instead of
        /// --mcp-config; for checking a server, or MCP's conformance runner)
        #[arg(long, value_name = "URL", conflicts_with = "mcp_config")]
        mcp_url: Option<String>,
    },
}

/// Parses `ServeArgs` alone (for `brain` with no command).
#[derive(Parser)]
pub(super) struct ServeOnly {
    #[command(flatten)]
    pub(super) args: ServeArgs,
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

impl SessionsCommand {
    /// Whether the command changes the database (and so needs its lock).
    pub(super) fn writes(&self) -> bool {
        match self {
            SessionsCommand::Compact { .. }
            | SessionsCommand::Import { .. }
            | SessionsCommand::Fork { .. } => true,
            SessionsCommand::List { .. }
            | SessionsCommand::Show { .. }
            | SessionsCommand::Export { .. }
            | SessionsCommand::Search { .. } => false,
        }
    }
}

impl ProviderArgs {
    /// The provider client's settings these flags give (timeouts at their defaults).
    pub fn provider_config(&self) -> crate::provider::ProviderConfig {
        let mut cfg = crate::provider::ProviderConfig::new(&self.provider_url);
        cfg.api_key = crate::provider::client::api_key_from_env(&self.api_key_env);
        cfg.background_slots = self.background_slots as usize;
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
    fn tool_flags_have_the_specs_defaults_and_refuse_bad_values() {
        let Some(Command::Serve(args)) = parse_args(["brain", "serve"]).unwrap().command else {
            panic!()
        };
        assert_eq!(args.tools.mode, ToolsArg::Auto);
        assert_eq!(args.tools.mcp_config, None);
        assert_eq!(args.tools.tool_timeout, 60);
        assert_eq!(args.max_tool_steps, 10);
        assert_eq!(args.max_tool_result_bytes, 65_536);
        assert_eq!(args.permission_timeout, 300);
        let cli = parse_args(["brain", "--tools", "off", "--mcp-config", "m.json"]).unwrap();
        let Some(Command::Serve(args)) = cli.command else {
            panic!()
        };
        assert_eq!(args.tools.mode, ToolsArg::Off);
        assert_eq!(args.tools.mcp_config, Some(PathBuf::from("m.json")));
        for bad in [
            ["--tools", "maybe"],
            ["--tool-timeout", "0"],
            ["--max-tool-steps", "0"],
            ["--max-tool-result-bytes", "10"],
            ["--permission-timeout", "-1"],
        ] {
            assert!(
                parse_args(["brain", "serve", bad[0], bad[1]]).is_err(),
                "{bad:?}"
            );
        }
        let cli = parse_args(["brain", "tools", "call", "x__y", "{}", "--tools", "on"]).unwrap();
        assert!(matches!(
            cli.command,
            Some(Command::Tools(ToolsCommand::Call { .. }))
        ));
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
        assert!(
            parse_http_url("http://u:s3cret@127.0.0.1:9/v1")
                .unwrap_err()
                .contains("--api-key-env")
        );
        assert!(parse_http_url("http://h/v1?x=1").is_err());
        assert!(parse_http_url("http://h/v1#frag").is_err());
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
