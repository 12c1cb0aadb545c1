//! # fathom-report: a cited report, written and measured without a model
//!
//! - [`report`]: the living report, its citations bound to sources read, and the bounded
//!   `update_report` changes that grow it.
//! - [`question`]: what a question asks for (definition, mechanism, reasons, comparison).
//! - [`writer`]: the extractive writer: each section's sentences chosen from the documents
//!   read, and packed into bounded changes.
//! - [`eval`]: how trustworthy and complete a finished report is (citations, key facts).
//!
//! Pure functions over parsed documents: the research workflow calls them; they know
//! nothing of runs, journals or models.

pub mod eval;
pub mod lang;
pub mod question;
pub mod report;
pub mod writer;
