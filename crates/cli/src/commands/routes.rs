//! `fathom routes`: how the coordinator routes a labelled set of questions (see
//! `tests/routing/README.md`): by the rules offline, or by the model when one is configured.
//! Prints each disagreement, the agreement overall and per form and language, and the
//! confusion matrix of labels against routes. A web search is taken as configured, as the
//! labels assume.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fathom_research::agent::Models;
use fathom_research::agent::coordinator::{read_route, route_request, route_system, rules_instead};
use fathom_research::route_eval::{Confusion, agreement_by, parse_labelled};
use fathom_research::rules::route::{Route, RoutedBy, by_rules};
use serde_json::json;

use crate::app::App;

#[derive(clap::Args)]
pub struct RoutesArgs {
    /// The labelled set: a .json array of {"question", "label", "form", "corpus", "language"}.
    #[arg(long)]
    questions: PathBuf,
    /// Route by the rules even when a model is configured.
    #[arg(long)]
    rules: bool,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
}

/// How long one routing call may take on a slow local model.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);

pub async fn routes(app: &App, args: RoutesArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.questions)
        .with_context(|| format!("cannot read {}", args.questions.display()))?;
    let set = parse_labelled(&text)
        .with_context(|| format!("{} is not a labelled routing set", args.questions.display()))?;
    let models = match (&app.config.agent, args.rules) {
        (Some(roles), false) => Some(Models::from_roles(roles)?),
        _ => None,
    };
    let router = if models.is_some() { "model" } else { "rules" };
    let started = Instant::now();
    let mut routed: Vec<Route> = Vec::with_capacity(set.len());
    for q in &set {
        let route = match &models {
            None => by_rules(&q.question, true),
            Some(models) => {
                let language = fathom_report::lang::detect(&q.question);
                let request = route_request(route_system(language), &q.question);
                let answer =
                    tokio::time::timeout(CALL_TIMEOUT, models.planner.chat(&request, &|_| {}))
                        .await;
                match answer {
                    Ok(Ok(response)) => read_route(response.json(), true)
                        .unwrap_or_else(|e| rules_instead(&q.question, true, &e)),
                    Ok(Err(e)) => rules_instead(&q.question, true, &e.to_string()),
                    Err(_) => rules_instead(&q.question, true, "the call timed out"),
                }
            }
        };
        routed.push(route);
    }
    let mut confusion = Confusion::default();
    for (q, r) in set.iter().zip(&routed) {
        confusion.add(q.label, r.mode);
    }
    let agreed = |i: usize| set[i].label == routed[i].mode;
    let by_form = agreement_by((0..set.len()).map(|i| (set[i].form.as_str(), agreed(i))));
    let by_language = agreement_by((0..set.len()).map(|i| (set[i].language.as_str(), agreed(i))));
    // With a model, a route by the rules is one whose model answer could not be used.
    let fell_back = match models {
        Some(_) => routed.iter().filter(|r| r.by == RoutedBy::Rules).count(),
        None => 0,
    };
    if args.json {
        let rows: Vec<_> = set
            .iter()
            .zip(&routed)
            .map(|(q, r)| {
                json!({"question": q.question, "label": q.label, "form": q.form,
                       "language": q.language, "routed": r.mode, "kind": r.kind,
                       "reason": r.reason, "by": r.by})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "router": router, "questions": rows, "agreement": confusion.agreement(),
                "agreed": confusion.agreed, "total": confusion.total,
                "confusion": confusion.counts, "by_form": by_form,
                "by_language": by_language, "fell_back_to_rules": fell_back,
                "elapsed_ms": started.elapsed().as_millis() as u64,
            }))?
        );
    } else {
        println!("router: {router}");
        for (q, r) in set.iter().zip(&routed) {
            if q.label != r.mode {
                println!(
                    "- {} [{} {}] labelled {}, routed {}: {}",
                    q.question,
                    q.form,
                    q.language,
                    q.label.as_str(),
                    r.mode.as_str(),
                    r.reason
                );
            }
        }
        let shares = |m: &std::collections::BTreeMap<String, (usize, usize)>| {
            m.iter()
                .map(|(k, (a, t))| format!("{k} {a}/{t}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!("by form: {}", shares(&by_form));
        println!("by language: {}", shares(&by_language));
        print!("{}", confusion.table());
        println!(
            "agreement: {}/{} ({:.1}%){}, {:.1} s",
            confusion.agreed,
            confusion.total,
            100.0 * confusion.agreement(),
            if fell_back > 0 {
                format!(", {fell_back} routed by the rules (the model's answer could not be used)")
            } else {
                String::new()
            },
            started.elapsed().as_secs_f64()
        );
    }
    Ok(ExitCode::SUCCESS)
}
