//! What a person sees while a run goes on: one line per step of progress on stderr, or the
//! stream as JSON lines on stdout with `--events`.

use std::io::Write;
use std::sync::Arc;

use fathom_engine::{Engine, Envelope};
use tokio::sync::Notify;

/// A line for a person: stdout normally, stderr when stdout carries the event stream.
pub fn say(events: bool, line: &str) {
    if events {
        eprintln!("{line}");
    } else {
        println!("{line}");
        let _ = std::io::stdout().flush();
    }
}

/// Prints run `id`'s stream from the start as it is committed, until `stop` is notified;
/// then prints what was committed and not yet shown.
pub async fn follow(engine: Arc<Engine>, id: String, events: bool, stop: Arc<Notify>) {
    let mut follower = engine.follow(&id, -1);
    // Bounded by the run's stream; each pass shows one event.
    loop {
        tokio::select! {
            biased;
            _ = stop.notified() => break,
            next = follower.next() => match next {
                Ok(Some(ev)) => show_event(&ev.envelope, events),
                Ok(None) => break,
                Err(e) => {
                    eprintln!("fathom: cannot read events: {e}");
                    return;
                }
            },
        }
    }
    match follower.drain().await {
        Ok(rest) => rest.iter().for_each(|ev| show_event(&ev.envelope, events)),
        Err(e) => eprintln!("fathom: cannot read events: {e}"),
    }
}

fn show_event(env: &Envelope, events: bool) {
    if events {
        if let Ok(line) = serde_json::to_string(env) {
            println!("{line}");
        }
        return;
    }
    let v = &env.value;
    match env.event_type.as_str() {
        "ToolCallResult" => {}
        // The agent: who starts on what, and what each reflection decided.
        "AgentInput" => {
            let who = v["current_agent_name"].as_str().unwrap_or("");
            let said = v["input"][0]["blocks"][0]["text"].as_str().unwrap_or("");
            // A model asked again: its answer looped, came back empty or was cut off.
            if let Some(why) = said.strip_prefix("Your answer ") {
                let why = why.split(". Answer again").next().unwrap_or(why);
                eprintln!("  {who}: the answer {why}; asked again");
                return;
            }
            if let Some(task) = who
                .starts_with("researcher-")
                .then(|| v["input"][0]["blocks"][0]["text"].as_str())
                .flatten()
                .and_then(|t| t.rsplit("Your task: ").next())
            {
                eprintln!("  {who} on \"{task}\"");
            }
            return;
        }
        "AgentOutput" if v["current_agent_name"] == "reflection" => {
            let r = &v["structured_response"];
            if let Some(decision) = r["decision"].as_str() {
                eprintln!(
                    "  reflection: {decision} ({})",
                    r["reason"].as_str().unwrap_or("")
                );
            }
            return;
        }
        _ => return,
    }
    let tool = v["tool_name"].as_str().unwrap_or("");
    let out = &v["tool_output"];
    let text = out["blocks"][0]["text"].as_str().unwrap_or("");
    if out["is_error"].as_bool() == Some(true) {
        eprintln!("  {tool} failed: {text}");
        return;
    }
    match tool {
        "web_search" => eprintln!(
            "  searched \"{}\": {} results{}",
            v["tool_kwargs"]["query"].as_str().unwrap_or(""),
            out["raw_output"]["hits"].as_array().map_or(0, Vec::len),
            // Part of the search failed (the web, say) while the rest answered.
            out["raw_output"]["missing"]
                .as_str()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        ),
        // The agent's fetch_url reads (fetch and parse in one call) and names the title.
        "parse_content" | "fetch_url" if out["raw_output"]["title"].is_string() => eprintln!(
            "  read \"{}\"",
            out["raw_output"]["title"].as_str().unwrap_or("")
        ),
        "update_report" => eprintln!("  wrote {}", text.trim_start_matches("Updated ")),
        _ => {}
    }
}
