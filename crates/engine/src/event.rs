//! Typed events and the wire envelope they travel in.
//!
//! Every event a workflow sends between steps, writes to the stream or receives from outside is
//! a plain serde type implementing [`Event`]. On the stream it is wrapped in an [`Envelope`] with
//! the field names of the LlamaIndex workflows server (`value`, `qualified_name`, `type`, `types`).

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::Value;

/// A typed workflow event.
///
/// `TYPE` is the class name clients see and route on; `TYPES` lists the parent classes a client
/// may classify it by (for example `["StopEvent"]` for a result event).
pub trait Event:
    Serialize + DeserializeOwned + schemars::JsonSchema + Send + Sync + 'static
{
    const TYPE: &'static str;
    const QUALIFIED_NAME: &'static str = Self::TYPE;
    const TYPES: Option<&'static [&'static str]> = None;

    /// The JSON Schema of the event's `value`, titled with its type name, as served by the
    /// workflows API (`/workflows/{name}/schema` and `/events`).
    fn value_schema() -> Value {
        let mut schema = schemars::SchemaGenerator::default().into_root_schema_for::<Self>();
        schema.insert("title".into(), Value::String(Self::TYPE.to_string()));
        schema.to_value()
    }
}

/// Implements [`Event`] for a type: `impl_event!(Ty, "Name")`,
/// `impl_event!(Ty, "Name", qualified = "pkg.Name", types = ["StopEvent"])`.
#[macro_export]
macro_rules! impl_event {
    ($ty:ty, $name:literal) => {
        impl $crate::Event for $ty {
            const TYPE: &'static str = $name;
        }
    };
    ($ty:ty, $name:literal, qualified = $q:literal) => {
        impl $crate::Event for $ty {
            const TYPE: &'static str = $name;
            const QUALIFIED_NAME: &'static str = $q;
        }
    };
    ($ty:ty, $name:literal, qualified = $q:literal, types = [$($t:literal),*]) => {
        impl $crate::Event for $ty {
            const TYPE: &'static str = $name;
            const QUALIFIED_NAME: &'static str = $q;
            const TYPES: Option<&'static [&'static str]> = Some(&[$($t),*]);
        }
    };
}

/// The read form of an event as streamed and stored: `{"value", "qualified_name", "type", "types"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Envelope {
    pub value: Value,
    pub qualified_name: Option<String>,
    #[serde(rename = "type")]
    pub event_type: String,
    pub types: Option<Vec<String>>,
}

impl Envelope {
    pub fn of<E: Event>(event: &E) -> Result<Self, serde_json::Error> {
        Ok(Envelope {
            value: serde_json::to_value(event)?,
            qualified_name: Some(E::QUALIFIED_NAME.to_string()),
            event_type: E::TYPE.to_string(),
            types: E::TYPES.map(|t| t.iter().map(|s| s.to_string()).collect()),
        })
    }

    /// True for the event that ends a run's stream: a `StopEvent` or one of its subclasses.
    pub fn is_stop(&self) -> bool {
        self.event_type == StopEvent::TYPE
            || self
                .types
                .as_ref()
                .is_some_and(|t| t.iter().any(|s| s == StopEvent::TYPE))
    }

    pub fn decode<E: Event>(&self) -> Result<E, serde_json::Error> {
        serde_json::from_value(self.value.clone())
    }
}

/// The base stop event: `{"result": ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StopEvent {
    pub result: Value,
}
impl_event!(
    StopEvent,
    "StopEvent",
    qualified = "workflows.events.StopEvent"
);

/// Streamed when a run is cancelled.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkflowCancelledEvent {}
impl_event!(
    WorkflowCancelledEvent,
    "WorkflowCancelledEvent",
    qualified = "workflows.events.WorkflowCancelledEvent",
    types = ["StopEvent"]
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExceptionInfo {
    pub exception_type: String,
    pub exception_message: String,
}

/// Streamed when a step fails after its last retry, or the run cannot continue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkflowFailedEvent {
    pub step_name: String,
    pub exception: ExceptionInfo,
    pub attempts: u32,
    pub elapsed_seconds: f64,
}
impl_event!(
    WorkflowFailedEvent,
    "WorkflowFailedEvent",
    qualified = "workflows.events.WorkflowFailedEvent",
    types = ["StopEvent"]
);

/// Streamed when the run's global deadline passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkflowTimedOutEvent {
    pub timeout: f64,
    pub active_steps: Vec<String>,
}
impl_event!(
    WorkflowTimedOutEvent,
    "WorkflowTimedOutEvent",
    qualified = "workflows.events.WorkflowTimedOutEvent",
    types = ["StopEvent"]
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_subclasses_are_recognised_by_types() {
        let failed = Envelope::of(&WorkflowFailedEvent {
            step_name: "s".into(),
            exception: ExceptionInfo {
                exception_type: "StepError".into(),
                exception_message: "kaboom".into(),
            },
            attempts: 1,
            elapsed_seconds: 0.0,
        })
        .unwrap();
        assert!(failed.is_stop());
        assert_eq!(
            failed.types.as_deref(),
            Some(&["StopEvent".to_string()][..])
        );
        let json = serde_json::to_value(&failed).unwrap();
        assert_eq!(json["type"], "WorkflowFailedEvent");
        assert_eq!(json["value"]["exception"]["exception_message"], "kaboom");

        let stop = Envelope::of(&StopEvent {
            result: Value::from(3),
        })
        .unwrap();
        assert!(stop.is_stop());
        assert_eq!(serde_json::to_value(&stop).unwrap()["types"], Value::Null);
    }
}
