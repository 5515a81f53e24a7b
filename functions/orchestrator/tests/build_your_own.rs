//! The `orchestrator` commands of `docs/build-your-own.md`, run as the page writes them, from the
//! repository's root: each `cargo run -p orchestrator -- ARGS` line of its shell blocks (all but
//! `serve`, which does not end) runs this binary with ARGS and must succeed, printing what the
//! page says it prints. The suite the page runs with `routing-eval` is run by the eval crate's
//! tests (functions/eval/tests/routing_eval.rs); the deployment's parameters by tests/template.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The page's `cargo run -p orchestrator -- ...` lines, as argument lists (quotes kept together).
fn page_commands() -> Vec<Vec<String>> {
    let page = std::fs::read_to_string(root().join("docs/build-your-own.md")).unwrap();
    let mut commands = Vec::new();
    let mut in_shell = false;
    for line in page.lines() {
        if line.starts_with("```") {
            in_shell = line == "```sh";
            continue;
        }
        let Some(rest) = in_shell.then(|| line.strip_prefix("cargo run -p orchestrator -- ")).flatten()
        else {
            continue;
        };
        let rest = rest.split(" #").next().unwrap().trim();
        let mut args = Vec::new();
        for (i, part) in rest.split('"').enumerate() {
            if i % 2 == 1 {
                args.push(part.to_owned());
            } else {
                args.extend(part.split_whitespace().map(str::to_owned));
            }
        }
        commands.push(args);
    }
    commands
}

#[test]
fn the_pages_orchestrator_commands_run_as_written() {
    let commands = page_commands();
    assert!(commands.len() >= 4, "the page's commands: {commands:?}");
    let venv = std::env::var_os("BATON_TEST_VENV").map(PathBuf::from).unwrap_or_else(|| root().join(".venv"));
    // The travel team's MCP server is Python with the `mcp` package: the test venv has it.
    let path = std::env::join_paths(
        std::iter::once(venv.join("bin"))
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    let store = tempfile::tempdir().unwrap();
    let mut ran = Vec::new();
    for args in commands.into_iter().filter(|a| !a.iter().any(|a| a == "serve")) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
        for var in
            ["OPENAI_API_KEY", "OPENAI_BASE_URL", "FORETHOUGHT_API_TOKEN", "BATON_TABLE", "BATON_CONFIG"]
        {
            command.env_remove(var);
        }
        let out = command
            .current_dir(root())
            .env("PATH", &path)
            .env("BATON_STORE_PATH", store.path().join("store.redb"))
            .args(&args)
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(out.status.success(), "{args:?} failed:\n{stdout}\n{stderr}");
        if args.contains(&"check".to_owned()) {
            assert!(
                stdout.contains("concierge (entry)") && stdout.contains("agent__hotels"),
                "{args:?}: {stdout}"
            );
            if args.contains(&"--connect".to_owned()) {
                // Connected, the server's tools are listed by name.
                assert!(stdout.contains("mcp__hotels__book_hotel: mcp"), "{args:?}: {stdout}");
            }
        }
        if args.contains(&"chat".to_owned()) {
            assert!(stdout.contains("completed"), "{args:?}: {stdout}");
            assert!(
                !stdout.contains("Forethought") && !stderr.contains("Forethought"),
                "only the team's: {stdout}"
            );
        }
        ran.push(args.join(" "));
    }
    assert!(
        ran.iter().any(|c| c.contains("check --connect")) && ran.iter().any(|c| c.contains("chat")),
        "{ran:?}"
    );
}
