//! # fathom-corpus: the local folder index
//!
//! A folder of HTML, Markdown, text, DOCX and PDF files, indexed on disk in a SQLite
//! FTS5 file and refreshed incrementally (only files whose size, time or content changed are
//! parsed again). It is the offline search provider and fetcher of the research tools.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow};
use sqlx::{Row, SqliteConnection};

use fathom_parse::text::words;
use fathom_parse::{ContentParser, DocKind, ParsedDoc};

/// Files larger than this are skipped: they are not documents a person wrote to be read.
pub const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;
/// Bounds the walk over outside input.
const MAX_FILES: usize = 200_000;
const MAX_DEPTH: usize = 32;
const PASSAGE_CHARS: usize = 1200;
const INDEX_VERSION: &str = "4";
/// Connections to the index: searches of runs in flight at once share them.
const INDEX_CONNECTIONS: u32 = 4;
/// How long an index connection is used before it is opened again (its page cache with it).
const INDEX_CONNECTION_LIFETIME: Duration = Duration::from_secs(30 * 60);
/// A search term found in more than this share of the passages is left out of the query
/// (when another term remains): it tells the passages apart no more than a stop word.
const COMMON_SHARE: f64 = 0.6;

#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("corpus folder {0} does not exist")]
    Missing(String),
    #[error("corpus path {0} is not a folder")]
    NotAFolder(String),
    #[error("cannot read corpus folder {path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("corpus {path} has no readable HTML, Markdown, text, DOCX or PDF file{detail}")]
    NoReadableFiles { path: String, detail: String },
    #[error("corpus index {path}: {reason}")]
    Index { path: String, reason: String },
    #[error("{0} is not a file of this corpus")]
    OutsideCorpus(String),
    #[error("{url}: {reason}")]
    Fetch { url: String, reason: String },
}

/// One search result: a document and its best-matching passage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SearchHit {
    pub url: String,
    pub title: String,
    pub heading: String,
    pub snippet: String,
    pub score: f64,
}

/// A fetched document's bytes and kind.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub url: String,
    pub kind: DocKind,
    pub bytes: Vec<u8>,
    /// The charset the source declared (a web server's Content-Type), if any.
    pub charset: Option<String>,
}

/// What a refresh did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RefreshReport {
    pub indexed: usize,
    pub added: usize,
    pub updated: usize,
    pub removed: usize,
    pub unchanged: usize,
    /// Files that could not be read, with why: they are left out of the index.
    pub skipped: Vec<(String, String)>,
    pub elapsed_ms: u128,
}

pub struct Corpus {
    root: PathBuf,
    index_path: PathBuf,
    /// The index's connections: a pool, and those kept between statements.
    db: fathom_pool::Kept<sqlx::Sqlite>,
    parser: ContentParser,
    /// Files that only gather what other files say (a printable all-in-one page), found after
    /// each refresh: search leaves them out, so a passage is found on its most specific page.
    aggregates: std::sync::RwLock<Option<Arc<HashSet<String>>>>,
    /// How many passages there are and how many hold each term looked up, for telling
    /// common terms (see [`COMMON_SHARE`]); counting a common term's passages reads its
    /// whole posting list, so each is counted once per change of the index.
    passage_counts: std::sync::Mutex<PassageCounts>,
}

/// See [`Corpus::passage_counts`].
#[derive(Default)]
struct PassageCounts {
    total: Option<i64>,
    with_term: HashMap<String, i64>,
}

/// Terms whose passage count is kept at most (all are forgotten at the bound).
const COUNTED_TERMS: usize = 20_000;

/// Share of a file's passages that must stand word for word in other files for it to be an
/// aggregate of them...
const AGGREGATE_SHARE: f64 = 0.5;
/// ...and how many other files they must come from (a page quoted once by another is not).
const AGGREGATE_SOURCES: usize = 3;
/// A passage in more files than this is boilerplate (a footer, a licence), not a chapter's.
const BOILERPLATE_HOMES: usize = 20;

impl std::fmt::Debug for Corpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Corpus")
            .field("root", &self.root)
            .field("index", &self.index_path)
            .finish()
    }
}

fn index_err(path: &Path, e: impl std::fmt::Display) -> CorpusError {
    CorpusError::Index {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

impl Corpus {
    /// Opens (creating if needed) the index of `root` under `index_dir`. Does not refresh it.
    pub async fn open(root: &Path, index_dir: &Path) -> Result<Corpus, CorpusError> {
        let shown = root.display().to_string();
        let meta = std::fs::metadata(root).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => CorpusError::Missing(shown.clone()),
            _ => CorpusError::Unreadable {
                path: shown.clone(),
                reason: e.to_string(),
            },
        })?;
        if !meta.is_dir() {
            return Err(CorpusError::NotAFolder(shown));
        }
        let root = root.canonicalize().map_err(|e| CorpusError::Unreadable {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        std::fs::read_dir(&root).map_err(|e| CorpusError::Unreadable {
            path: shown,
            reason: e.to_string(),
        })?;
        let key = hex::encode(&Sha256::digest(root.to_string_lossy().as_bytes())[..8]);
        let index_path = index_dir.join(format!("corpus-{key}.sqlite"));
        std::fs::create_dir_all(index_dir).map_err(|e| index_err(index_dir, e))?;
        let opts = SqliteConnectOptions::new()
            .filename(&index_path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(30));
        let pool = SqlitePoolOptions::new()
            .max_connections(INDEX_CONNECTIONS)
            .max_lifetime(INDEX_CONNECTION_LIFETIME)
            // No ping before each use: on SQLite it is a hop to the connection's thread and
            // back for every query (a research run makes about forty here); a connection to a
            // local file does not go stale between uses.
            .test_before_acquire(false)
            .connect_with(opts)
            .await
            .map_err(|e| index_err(&index_path, e))?;
        let corpus = Corpus {
            root,
            index_path,
            db: fathom_pool::Kept::new(pool),
            parser: ContentParser::default(),
            aggregates: std::sync::RwLock::new(None),
            passage_counts: Default::default(),
        };
        corpus.migrate().await?;
        Ok(corpus)
    }

    /// Reads documents with `parser` (without one that reads PDFs, PDF files are skipped
    /// with that reason).
    pub fn with_parser(mut self, parser: ContentParser) -> Corpus {
        self.parser = parser;
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn index_path(&self) -> &Path {
        &self.index_path
    }

    /// Has each idle index connection let go of the pages it keeps (up to 2 MiB each,
    /// SQLite's default cache): for a process gone idle. Pages are read again when needed.
    pub async fn release_memory(&self) {
        // Each idle connection once: all are held at once, so none is taken twice; those in
        // use are left alone.
        let mut held = self.db.take_idle();
        let pool = self.db.direct();
        held.extend((0..pool.num_idle()).map_while(|_| pool.try_acquire()));
        for mut conn in held {
            let _ = sqlx::query("PRAGMA shrink_memory")
                .execute(&mut *conn)
                .await;
        }
    }

    async fn migrate(&self) -> Result<(), CorpusError> {
        let e = |e| index_err(&self.index_path, e);
        let version: Option<String> =
            sqlx::query_scalar("SELECT value FROM meta WHERE key = 'version'")
                .fetch_optional(&self.db)
                .await
                .ok()
                .flatten();
        if version.as_deref() != Some(INDEX_VERSION) {
            // An index from another format version is rebuilt: it is a cache of the folder.
            for stmt in [
                "DROP TABLE IF EXISTS passages",
                "DROP TABLE IF EXISTS files",
                "DROP TABLE IF EXISTS meta",
                "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
                "CREATE TABLE files (path TEXT PRIMARY KEY, size INTEGER NOT NULL, \
                 mtime_ns INTEGER NOT NULL, sha256 TEXT NOT NULL, title TEXT NOT NULL, \
                 kind TEXT NOT NULL, words INTEGER NOT NULL, error TEXT, parsed BLOB)",
                "CREATE VIRTUAL TABLE passages USING fts5(path UNINDEXED, title, heading, \
                 body, hash UNINDEXED, tokenize = 'porter unicode61 remove_diacritics 2')",
            ] {
                sqlx::query(stmt).execute(&self.db).await.map_err(e)?;
            }
            sqlx::query("INSERT INTO meta (key, value) VALUES ('version', ?)")
                .bind(INDEX_VERSION)
                .execute(&self.db)
                .await
                .map_err(e)?;
        }
        Ok(())
    }

    /// Brings the index up to date with the folder: new and changed files are parsed (in
    /// parallel), removed files dropped, the rest left alone. Fails only when the folder
    /// holds no readable document at all.
    pub async fn refresh(
        &self,
        progress: &(dyn Fn(usize, usize) + Send + Sync),
    ) -> Result<RefreshReport, CorpusError> {
        let started = Instant::now();
        let mut report = RefreshReport::default();
        let found = walk(&self.root, &mut report.skipped)?;
        let ie = |e| index_err(&self.index_path, e);
        // A file that failed to parse is remembered with its error, so an unchanged bad
        // file (a hostile PDF that takes its full time limit, say) is not parsed again.
        let known: BTreeMap<String, (i64, i64, Option<String>)> =
            sqlx::query("SELECT path, size, mtime_ns, error FROM files")
                .fetch_all(&self.db)
                .await
                .map_err(ie)?
                .into_iter()
                .map(|r| (r.get::<String, _>(0), (r.get(1), r.get(2), r.get(3))))
                .collect();
        let mut stale = Vec::new();
        for f in &found {
            match known.get(&f.rel) {
                Some((size, mtime, error)) if *size == f.size && *mtime == f.mtime_ns => {
                    match error {
                        Some(e) => report.skipped.push((f.rel.clone(), e.clone())),
                        None => report.unchanged += 1,
                    }
                }
                Some(_) => stale.push((f.clone(), false)),
                None => stale.push((f.clone(), true)),
            }
        }
        let present: HashSet<&str> = found.iter().map(|f| f.rel.as_str()).collect();
        let gone: Vec<&String> = known
            .keys()
            .filter(|k| !present.contains(k.as_str()))
            .collect();

        let parsed = self.parse_all(stale, progress).await;
        let mut tx = self
            .db
            .counted(self.db.direct().begin())
            .await
            .map_err(ie)?;
        for rel in &gone {
            delete_file(&mut tx, rel).await.map_err(ie)?;
            report.removed += 1;
        }
        for (file, is_new, outcome) in parsed {
            delete_file(&mut tx, &file.rel).await.map_err(ie)?;
            match outcome {
                Ok((sha, doc)) => {
                    insert_doc(&mut tx, &file, &sha, &doc).await.map_err(ie)?;
                    if is_new {
                        report.added += 1
                    } else {
                        report.updated += 1
                    }
                }
                Err(reason) => {
                    insert_failure(&mut tx, &file, &reason).await.map_err(ie)?;
                    report.skipped.push((file.rel.clone(), reason));
                }
            }
        }
        let changed = report.added + report.updated + report.removed > 0;
        if changed {
            // In the same transaction as the change, so no search ever reads a stale set.
            let found = find_aggregates(&mut tx).await.map_err(ie)?;
            sqlx::query("INSERT OR REPLACE INTO meta (key, value) VALUES ('aggregates', ?)")
                .bind(serde_json::to_string(&found).unwrap_or_else(|_| "[]".into()))
                .execute(&mut *tx)
                .await
                .map_err(ie)?;
        }
        tx.commit().await.map_err(ie)?;
        if changed {
            *self.aggregates.write().unwrap_or_else(|e| e.into_inner()) = None;
            *self.counts() = PassageCounts::default();
        }
        report.skipped.sort();
        report.indexed =
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM files WHERE error IS NULL")
                .fetch_one(&self.db)
                .await
                .map_err(ie)? as usize;
        report.elapsed_ms = started.elapsed().as_millis();
        if report.indexed == 0 {
            let detail = match report.skipped.first() {
                Some((p, why)) => format!(" ({} skipped; first: {p}: {why})", report.skipped.len()),
                None => String::new(),
            };
            return Err(CorpusError::NoReadableFiles {
                path: self.root.display().to_string(),
                detail,
            });
        }
        Ok(report)
    }

    async fn parse_all(
        &self,
        files: Vec<(FoundFile, bool)>,
        progress: &(dyn Fn(usize, usize) + Send + Sync),
    ) -> Vec<(FoundFile, bool, Result<(String, ParsedDoc), String>)> {
        let total = files.len();
        let workers = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        let root = Arc::new(self.root.clone());
        let mut set = tokio::task::JoinSet::new();
        let mut queue = files.into_iter();
        let mut out = Vec::with_capacity(total);
        loop {
            while set.len() < workers {
                let Some((file, is_new)) = queue.next() else {
                    break;
                };
                let (root, parser) = (root.clone(), self.parser.clone());
                set.spawn(async move {
                    let outcome = read_and_parse(&root, &file, &parser).await;
                    (file, is_new, outcome)
                });
            }
            match set.join_next().await {
                Some(Ok(item)) => {
                    out.push(item);
                    progress(out.len(), total);
                }
                // A parser panic is a bug in a dependency; the file is skipped, not the run.
                Some(Err(e)) => tracing::warn!(error = %e, "parser task failed"),
                None => break,
            }
        }
        out.sort_by(|a, b| a.0.rel.cmp(&b.0.rel));
        out
    }

    /// BM25 search over passages; one hit per document, best documents first. Passages that
    /// repeat word for word in several files (a printable all-in-one page, say) count once.
    pub async fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, CorpusError> {
        let mut seen_terms = HashSet::new();
        let terms: Vec<String> = words(query)
            .into_iter()
            .filter(|w| !fathom_parse::text::is_stopword(w) && seen_terms.insert(w.clone()))
            .take(32)
            .collect();
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let terms = self.without_common(terms).await?;
        let expr = terms
            .iter()
            .map(|t| fts_phrase(t))
            .collect::<Vec<_>>()
            .join(" OR ");
        // Ranking first, by score alone: reading a passage's stored columns (its path, its
        // hash) costs more than scoring it, so only the passages looked at are read, a few at
        // a time; snippets (a re-read and re-tokenizing) only for those kept.
        let wanted = (limit * 20).clamp(50, 2000);
        let ranked = self.ranked(&expr, wanted).await?;
        let aggregates = self.aggregates().await?;
        let mut kept: Vec<(i64, f64)> = Vec::new();
        let mut docs = HashSet::new();
        let mut passages = HashSet::new();
        let (mut next, mut looked) = (0, 0);
        'reading: while next < ranked.len() {
            // A batch ends where the score changes: passages of one score go by path.
            let mut end = (next + (4 * limit).max(16)).min(ranked.len());
            while end < ranked.len() && ranked[end].1 == ranked[end - 1].1 {
                end += 1;
            }
            let scores: HashMap<i64, f64> = ranked[next..end].iter().copied().collect();
            let ids =
                serde_json::to_string(&ranked[next..end].iter().map(|r| r.0).collect::<Vec<_>>())
                    .unwrap_or_else(|_| "[]".into());
            let mut batch: Vec<(i64, String, String)> = sqlx::query_as(
                "SELECT rowid, path, hash FROM passages \
                 WHERE rowid IN (SELECT value FROM json_each(?))",
            )
            .bind(ids)
            .fetch_all(&self.db)
            .await
            .map_err(|e| index_err(&self.index_path, e))?;
            batch.sort_by(|a, b| {
                scores[&a.0]
                    .total_cmp(&scores[&b.0])
                    .then_with(|| a.1.cmp(&b.1))
            });
            for (rowid, path, hash) in batch {
                looked += 1;
                if looked > wanted {
                    break 'reading;
                }
                if aggregates.contains(&path) || !passages.insert(hash) || !docs.insert(path) {
                    continue;
                }
                kept.push((rowid, -scores[&rowid]));
                if kept.len() == limit {
                    break 'reading;
                }
            }
            next = end;
        }
        // The snippets of the passages kept, in one statement.
        let ids = serde_json::to_string(&kept.iter().map(|(id, _)| *id).collect::<Vec<_>>())
            .unwrap_or_else(|_| "[]".into());
        let rows = sqlx::query(
            "SELECT passages.rowid, passages.path, files.title, passages.heading, \
             snippet(passages, 3, '', '', '…', 40) \
             FROM passages JOIN files ON files.path = passages.path \
             WHERE passages MATCH ? AND passages.rowid IN (SELECT value FROM json_each(?))",
        )
        .bind(&expr)
        .bind(ids)
        .fetch_all(&self.db)
        .await
        .map_err(|e| index_err(&self.index_path, e))?;
        let mut found: HashMap<i64, SqliteRow> = rows.into_iter().map(|r| (r.get(0), r)).collect();
        let mut hits = Vec::with_capacity(kept.len());
        for (rowid, score) in kept {
            let Some(r) = found.remove(&rowid) else {
                continue;
            };
            let path: String = r.get(1);
            hits.push(SearchHit {
                url: file_url(&self.root.join(&path)),
                title: r.get(2),
                heading: r.get(3),
                snippet: r.get(4),
                score,
            });
        }
        Ok(hits)
    }

    /// The passages matching `expr`, best first by BM25 score (rowid and score): the first
    /// `wanted`, and any after them with the same score as the last (a tie is read whole, for
    /// the caller to order by path).
    async fn ranked(&self, expr: &str, wanted: usize) -> Result<Vec<(i64, f64)>, CorpusError> {
        let mut take = wanted + 1;
        loop {
            // The count is part of the text, not a parameter: SQLite compiles a statement
            // again on each run when its LIMIT is bound.
            let mut rows: Vec<(i64, f64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT rowid, bm25(passages, 0.0, 1.0, 1.5, 1.0, 0.0) AS score \
                 FROM passages WHERE passages MATCH ? ORDER BY score LIMIT {take}"
            )))
            .bind(expr)
            .fetch_all(&self.db)
            .await
            .map_err(|e| index_err(&self.index_path, e))?;
            // Fewer than asked: every match is here.
            if rows.len() < take {
                return Ok(rows);
            }
            let tie = rows[wanted - 1].1;
            if rows[take - 1].1 != tie {
                rows.retain(|r| r.1 <= tie);
                return Ok(rows);
            }
            // The tie runs on past what was read: read further (at most up to every match).
            take *= 2;
        }
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, PassageCounts> {
        self.passage_counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// `terms` less those found in more than [`COMMON_SHARE`] of the passages ("rust" in a
    /// book about Rust), as long as one stays: they weigh next to nothing in the ranking, yet
    /// an OR query with one of them has to score nearly every passage.
    async fn without_common(&self, terms: Vec<String>) -> Result<Vec<String>, CorpusError> {
        if terms.len() < 2 {
            return Ok(terms);
        }
        let e = |e| index_err(&self.index_path, e);
        let known = self.counts().total;
        let total = match known {
            Some(n) => n,
            None => {
                let n: i64 = sqlx::query_scalar("SELECT count(*) FROM passages_docsize")
                    .fetch_one(&self.db)
                    .await
                    .map_err(e)?;
                self.counts().total = Some(n);
                n
            }
        };
        let mut kept = Vec::with_capacity(terms.len());
        let mut common = Vec::new();
        for t in terms {
            let known = self.counts().with_term.get(&t).copied();
            let n = match known {
                Some(n) => n,
                None => {
                    let n: i64 =
                        sqlx::query_scalar("SELECT count(*) FROM passages WHERE passages MATCH ?")
                            .bind(fts_phrase(&t))
                            .fetch_one(&self.db)
                            .await
                            .map_err(e)?;
                    let mut counts = self.counts();
                    if counts.with_term.len() >= COUNTED_TERMS {
                        counts.with_term.clear();
                    }
                    counts.with_term.insert(t.clone(), n);
                    n
                }
            };
            if n as f64 > COMMON_SHARE * total as f64 {
                common.push(t);
            } else {
                kept.push(t);
            }
        }
        Ok(if kept.is_empty() { common } else { kept })
    }

    /// The files that are aggregates of others (see [`AGGREGATE_SHARE`]): worked out by the
    /// refresh that changed the folder and kept in the index, so a run in a new process reads
    /// one row instead of every passage's hash; an index without the row (a folder with no
    /// change since) has them worked out here, in memory only.
    async fn aggregates(&self) -> Result<Arc<HashSet<String>>, CorpusError> {
        if let Some(known) = self
            .aggregates
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            return Ok(known.clone());
        }
        let e = |e| index_err(&self.index_path, e);
        let stored: Option<String> =
            sqlx::query_scalar("SELECT value FROM meta WHERE key = 'aggregates'")
                .fetch_optional(&self.db)
                .await
                .map_err(e)?;
        let found = match stored.and_then(|v| serde_json::from_str(&v).ok()) {
            Some(found) => found,
            None => {
                let mut conn = self.db.lend().await.map_err(e)?;
                let found = find_aggregates(conn.get()).await.map_err(e)?;
                conn.done();
                found
            }
        };
        let found = Arc::new(found);
        *self.aggregates.write().unwrap_or_else(|e| e.into_inner()) = Some(found.clone());
        Ok(found)
    }

    /// The parsed form of a document of this corpus, as the index parsed it, when the file
    /// still has the content `sha256` (hex of its bytes): reading it again needs no parse.
    pub async fn parsed(&self, url: &str, sha256: &str) -> Result<Option<ParsedDoc>, CorpusError> {
        let Some(rel) = url
            .strip_prefix("file://")
            .and_then(|p| Path::new(p).strip_prefix(&self.root).ok())
            .and_then(|p| p.to_str())
        else {
            return Ok(None);
        };
        let blob: Option<Option<Vec<u8>>> = sqlx::query_scalar(
            "SELECT parsed FROM files WHERE path = ? AND sha256 = ? AND error IS NULL",
        )
        .bind(rel)
        .bind(sha256)
        .fetch_optional(&self.db)
        .await
        .map_err(|e| index_err(&self.index_path, e))?;
        Ok(blob.flatten().and_then(|b| serde_json::from_slice(&b).ok()))
    }

    /// Reads a document of this corpus by its `file://` URL.
    pub async fn fetch(&self, url: &str) -> Result<Fetched, CorpusError> {
        let path = url
            .strip_prefix("file://")
            .ok_or_else(|| CorpusError::OutsideCorpus(url.to_string()))?;
        let fetch_err = |reason: String| CorpusError::Fetch {
            url: url.to_string(),
            reason,
        };
        // The file's checks and its bytes in one trip to the blocking pool (a run reads
        // several documents): resolving the path, its kind, its size, its bytes.
        let (root, path) = (self.root.clone(), PathBuf::from(path));
        let read = tokio::task::spawn_blocking(move || read_file(&root, &path))
            .await
            .map_err(|e| fetch_err(e.to_string()))?;
        let (kind, bytes) = match read {
            Ok(read) => read,
            Err(FileRefusal::Outside) => return Err(CorpusError::OutsideCorpus(url.to_string())),
            Err(FileRefusal::Unreadable(reason)) => return Err(fetch_err(reason)),
        };
        Ok(Fetched {
            url: url.to_string(),
            kind,
            bytes,
            charset: None,
        })
    }
}

/// Why a corpus file was not read.
enum FileRefusal {
    /// It resolves to a path outside the corpus folder.
    Outside,
    Unreadable(String),
}

/// A document of the corpus under `root` by its path: its kind and bytes.
fn read_file(root: &Path, path: &Path) -> Result<(DocKind, Vec<u8>), FileRefusal> {
    let unreadable = |e: std::io::Error| FileRefusal::Unreadable(e.to_string());
    let path = path.canonicalize().map_err(unreadable)?;
    if !path.starts_with(root) {
        return Err(FileRefusal::Outside);
    }
    let kind = DocKind::from_path(&path.to_string_lossy()).ok_or_else(|| {
        FileRefusal::Unreadable("not an HTML, Markdown, text, DOCX or PDF file".into())
    })?;
    let mut file = std::fs::File::open(&path).map_err(unreadable)?;
    let len = file.metadata().map_err(unreadable)?.len();
    if len > MAX_FILE_BYTES {
        return Err(FileRefusal::Unreadable(format!(
            "larger than {MAX_FILE_BYTES} bytes"
        )));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    std::io::Read::read_to_end(&mut file, &mut bytes).map_err(unreadable)?;
    Ok((kind, bytes))
}

/// The files that are aggregates of others (see [`AGGREGATE_SHARE`]), from the passages'
/// hashes.
async fn find_aggregates(conn: &mut SqliteConnection) -> Result<HashSet<String>, sqlx::Error> {
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT path, hash FROM passages")
        .fetch_all(&mut *conn)
        .await?;
    let mut homes: HashMap<&str, HashSet<&str>> = HashMap::new();
    for (path, hash) in &rows {
        homes.entry(hash).or_default().insert(path);
    }
    let mut per_file: HashMap<&str, (usize, usize, HashSet<&str>)> = HashMap::new();
    for (path, hash) in &rows {
        let entry = per_file.entry(path).or_default();
        entry.0 += 1;
        let holders = &homes[hash.as_str()];
        if holders.len() > 1 && holders.len() <= BOILERPLATE_HOMES {
            entry.1 += 1;
            entry
                .2
                .extend(holders.iter().copied().filter(|p| *p != path));
        }
    }
    // An aggregate is larger than each file it gathers from: copies of the same pages (two
    // versions of a manual side by side) gather nothing and all stay searchable.
    Ok(per_file
        .iter()
        .filter(|(_, (total, shared, from))| {
            *shared as f64 >= AGGREGATE_SHARE * *total as f64
                && from.len() >= AGGREGATE_SOURCES
                && from
                    .iter()
                    .all(|other| per_file.get(other).is_some_and(|o| o.0 < *total))
        })
        .map(|(path, _)| path.to_string())
        .collect())
}

/// A search term as an FTS5 phrase: quoted, so operators and punctuation in it are text.
fn fts_phrase(term: &str) -> String {
    format!("\"{}\"", term.replace('"', ""))
}

/// The `file://` URL of an absolute path.
pub fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

#[derive(Debug, Clone)]
struct FoundFile {
    rel: String,
    size: i64,
    mtime_ns: i64,
}

/// Lists readable documents under `root`, depth-first in name order, skipping hidden entries
/// and symlinks (which could lead outside the corpus or loop).
fn walk(root: &Path, skipped: &mut Vec<(String, String)>) -> Result<Vec<FoundFile>, CorpusError> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if dir == root => {
                return Err(CorpusError::Unreadable {
                    path: root.display().to_string(),
                    reason: e.to_string(),
                });
            }
            Err(e) => {
                skipped.push((rel_of(root, &dir), e.to_string()));
                continue;
            }
        };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries.into_iter().rev() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with('.') {
                continue;
            }
            let Ok(ft) = entry.file_type() else { continue };
            let path = entry.path();
            if ft.is_dir() {
                if depth + 1 < MAX_DEPTH {
                    stack.push((path, depth + 1));
                }
            } else if ft.is_file() && DocKind::from_path(&name).is_some() {
                let rel = rel_of(root, &path);
                match entry.metadata() {
                    Ok(m) if m.len() > MAX_FILE_BYTES => {
                        skipped.push((rel, format!("larger than {MAX_FILE_BYTES} bytes")))
                    }
                    Ok(m) => {
                        let mtime_ns = m
                            .modified()
                            .ok()
                            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                            .map(|d| d.as_nanos() as i64)
                            .unwrap_or(0);
                        out.push(FoundFile {
                            rel,
                            size: m.len() as i64,
                            mtime_ns,
                        });
                        if out.len() >= MAX_FILES {
                            skipped.push((
                                rel_of(root, &dir),
                                format!(
                                    "corpus has more than {MAX_FILES} files; the rest are left out"
                                ),
                            ));
                            return Ok(out);
                        }
                    }
                    Err(e) => skipped.push((rel, e.to_string())),
                }
            }
        }
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

fn rel_of(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .to_string()
}

async fn read_and_parse(
    root: &Path,
    file: &FoundFile,
    parser: &ContentParser,
) -> Result<(String, ParsedDoc), String> {
    let path = root.join(&file.rel);
    let bytes = tokio::fs::read(&path).await.map_err(|e| e.to_string())?;
    let sha = hex::encode(Sha256::digest(&bytes));
    let kind = DocKind::from_path(&file.rel).ok_or("unsupported file type")?;
    let doc = parser
        .parse(&file_url(&path), kind, bytes, None)
        .await
        .map_err(|e| e.to_string())?;
    Ok((sha, doc))
}

async fn delete_file(tx: &mut SqliteConnection, rel: &str) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM passages WHERE path = ?")
        .bind(rel)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM files WHERE path = ?")
        .bind(rel)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

async fn insert_failure(
    tx: &mut SqliteConnection,
    file: &FoundFile,
    reason: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO files (path, size, mtime_ns, sha256, title, kind, words, error) \
         VALUES (?, ?, ?, '', '', '', 0, ?)",
    )
    .bind(&file.rel)
    .bind(file.size)
    .bind(file.mtime_ns)
    .bind(reason)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

async fn insert_doc(
    tx: &mut SqliteConnection,
    file: &FoundFile,
    sha: &str,
    doc: &ParsedDoc,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO files (path, size, mtime_ns, sha256, title, kind, words, parsed) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(&file.rel)
    .bind(file.size)
    .bind(file.mtime_ns)
    .bind(sha)
    .bind(&doc.title)
    .bind(doc.kind.content_type())
    .bind(doc.words as i64)
    // The parsed form, so a run reading this file unchanged does not parse it again.
    .bind(serde_json::to_vec(doc).ok())
    .execute(&mut *tx)
    .await?;
    for (heading, body) in passages(doc) {
        let hash = hex::encode(&Sha256::digest(body.as_bytes())[..12]);
        sqlx::query(
            "INSERT INTO passages (path, title, heading, body, hash) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(&file.rel)
        .bind(&doc.title)
        .bind(&heading)
        .bind(&body)
        .bind(hash)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// Consecutive blocks under one heading (or on one page), cut into passages of about
/// `PASSAGE_CHARS`. A page's passages are headed "Page N", which search hits show.
fn passages(doc: &ParsedDoc) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for b in &doc.blocks {
        let heading = match b.page {
            Some(p) if b.heading.is_empty() => format!("Page {p}"),
            _ => b.heading.clone(),
        };
        match out.last_mut() {
            Some((h, body)) if *h == heading && body.len() + b.text.len() < PASSAGE_CHARS => {
                body.push('\n');
                body.push_str(&b.text);
            }
            _ => out.push((heading, b.text.clone())),
        }
    }
    out
}
