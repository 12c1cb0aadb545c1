//! A workflow's step graph as data: which step accepts which event, which step emits which,
//! and each event's role. The HTTP representation (`/workflows/{name}/representation`) and the
//! Mermaid diagram in the docs are both drawn from it, so a change to the graph shows up in
//! review as a changed snapshot.

use std::fmt::Write as _;

use crate::workflow::{ErasedWorkflow, EventRole};

/// The steps and events of one workflow, in the order they were declared.
#[derive(Debug, Clone, PartialEq)]
pub struct StepGraph {
    pub name: String,
    pub start: &'static str,
    /// (step, the event type it accepts). A step name may accept more than one type.
    pub steps: Vec<(&'static str, &'static str)>,
    /// (event type, its role).
    pub events: Vec<(&'static str, EventRole)>,
    /// (step, an event type it emits).
    pub emits: Vec<(&'static str, &'static str)>,
}

impl StepGraph {
    /// The graph of `wf`.
    pub fn of(wf: &dyn ErasedWorkflow) -> StepGraph {
        StepGraph {
            name: wf.name().to_string(),
            start: wf.start_type(),
            steps: wf.step_names(),
            events: wf.events().iter().map(|e| (e.event_type, e.role)).collect(),
            emits: wf.emits().to_vec(),
        }
    }

    /// The distinct step names, in the order first declared.
    pub fn step_names(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = Vec::new();
        for (step, _) in &self.steps {
            if !names.contains(step) {
                names.push(step);
            }
        }
        names
    }

    /// A Mermaid flowchart: events as rounded nodes (external events, waited for at a gate,
    /// as hexagons), steps as boxes, an arrow from each event to the step that accepts it and
    /// from each step to what it emits. Streamed events are left out: they go to readers of
    /// the run's stream, never to a step.
    pub fn mermaid(&self) -> String {
        let mut out = String::from("flowchart TD\n");
        for (ev, role) in &self.events {
            let shape = match role {
                EventRole::Streamed => continue,
                EventRole::External => format!("{{{{{ev}}}}}"),
                _ => format!("([{ev}])"),
            };
            let _ = writeln!(out, "    e_{ev}{shape}");
        }
        for step in self.step_names() {
            let _ = writeln!(out, "    s_{step}[{step}]");
        }
        for (step, accepts) in &self.steps {
            let _ = writeln!(out, "    e_{accepts} --> s_{step}");
        }
        for (step, emits) in &self.emits {
            let _ = writeln!(out, "    s_{step} --> e_{emits}");
        }
        out
    }
}
