//! The wiring, in one place: the config loaded once, the store, the corpus, the parser, the
//! search and fetch tools, the models, and the research service built from them.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use fathom_corpus::Corpus;
use fathom_engine::{EngineConfig, RunTracer};
use fathom_parse::ContentParser;
use fathom_parse::pdf::{PdfLimits, PdfSandbox};
use fathom_research::agent::Models;
use fathom_research::tools::Tools;
use fathom_research::tools::web::web_tools;
use fathom_research::{Research, ResearchDeps};
use fathom_store::SqlStore;

use crate::commands::pdf_worker;
use crate::config::AppConfig;

/// How long [`App::close`] waits for connections still in use.
const STORE_CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What every command starts from.
pub struct App {
    pub config: AppConfig,
    /// `--database-url` or `DATABASE_URL`, else `storage.database_url`, else
    /// `.fathom/fathom.db`.
    pub database_url: String,
    /// Where corpus indexes are kept.
    pub index_dir: PathBuf,
    /// Renders this process's metrics, when it collects them (`serve`, `worker`).
    pub metrics: Option<Arc<dyn Fn() -> String + Send + Sync>>,
    /// Hangs runs' spans in one trace each, when traces are exported.
    pub tracer: Option<Arc<dyn RunTracer>>,
    /// The database, once a command has opened it; closed by [`App::close`].
    store: tokio::sync::OnceCell<Arc<SqlStore>>,
}

impl App {
    pub fn load(
        database_url: Option<String>,
        config: Option<&Path>,
        index_dir: PathBuf,
    ) -> anyhow::Result<App> {
        let config = AppConfig::load(config)?;
        let database_url = database_url
            .filter(|u| !u.trim().is_empty())
            .or_else(|| config.database_url.clone())
            .unwrap_or_else(|| ".fathom/fathom.db".into());
        Ok(App {
            config,
            database_url,
            index_dir,
            metrics: None,
            tracer: None,
            store: tokio::sync::OnceCell::new(),
        })
    }

    /// The engine's settings from the config, with this process's lease owner id.
    pub fn engine_config(&self, owner: String) -> EngineConfig {
        EngineConfig {
            owner,
            tracer: self.tracer.clone(),
            ..self.config.engine.clone()
        }
    }

    /// The database, opened on first use (migrated to this binary's schema).
    pub async fn connect(&self) -> anyhow::Result<Arc<SqlStore>> {
        let store = self
            .store
            .get_or_try_init(|| async {
                let store = SqlStore::connect(&self.database_url)
                    .await
                    .with_context(|| {
                        format!("cannot open database {}", shown_db(&self.database_url))
                    })?;
                anyhow::Ok(Arc::new(store))
            })
            .await?;
        Ok(store.clone())
    }

    /// Closes the database, if a command opened it, before the process exits. On SQLite the
    /// last connection to close folds the write-ahead log into the database file and removes
    /// it, so the `.db` file alone holds everything (to copy it, or to open it with a tool
    /// that cannot read the log). Bounded: a connection still out of the pool (a task the
    /// command left behind) does not hold up the exit.
    pub async fn close(&self) {
        if let Some(store) = self.store.get()
            && tokio::time::timeout(STORE_CLOSE_WAIT, store.close())
                .await
                .is_err()
        {
            tracing::warn!("the database did not close within {STORE_CLOSE_WAIT:?}; exiting");
        }
    }

    /// Opens the corpus in `dir` and brings its index up to date, reporting progress on stderr
    /// unless `quiet`.
    pub async fn open_corpus(&self, dir: &Path, quiet: bool) -> anyhow::Result<Arc<Corpus>> {
        let corpus = Corpus::open(dir, &self.index_dir)
            .await?
            .with_parser(content_parser(self.config.pdf));
        let tty = std::io::stderr().is_terminal();
        let progress = move |done: usize, total: usize| {
            if quiet || total < 20 {
                return;
            }
            if tty {
                eprint!("\rindexing {done}/{total} files");
                if done == total {
                    eprintln!();
                }
            } else if done == total || done.is_multiple_of(100) {
                eprintln!("indexing {done}/{total} files");
            }
        };
        let report = corpus.refresh(&progress).await?;
        if !quiet {
            eprintln!(
                "corpus: {} documents ({} new, {} changed, {} removed) in {} ms{}",
                report.indexed,
                report.added,
                report.updated,
                report.removed,
                report.elapsed_ms,
                if report.skipped.is_empty() {
                    String::new()
                } else {
                    format!("; {} files skipped", report.skipped.len())
                }
            );
            for (path, why) in report.skipped.iter().take(5) {
                eprintln!("  skipped {path}: {why}");
            }
        }
        Ok(Arc::new(corpus))
    }

    /// Research on `store` over `corpus`: `web_search` and `fetch_url` as the config's search
    /// and fetch sections say (the corpus serves its own file:// URLs either way), and the
    /// agent when the config or OPENAI_* name a model, else the offline planner and writer.
    pub fn research(
        &self,
        store: Arc<SqlStore>,
        corpus: Arc<Corpus>,
        engine: EngineConfig,
    ) -> anyhow::Result<Research> {
        let web = web_tools(&self.config.web, Some(corpus.clone())).map_err(|e| anyhow!(e))?;
        let models = match &self.config.agent {
            Some(roles) => Some(Models::from_roles(roles)?),
            None => None,
        };
        let deps = ResearchDeps {
            config: self.config.research.clone(),
            tools: Tools {
                search: web.search,
                local: Some(corpus),
                fetcher: web.fetcher,
                parser: content_parser(self.config.pdf),
                artifacts: store.clone(),
                docs: Default::default(),
                external: self
                    .config
                    .mcp
                    .clone()
                    .map(|m| m as Arc<dyn fathom_research::tools::ExternalTools>),
            },
            models,
            sessions: store.clone(),
            delivery: self.config.delivery.clone(),
        };
        Ok(Research::new(store, engine, deps))
    }
}

/// The database named for a person, without a password.
fn shown_db(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://…{}", &url[..s], &url[at..]),
        _ => url.to_string(),
    }
}

/// The parser every command uses: PDFs through this binary's worker. One per process, so
/// the corpus index and the runs share its bound on concurrent workers. Without a path to
/// this binary (which Linux always gives), PDFs are refused with that reason.
pub fn content_parser(limits: PdfLimits) -> ContentParser {
    static PARSER: std::sync::OnceLock<ContentParser> = std::sync::OnceLock::new();
    PARSER
        .get_or_init(|| match std::env::current_exe() {
            Ok(program) => ContentParser::new(Some(PdfSandbox {
                program,
                args: vec![pdf_worker::COMMAND.to_string()],
                limits,
            })),
            Err(e) => {
                tracing::warn!(error = %e, "cannot locate this program; PDFs will not be read");
                ContentParser::default()
            }
        })
        .clone()
}
