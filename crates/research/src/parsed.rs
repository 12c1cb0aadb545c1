//! A document read and parsed, as the run's events, its state and a follow-up name it: where
//! it came from and the stored artifact that holds its parsed form. Its own module because
//! the events, the plan's follow-up and the state all speak of it.

use serde::{Deserialize, Serialize};

/// A document read and parsed, stored as an artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ParsedRef {
    pub url: String,
    pub title: String,
    pub file_id: String,
}
