//! `fathom routes`: how the coordinator routes a labelled set of questions (see
//! `tests/routing/README.md`): by the rules offline; with a model configured, as a run routes
//! (the rules where they read the question's form, the model about the rest), or by the model
//! alone (`--model-only`).
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
use fathom_research::rules::route::{Route, by_rules, by_rules_when_sure};
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
    /// Ask the model about every question, also those whose form the rules read for sure (a
    /// run asks it only about the rest): a measure of the model's own reading.
    #[arg(long, conflicts_with = "rules")]
    model_only: bool,
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
    let router = match (&models, args.model_only) {
        (None, _) => "rules",
        (Some(_), true) => "model alone",
        (Some(_), false) => "rules, then the model where they cannot read the form",
    };
    let started = Instant::now();
    let mut routed: Vec<Route> = Vec::with_capacity(set.len());
    // Questions the model was asked about, and those its answer could not be used for.
    let (mut asked, mut fell_back) = (0usize, 0usize);
    for q in &set {
        let sure = by_rules_when_sure(&q.question, true).filter(|_| !args.model_only);
        let route = match (&models, sure) {
            (None, _) => by_rules(&q.question, true),
            // As a run does: the model is asked only where the rules cannot read the form.
            (Some(_), Some(route)) => route,
            (Some(models), None) => {
                asked += 1;
                let language = fathom_report::lang::detect(&q.question);
                let request = route_request(route_system(language), &q.question);
                let answer =
                    tokio::time::timeout(CALL_TIMEOUT, models.planner.chat(&request, &|_| {}))
                        .await;
                let read = match answer {
                    Ok(Ok(response)) => read_route(response.json(), true),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err("the call timed out".to_string()),
                };
                read.unwrap_or_else(|problem| {
                    fell_back += 1;
                    rules_instead(&q.question, true, &problem)
                })
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
                "model_asked": asked,
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
            "agreement: {}/{} ({:.1}%){}{}, {:.1} s",
            confusion.agreed,
            confusion.total,
            100.0 * confusion.agreement(),
            if models.is_some() {
                format!(", the model asked about {asked}")
            } else {
                String::new()
            },
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
