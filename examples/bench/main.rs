//! brain's benchmark harness, one program for every measure so figures are taken side by
//! side in one run (these machines are noisy). See BENCHMARKS.md for the figures.
//!
//! ```sh
//! cargo run --release --example bench -- corpus [--sessions N] [--events M] [--out DB]  # build a corpus
//! cargo run --release --example bench -- scale [--events M] [--out DB]  # issue 19's reads at 10M
//! cargo run --release --example bench -- size [--out DB]                # dbstat: bytes per event
//! cargo run --release --example bench -- store [APPENDS] [CORPUS]   # appends and search
//! cargo run --release --example bench -- store --db postgres://… [APPENDS] [CORPUS]  # next to PostgreSQL
//! cargo run --release --example bench -- projection                 # per-turn context work
//! cargo run --release --example bench -- first-token [TURNS]        # brain vs provider
//! cargo run --release --example bench -- cost [TURNS]               # cache reuse vs naive
//! cargo run --release --example bench -- footprint                  # size, start, RSS
//! cargo run --release --example bench -- http                       # wrk on two routes
//! cargo run --release --example bench -- local URL [serve flags]     # a small local model
//! cargo run --release --example bench -- tools [CALLS]                # tool step overhead, cache
//! cargo run --release --example bench -- import [MESSAGES]           # ChatGPT import: messages/s, RSS
//! cargo run --release --example bench -- transcript                 # a page of a 100k-event session
//! cargo run --release --example bench -- writer [APPENDS] [EVENTS]   # checkpoints, delete holds
//! cargo run --release --example bench -- team PG_URL                 # 64×10 turns, 2 servers on PostgreSQL
//! ```

mod corpus;
mod footprint;
mod http;
mod import;
mod local;
mod projection;
mod scale;
mod store;
mod store_pg;
mod support;
mod team;
/// A fresh PostgreSQL database per run (the test suite's own file, of which the benchmarks
/// take only part).
#[allow(dead_code)]
#[path = "../../src/session/store/pg/testdb.rs"]
mod testdb;
mod tools;
mod transcript;
mod turns;
mod writer;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or_default();
    let result = match args.first().map(String::as_str) {
        Some("corpus") => corpus::run(rest),
        Some("scale") => scale::run(rest),
        Some("size") => scale::size(rest),
        Some("store") => store::run(rest),
        Some("projection") => projection::run(),
        Some("first-token") => turns::first_token(rest),
        Some("cost") => turns::cost(rest),
        Some("footprint") => footprint::run(),
        Some("http") => http::run(),
        Some("local") => local::run(rest),
        Some("tools") => tools::run(rest),
        Some("import") => import::run(rest),
        Some("transcript") => transcript::run(),
        Some("writer") => writer::run(rest),
        Some("team") => team::run(rest),
        _ => {
            eprintln!(
                "usage: bench corpus|scale|size|store|projection|first-token|cost|footprint|http|local|tools|import|transcript|writer|team [args]"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}
