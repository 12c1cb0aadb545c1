//! `fathom sessions list` and `fathom sessions show ID`: saved research sessions.

use fathom_research::state::Decision;
use fathom_research::{Plan, Sessions};
use serde_json::Value;

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
        // A follow-up names the session it follows up.
        let parent = s["parent_id"]
            .as_str()
            .map_or(String::new(), |p| format!("  (follow-up of {p})"));
        println!(
            "{}  {:<17} {}{parent}",
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
    if let Some(parent) = s["parent_id"].as_str() {
        println!(
            "follows   {parent} ({})",
            s["parent_query"].as_str().unwrap_or("")
        );
    }
    if let Ok(plan) = serde_json::from_value::<Plan>(s["plan"].clone()) {
        print!("{}", render_plan(&plan));
    }
    // Who approved, rejected or cancelled, when, and on which plan.
    for d in s["decisions"].as_array().into_iter().flatten() {
        if let Ok(d) = serde_json::from_value::<Decision>(d.clone()) {
            println!("decision  {}", d.describe());
        }
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
            // Why a source was not read, or read only in part.
            if let Some(why) = src["error"].as_str() {
                println!("      why: {why}");
            }
            for part in src["unread"].as_array().into_iter().flatten() {
                println!("      not read: {}", part.as_str().unwrap_or(""));
            }
        }
    }
    for (channel, d) in s["delivery"].as_object().into_iter().flatten() {
        let to: Vec<&str> = d["to"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        println!(
            "delivery  {channel} to {}: {} after {} attempts{}",
            to.join(", "),
            d["status"].as_str().unwrap_or("?"),
            d["attempts"],
            d["reason"]
                .as_str()
                .map_or(String::new(), |r| format!(" ({r})"))
        );
    }
    for note in s["notes"].as_array().into_iter().flatten() {
        println!("note      {}", note.as_str().unwrap_or(""));
    }
    if let Some(md) = s["report_markdown"].as_str().filter(|m| !m.is_empty()) {
        println!("\n{md}");
    }
    Ok(())
}
