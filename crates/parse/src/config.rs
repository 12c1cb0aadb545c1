//! The `parse` section of Fathom's config file: the limits PDFs are read under, as written,
//! checked and turned into [`PdfLimits`].

use std::time::Duration;

use serde::Deserialize;

use crate::pdf::PdfLimits;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ParseSection {
    pub pdf_timeout_seconds: u64,
    pub pdf_memory_mib: u64,
    pub pdf_max_pages: u32,
}

impl Default for ParseSection {
    fn default() -> Self {
        let d = PdfLimits::default();
        ParseSection {
            pdf_timeout_seconds: d.timeout.as_secs(),
            pdf_memory_mib: d.memory_mib,
            pdf_max_pages: d.max_pages,
        }
    }
}

impl ParseSection {
    /// The PDF worker's limits, checked.
    pub fn pdf_limits(&self) -> Result<PdfLimits, String> {
        if self.pdf_timeout_seconds == 0 || self.pdf_memory_mib < 32 || self.pdf_max_pages == 0 {
            return Err(
                "parse: pdf_timeout_seconds and pdf_max_pages must be at least 1, pdf_memory_mib at least 32".into(),
            );
        }
        Ok(PdfLimits {
            timeout: Duration::from_secs(self.pdf_timeout_seconds),
            memory_mib: self.pdf_memory_mib,
            max_pages: self.pdf_max_pages,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn section(json: serde_json::Value) -> Result<PdfLimits, String> {
        let section: ParseSection = serde_json::from_value(json).map_err(|e| e.to_string())?;
        section.pdf_limits()
    }

    #[test]
    fn pdf_limits_are_read_and_checked() {
        assert_eq!(section(json!({})).unwrap(), PdfLimits::default());
        let limits = section(json!({"pdf_memory_mib": 256})).unwrap();
        assert_eq!(limits.memory_mib, 256);
        for (value, expected) in [
            (json!({"pdf_memory_mib": 8}), "pdf_memory_mib at least 32"),
            (
                json!({"pdf_timeout_seconds": "soon"}),
                "invalid type: string \"soon\"",
            ),
        ] {
            let err = section(value).unwrap_err();
            assert!(err.contains(expected), "{expected}: {err}");
        }
    }
}
