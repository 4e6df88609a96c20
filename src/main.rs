//! The `brain` binary: parse arguments, run the command, map errors to an exit code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = brain::cli::Cli::parse();
    match brain::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("brain: {e}");
            ExitCode::FAILURE
        }
    }
}
