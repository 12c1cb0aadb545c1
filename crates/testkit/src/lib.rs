//! # fathom-testkit: what the tests share (a dev-dependency only, never shipped)
//!
//! Fresh test databases ([`db`]), a scripted OpenAI-compatible model server ([`llm`]) and the
//! models' side of a research run ([`agent`]), a search API with its pages on loopback
//! ([`web`]), documents ([`fixtures`]): the sample corpus, parsed documents, PDFs; hostile
//! documents ([`hostile`]): bombs, loops, endless nesting; the peak memory of a process tree
//! ([`memory`]); and a
//! WebDriver client for headless chromium ([`webdriver`]).

pub mod agent;
pub mod db;
pub mod fixtures;
pub mod hostile;
pub mod llm;
pub mod memory;
pub mod tcp;
pub mod web;
pub mod webdriver;

/// The config file Fathom ships, as text.
pub const CONFIG_JSON: &str = include_str!("../../../configs/config.json");

/// The research part of the shipped config.
pub fn research_config() -> fathom_research::ResearchConfig {
    let file: serde_json::Value = serde_json::from_str(CONFIG_JSON).expect("config is JSON");
    let research = &file["research"];
    let data = &file["agent_data"];
    fathom_research::ResearchConfig::new(
        data["deployment_name"].as_str().unwrap_or("_public"),
        data["research_collection"]
            .as_str()
            .unwrap_or("research-sessions"),
        research["defaults"]
            .as_object()
            .cloned()
            .unwrap_or_default(),
        research["settings_schema"].clone(),
    )
    .expect("the shipped config is valid")
}

/// Research dependencies as `fathom research` has them offline, without a model, wired as the
/// binary wires them: the local `corpus` searched and read, `fetch_url` through the safe web
/// fetcher that serves the corpus's own `file://` URLs, and `store` for artifacts and
/// sessions. One difference stays: the parser reads PDFs only where the `fathom` binary runs
/// its PDF worker (the CLI's tests), so here a PDF is refused with that reason.
pub fn offline_research_deps(
    corpus: std::sync::Arc<fathom_corpus::Corpus>,
    store: std::sync::Arc<fathom_store::SqlStore>,
) -> fathom_research::ResearchDeps {
    let web = fathom_research::tools::web::web_tools(
        &fathom_research::tools::web::WebConfig::default(),
        Some(corpus.clone()),
    )
    .expect("the corpus provider needs nothing but the corpus");
    fathom_research::ResearchDeps {
        config: research_config(),
        tools: fathom_research::tools::Tools {
            search: web.search,
            local: Some(corpus),
            fetcher: web.fetcher,
            parser: fathom_parse::ContentParser::default(),
            artifacts: store.clone(),
            docs: Default::default(),
            external: None,
        },
        models: None,
        sessions: store,
        delivery: Default::default(),
    }
}
