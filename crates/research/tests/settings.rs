//! Per-run settings: the shipped defaults validate, overrides apply, every bad field is
//! named, and the schema's `$ref`s resolve locally only.

use fathom_research::settings::resolve_refs;
use fathom_testkit::research_config;
use serde_json::json;

#[test]
fn embedded_defaults_validate() {
    let s = research_config().settings(None).unwrap();
    assert!(s.require_approval);
    assert!(s.max_sources > 0);
}

#[test]
fn overrides_apply_and_each_bad_field_is_named() {
    let c = research_config();
    let s = c.settings(Some(&json!({"max_sources": 3}))).unwrap();
    assert_eq!(s.max_sources, 3);
    let err = c
        .settings(Some(
            &json!({"max_sources": 0, "require_approval": "yes", "bogus": 1}),
        ))
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("max_sources"), "{text}");
    assert!(text.contains("require_approval"), "{text}");
    assert!(text.contains("bogus"), "{text}");
}

#[test]
fn refs_resolve_locally_and_remote_refs_are_refused() {
    let resolved = research_config().resolved_schema;
    assert!(!resolved.to_string().contains("$ref"));
    let remote = json!({"properties": {"a": {"$ref": "https://example.com/s.json"}}});
    assert!(resolve_refs(&remote).unwrap_err().contains("remote"));
    let cyclic =
        json!({"$defs": {"a": {"$ref": "#/$defs/a"}}, "properties": {"x": {"$ref": "#/$defs/a"}}});
    assert!(resolve_refs(&cyclic).is_err());
}
