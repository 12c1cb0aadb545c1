//! `fathom index DIR`: builds or refreshes a corpus index.

use std::path::Path;

use crate::app::App;

pub async fn index(app: &App, dir: &Path) -> anyhow::Result<()> {
    let corpus = app.open_corpus(dir, false).await?;
    println!("index {}", corpus.index_path().display());
    Ok(())
}
