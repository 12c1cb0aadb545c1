//! `fathom keys hash`: the keys-file entry for a key read from stdin, so nobody computes a
//! digest by hand and no key is left in the shell's history or the process list.

use std::io::Read as _;
use std::process::ExitCode;

use fathom_server::{ApiKey, Role};

#[derive(clap::Subcommand)]
pub enum KeysCommand {
    /// Reads a key from stdin (its first line) and prints its keys-file entry,
    /// `{"name": ..., "role": ..., "sha256": ...}`, to add to the JSON list in the keys file
    /// (`--keys-file` or FATHOM_KEYS_FILE of `fathom serve`).
    Hash {
        /// The key's name: shown in decisions and errors; not secret.
        #[arg(long)]
        name: String,
        /// read, run, approve or admin (each includes the ones before it).
        #[arg(long, value_parser = parse_role)]
        role: Role,
    },
}

fn parse_role(s: &str) -> Result<Role, String> {
    Role::parse(s).ok_or_else(|| format!("'{s}' is not a role: read, run, approve or admin"))
}

pub fn run(command: KeysCommand) -> ExitCode {
    match command {
        KeysCommand::Hash { name, role } => {
            let name = name.trim();
            if name.is_empty() {
                eprintln!("fathom: --name is empty");
                return ExitCode::FAILURE;
            }
            let mut input = String::new();
            if let Err(e) = std::io::stdin().read_to_string(&mut input) {
                eprintln!("fathom: cannot read the key from stdin: {e}");
                return ExitCode::FAILURE;
            }
            let key = input.lines().next().unwrap_or("").trim();
            if key.is_empty() {
                eprintln!("fathom: no key on stdin (give it on the first line)");
                return ExitCode::FAILURE;
            }
            let entry = ApiKey::entry_for(name, role, key);
            match serde_json::to_string(&entry) {
                Ok(line) => {
                    println!("{line}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("fathom: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
