//! `fathom backup --to FILE`: a consistent copy of the database while it serves. SQLite is
//! copied online (`VACUUM INTO`), checked and counted; Postgres is dumped with its own
//! `pg_dump` in its custom format, which `pg_restore` reads back into an empty database.
//! Either way, what the copy holds (runs by status, events, sessions, artifacts) is printed,
//! and how to restore it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use fathom_store::{DatabaseTarget, Dialect, SqlStore};

use crate::app::App;

#[derive(clap::Args)]
pub struct BackupArgs {
    /// The file to write; it must not exist yet.
    #[arg(long)]
    to: PathBuf,
    /// Seconds the copy may take before it is abandoned (and nothing is left at --to).
    #[arg(long, default_value_t = 3600)]
    timeout_secs: u64,
}

pub async fn backup(app: &App, args: BackupArgs) -> anyhow::Result<ExitCode> {
    if args.to.exists() {
        bail!(
            "{} exists already: a backup is written to a new file (choose another --to)",
            args.to.display()
        );
    }
    let partial = partial_path(&args.to);
    // What an abandoned or failed copy left behind is not a backup.
    let _ = std::fs::remove_file(&partial);
    let limit = Duration::from_secs(args.timeout_secs.max(1));
    let target = DatabaseTarget::parse(&app.database_url)?;
    let copied = match target.dialect {
        Dialect::Sqlite => tokio::time::timeout(limit, sqlite_copy(app, &partial)).await,
        Dialect::Postgres => tokio::time::timeout(limit, pg_dump(&target.url, &partial)).await,
    };
    let held = match copied {
        Ok(Ok(held)) => held,
        Ok(Err(e)) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
        Err(_) => {
            let _ = std::fs::remove_file(&partial);
            bail!(
                "the backup took longer than {limit:?} and was abandoned; nothing was written (raise --timeout-secs)"
            );
        }
    };
    std::fs::rename(&partial, &args.to)
        .with_context(|| format!("cannot move the backup to {}", args.to.display()))?;
    let bytes = std::fs::metadata(&args.to).map(|m| m.len()).unwrap_or(0);
    println!("backup {} ({bytes} bytes)", args.to.display());
    println!("holds  {held}");
    match target.dialect {
        Dialect::Sqlite => println!(
            "restore: stop fathom, then start it on the copy (DATABASE_URL={}), or put the copy \
             in place of {} while nothing runs; waiting runs wait on, interrupted ones carry on",
            args.to.display(),
            target.sqlite_path().unwrap_or(&app.database_url)
        ),
        Dialect::Postgres => println!(
            "restore: pg_restore --no-owner --dbname postgres://…/EMPTY_DATABASE {}, then start \
             fathom on that database; waiting runs wait on, interrupted ones carry on",
            args.to.display()
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// `dest` with `.partial` added: where the copy is written until it is whole and checked.
fn partial_path(dest: &Path) -> PathBuf {
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    dest.with_file_name(name)
}

/// The live SQLite database copied to `partial`, then opened, checked and counted.
async fn sqlite_copy(app: &App, partial: &Path) -> anyhow::Result<fathom_store::Inventory> {
    let live = app.connect().await?;
    live.backup_sqlite_into(partial).await?;
    let path = partial
        .to_str()
        .ok_or_else(|| anyhow!("{} is not a UTF-8 path", partial.display()))?;
    let copy = SqlStore::connect(path).await?;
    let checked = async {
        if let Some(problem) = copy.integrity_problem().await? {
            bail!("the copy is damaged ({problem}); nothing was written");
        }
        Ok(copy.inventory().await?)
    }
    .await;
    copy.close().await;
    checked
}

/// The Postgres database at `url` dumped to `partial` by `pg_dump` (custom format), read back
/// by `pg_restore --list`; what the database held as the dump began.
async fn pg_dump(url: &str, partial: &Path) -> anyhow::Result<fathom_store::Inventory> {
    let live = SqlStore::connect(url).await?;
    let held = live.inventory().await;
    live.close().await;
    let dumped = tokio::process::Command::new("pg_dump")
        .args(["--format=custom", "--no-owner", "--file"])
        .arg(partial)
        .arg("--dbname")
        .arg(url)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| anyhow!("cannot run pg_dump ({e}); install the PostgreSQL client tools"))?;
    if !dumped.status.success() {
        bail!(
            "pg_dump failed ({}): {}",
            dumped.status,
            String::from_utf8_lossy(&dumped.stderr).trim()
        );
    }
    let listed = tokio::process::Command::new("pg_restore")
        .arg("--list")
        .arg(partial)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| anyhow!("cannot run pg_restore to check the dump ({e})"))?;
    let tables = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter(|l| l.contains(" TABLE DATA "))
        .count();
    if !listed.status.success() || tables == 0 {
        bail!(
            "the dump does not read back ({}): {}",
            listed.status,
            String::from_utf8_lossy(&listed.stderr).trim()
        );
    }
    Ok(held?)
}
