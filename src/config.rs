//! Named limits and defaults, in one place. Units are the last word of each name.

use std::path::PathBuf;
use std::time::Duration;

/// How long a connection waits for the database lock before `SQLITE_BUSY`. Writes queue on
/// one writer connection, so this is only reached when another process holds the lock.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Reader connections in the pool. Readers never block on the writer (WAL).
pub const READER_POOL_SIZE: u32 = 4;

/// Prepared statements kept per reader connection.
pub const READER_STATEMENT_CACHE: usize = 64;

/// How long a request waits for a free reader connection.
pub const READER_WAIT: Duration = Duration::from_secs(10);

/// The database's file name inside the platform data directory's `brain/` folder.
pub const DEFAULT_DB_FILE_NAME: &str = "brain.db";

/// The default database path: the platform data directory, `brain/brain.db`
/// (`~/.local/share/brain/brain.db` on Linux). `None` when the platform has no data
/// directory (no home), in which case `--db` is required.
pub fn default_db_path() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("brain").join(DEFAULT_DB_FILE_NAME))
}

/// How long to wait for a provider's TCP connection.
pub const PROVIDER_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a model listing (`GET /models`) may take.
pub const MODELS_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a model listing is reused before it is fetched again (in the background: the
/// last one keeps answering meanwhile).
pub const MODELS_CACHE_TTL: Duration = Duration::from_secs(30);

/// The window assumed when neither a flag nor the listing gives one (Ollama's OpenAI
/// listing has none).
pub const DEFAULT_WINDOW_TOKENS: u64 = 4096;

/// How long a failed listing is remembered before the next fetch, so a hung or failing
/// provider costs one fetch per interval rather than one per caller.
pub const MODELS_FAILURE_TTL: Duration = Duration::from_secs(5);

/// How long `GET /v1/models` waits for a listing when none is known yet; past it, it
/// answers with none.
pub const MODELS_ROUTE_WAIT: Duration = Duration::from_secs(2);

/// How old the last provider observation (a call's or probe's outcome) may be before
/// `/health` probes the provider again.
pub const PROVIDER_PROBE_AFTER: Duration = Duration::from_secs(5);

/// How long `/health` gives a probe to answer (from the probe's start); after it, it
/// answers from the last known state. Well under I10's second.
pub const HEALTH_PROBE_WAIT: Duration = Duration::from_millis(250);

/// The largest model listing read; a longer body is an error, not a memory hog.
pub const MAX_MODELS_BODY_BYTES: usize = 8 * 1024 * 1024;

/// The largest streamed answer (text and reasoning together) kept for one attempt: a
/// provider that streams valid text without end is cut there, and the answer so far is
/// kept as interrupted (SPEC §6), instead of growing in memory until the process dies.
pub const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// The largest non-streamed completion body read (summaries, distillation, titles).
pub const MAX_COMPLETION_BODY_BYTES: usize = 8 * 1024 * 1024;

/// How many read chunks a stream's reader thread may be ahead of its consumer: past it the
/// reader waits (TCP pushes back on the provider) instead of buffering without bound.
pub const STREAM_BUFFER_CHUNKS: usize = 64;

/// How much of a provider's error body is kept.
pub const MAX_PROVIDER_ERROR_BODY_BYTES: usize = 16 * 1024;

/// How long a model whose server refused `tools` is sent none (SPEC §13).
pub const TOOL_LESS_FOR: Duration = Duration::from_secs(30 * 60);

/// The tool calls kept from one step; the model's further calls are dropped (and the
/// stream says so).
pub const MAX_TOOL_CALLS_PER_STEP: usize = 64;

/// The longest arguments of one tool call; longer ones end the stream as malformed.
pub const MAX_TOOL_ARGUMENT_BYTES: usize = 1024 * 1024;

/// The longest id or name of one tool call.
pub const MAX_TOOL_CALL_NAME_BYTES: usize = 1024;

/// How much of a provider stream is read at once.
pub const PROVIDER_READ_CHUNK_BYTES: usize = 8 * 1024;

/// How often a waiting stream looks at its cancel flag.
pub const STREAM_CANCEL_POLL: Duration = Duration::from_millis(50);

/// Default wait for a provider's first token (a CPU model may take minutes on a long
/// prompt).
pub const DEFAULT_FIRST_TOKEN_TIMEOUT: Duration = Duration::from_secs(300);

/// Default wait between two chunks of a stream.
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The system prompt of sessions created without one.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant. Answer clearly and \
concisely; say so when you are not sure.";

/// How much longer than the caller's own timeout a stream's transport read may block: it
/// bounds how long an abandoned reader thread lives.
pub const TRANSPORT_READ_GRACE: Duration = Duration::from_secs(5);
