//! Upgrades: runs left in flight by an earlier version of Fathom complete under this one.
//!
//! `fixtures/upgrade/format-1.json` holds the database rows of two research runs as the
//! binary of store format 1 left them: one waiting at the approval gate, one approved and
//! killed inside fetch_parse_sources after three journaled calls. The test loads them into a
//! fresh database (SQLite and Postgres), starts `fathom serve` on it, approves the first, and
//! reads both to a completed report. The killed run's research deadline passed long ago (it
//! was stored when the fixture was taken), so it gathers nothing new: its report must still
//! cite what it read before the kill.
//!
//! To take a new fixture before a change of what is stored (then keep the old one and its
//! test): `FATHOM_WRITE_UPGRADE_FIXTURE=format-N cargo test -p fathom-cli --test upgrade`.

#[path = "common/served.rs"]
mod served;

use std::path::{Path, PathBuf};

use fathom_engine::store::{RunFilter, RunStatus, RunStore};
use fathom_store::Dialect;
use serde_json::{Map, Value, json};
use served::*;

/// The engine's tables, parents first, as a fixture holds them.
const TABLES: [&str; 8] = [
    "runs",
    "run_inbox",
    "step_journal",
    "call_journal",
    "run_events",
    "mailbox",
    "collection_items",
    "artifacts",
];
/// Stands for the corpus folder in a fixture (the runs name its files by path).
const CORPUS_MARK: &str = "${CORPUS}";

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/upgrade")
        .join(format!("{name}.json"))
}

/// Every row of the engine's tables in a SQLite database, as JSON objects (blobs in hex).
async fn dump_sqlite(store: &fathom_store::SqlStore) -> Map<String, Value> {
    let mut tables = Map::new();
    for table in TABLES {
        let columns: Vec<(String, String)> =
            sqlx::query_as::<_, (String, String)>(sqlx::AssertSqlSafe(format!(
                "SELECT name, type FROM pragma_table_info('{table}')"
            )))
            .fetch_all(store.pool())
            .await
            .unwrap();
        let fields: Vec<String> = columns
            .iter()
            .map(|(name, ty)| match ty.as_str() {
                "BLOB" => format!("'{name}', hex({name})"),
                _ => format!("'{name}', {name}"),
            })
            .collect();
        let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT json_object({}) FROM {table} ORDER BY rowid",
            fields.join(", ")
        )))
        .fetch_all(store.pool())
        .await
        .unwrap();
        let rows = rows
            .iter()
            .map(|r| serde_json::from_str(r).unwrap())
            .collect();
        tables.insert(table.to_string(), Value::Array(rows));
    }
    tables
}

/// Writes a fixture: two research runs in flight, left by this binary.
async fn write_fixture(name: &str) {
    let env = env(Dialect::Sqlite).await;
    let first = Served::start(&env, "old", Some("fetch_parse_sources:3"));
    let client = http();
    let store = fathom_store::SqlStore::connect(&env.db).await.unwrap();
    let waiting = start_run(&client, &first.api()).await;
    let killed = start_run(&client, &first.api()).await;
    wait_until("both plans wait at the gate", || async {
        let runs = store
            .list_runs(&RunFilter {
                statuses: vec![RunStatus::Waiting],
                ..Default::default()
            })
            .await
            .unwrap();
        runs.len() == 2
    })
    .await;
    approve(&client, &first.api(), &killed).await;
    first.wait_for_line("crash point fetch_parse_sources:3 reached");
    drop(first); // SIGKILL
    let corpus = env.corpus.display().to_string();
    let tables = dump_sqlite(&store).await;
    let fixture = json!({
        "about": "research runs in flight, written by store format of this file's name: \
                  `waiting` at the approval gate, `killed` inside fetch_parse_sources",
        "waiting": waiting,
        "killed": killed,
        "tables": tables,
    });
    let text = serde_json::to_string_pretty(&fixture)
        .unwrap()
        .replace(&corpus, CORPUS_MARK);
    let path = fixture_path(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text + "\n").unwrap();
    eprintln!("wrote {}", path.display());
}

/// Inserts a fixture's rows into `store`'s database, naming `corpus` where the runs named
/// theirs. Columns the fixture lacks (added since) take their defaults.
async fn load_fixture(store: &fathom_store::SqlStore, fixture: &Value) {
    for table in TABLES {
        for row in fixture["tables"][table].as_array().unwrap() {
            let mut row = row.as_object().unwrap().clone();
            let columns: Vec<String> = row.keys().cloned().collect();
            let list = columns.join(", ");
            let sql = match store.dialect() {
                Dialect::Postgres => {
                    if table == "collection_items" {
                        // JSONB there, text in SQLite.
                        let data: Value =
                            serde_json::from_str(row["data"].as_str().unwrap()).unwrap();
                        row.insert("data".into(), data);
                    }
                    if let Some(Value::String(hex)) = row.get("bytes") {
                        row.insert("bytes".into(), Value::String(format!("\\x{hex}")));
                    }
                    format!(
                        "INSERT INTO {table} ({list}) SELECT {list} \
                         FROM json_populate_record(NULL::{table}, CAST($1 AS json))"
                    )
                }
                Dialect::Sqlite => {
                    let values: Vec<String> = columns
                        .iter()
                        .map(|c| match c.as_str() {
                            "bytes" => format!("unhex(json_extract($1, '$.{c}'))"),
                            _ => format!("json_extract($1, '$.{c}')"),
                        })
                        .collect();
                    format!("INSERT INTO {table} ({list}) SELECT {}", values.join(", "))
                }
            };
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(Value::Object(row).to_string())
                .execute(store.pool())
                .await
                .unwrap_or_else(|e| panic!("loading {table}: {e}"));
        }
    }
    if store.dialect() == Dialect::Postgres {
        // Ids given explicitly leave the sequences behind.
        for table in ["run_inbox", "step_journal", "mailbox"] {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT setval(pg_get_serial_sequence('{table}', 'id'), \
                 (SELECT COALESCE(MAX(id), 0) + 1 FROM {table}), false)"
            )))
            .execute(store.pool())
            .await
            .unwrap();
        }
    }
}

/// The fixture's runs complete under this binary: the waiting one once approved, the killed
/// one on its own, its journaled calls not made again (each tool call once on its stream).
async fn runs_of_format_complete(dialect: Dialect, name: &str) {
    let text = std::fs::read_to_string(fixture_path(name)).expect("the fixture");
    let env = env(dialect).await;
    let text = text.replace(CORPUS_MARK, &env.corpus.display().to_string());
    let fixture: Value = serde_json::from_str(&text).unwrap();
    let store = fathom_store::SqlStore::connect(&env.db).await.unwrap();
    load_fixture(&store, &fixture).await;
    let waiting = fixture["waiting"].as_str().unwrap().to_string();
    let killed = fixture["killed"].as_str().unwrap().to_string();
    let before = store.events_after(&killed, -1, 10_000).await.unwrap().len();

    // The same lease owner as the process that died: it takes its run back at once.
    let served = Served::start(&env, "old", None);
    let client = http();
    let run = store.get_run(&waiting).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Waiting, "still at the gate");
    approve(&client, &served.api(), &waiting).await;
    for id in [&waiting, &killed] {
        let events = follow_to_end(client.clone(), served.api(), id.clone()).await;
        assert_completed_once(id, &events);
        let result = &events.last().unwrap().1["value"];
        let corpus = env.corpus.display().to_string();
        let cited = result["sources"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s.to_string().contains(&corpus))
            .count();
        assert!(cited > 0, "run {id} cites files of the corpus: {result}");
    }
    let after = store.events_after(&killed, -1, 10_000).await.unwrap();
    assert!(
        after.len() > before,
        "the killed run went on from where it was"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_left_by_format_1_complete_sqlite() {
    if let Ok(name) = std::env::var("FATHOM_WRITE_UPGRADE_FIXTURE") {
        write_fixture(&name).await;
    }
    runs_of_format_complete(Dialect::Sqlite, "format-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_left_by_format_1_complete_postgres() {
    runs_of_format_complete(Dialect::Postgres, "format-1").await;
}
