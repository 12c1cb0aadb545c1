//! What the workflow decides without a model: how a question is answered ([`route`]: simple,
//! web or deep, by its form) and the plan that answers it ([`plan`]: sub-questions and the
//! sources each searches). With a model, [`crate::agent`] decides these instead and falls back
//! to these rules when it cannot.

pub mod plan;
pub mod route;
