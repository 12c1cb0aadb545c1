//! `fathom sessions list` and `fathom sessions show ID`: saved research sessions.

use fathom_research::{Plan, Sessions};

use super::research::render_plan;
use crate::app::App;

pub async fn list(app: &App, limit: i64) -> anyhow::Result<()> {
    let store = app.connect().await?;
    let sessions = Sessions::new(store, &app.config.research)
        .list(limit)
        .await?;
    if sessions.is_empty() {
        eprintln!("no research sessions yet");
    }
    for s in sessions {
        println!(
            "{}  {:<17} {}",
            s["research_id"].as_str().unwrap_or("?"),
            s["status"].as_str().unwrap_or("?"),
            s["query"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

pub async fn show(app: &App, id: &str) -> anyhow::Result<()> {
    let store = app.connect().await?;
    let s = Sessions::new(store, &app.config.research).get(id).await?;
    println!("session   {id}");
    println!("question  {}", s["query"].as_str().unwrap_or(""));
    println!("status    {}", s["status"].as_str().unwrap_or(""));
    if let Ok(plan) = serde_json::from_value::<Plan>(s["plan"].clone()) {
        print!("{}", render_plan(&plan));
    }
    if let Some(sources) = s["sources"].as_array() {
        println!("sources:");
        for src in sources {
            println!(
                "  [{}] {} {}",
                src["status"].as_str().unwrap_or(""),
                src["title"].as_str().unwrap_or(""),
                src["url"].as_str().unwrap_or("")
            );
        }
    }
    if let Some(md) = s["report_markdown"].as_str().filter(|m| !m.is_empty()) {
        println!("\n{md}");
    }
    Ok(())
}
