//! `orchestrator check` and a team's own deployment, as a team runs them: the binary offline, a
//! team's file in a temporary directory (and its store beside it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn orchestrator(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
    for var in [
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "FORETHOUGHT_API_TOKEN",
        "FORETHOUGHT_BASE_URL",
        "BATON_TABLE",
        "BATON_CONFIG",
    ] {
        c.env_remove(var);
    }
    c.env("BATON_STORE_PATH", dir.join("store.redb"));
    c
}

/// Writes `yaml` as the team's file in `dir`.
fn team_file(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("team.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A team with its own agents, one of which calls a tool that needs approval on its arguments.
const TEAM: &str = "\
entry: concierge
agents:
  - name: concierge
    instruction: Hand bookings to the booker.
    agents: [booker]
  - name: booker
    description: Books hotels.
    instruction: Book.
    model: gpt-4.1
    tools: [mcp__files__*]
    mcp_servers:
      files:
        url: http://127.0.0.1:PORT/mcp
prices:
  models:
    gpt-4.1: {input: 2, output: 8}
";

/// A loopback port nothing listens on (bound, then released): a connection is refused.
fn refused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn check_prints_the_tree_of_a_good_config_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let file = team_file(dir.path(), &TEAM.replace("PORT", "1"));
    let out = orchestrator(dir.path()).arg("--config").arg(&file).arg("check").output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stdout,
        "concierge (entry): llm, model offline at $0 in, $0 out per million tokens\n  \
         agent__booker: agent\n\
         booker: llm, model offline at $0 in, $0 out per million tokens\n  \
         mcp__files__*: mcp (its tools are listed with --connect)\n"
    );
    // With a model server, each agent's own model and its price from the table.
    let out = orchestrator(dir.path())
        .arg("--config")
        .arg(&file)
        .arg("check")
        .env("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
        .env("BATON_ORCHESTRATOR_MODEL", "house-model")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.starts_with(
            "concierge (entry): llm, model house-model with no price for `house-model` (its cost is not counted)\n"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("booker: llm, model gpt-4.1 at $2 in, $8 out per million tokens\n"), "{stdout}");
}

#[test]
fn check_names_the_file_line_and_field_of_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = team_file(dir.path(), &TEAM.replace("PORT", "1").replace("[booker]", "[bookr]"));
    let out = orchestrator(dir.path()).arg("--config").arg(&file).arg("check").output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_ne!(out.status.code(), Some(0));
    assert!(stdout.is_empty(), "no tree: {stdout}");
    let expected = format!(
        "error: configuration file {}: line 5: agents[0] (`concierge`).agents: unknown agent `bookr`",
        file.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
}

#[test]
fn check_connect_names_the_mcp_server_it_cannot_reach() {
    let dir = tempfile::tempdir().unwrap();
    let file = team_file(dir.path(), &TEAM.replace("PORT", &refused_port().to_string()));
    let out =
        orchestrator(dir.path()).arg("--config").arg(&file).args(["check", "--connect"]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.is_empty(), "no tree: {stdout}");
    let error = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(error.contains("MCP server `files`"), "{error}");
    // Without --connect the same file passes: nothing is reached.
    let out = orchestrator(dir.path()).arg("--config").arg(&file).arg("check").output().unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
}

#[test]
fn check_shows_kinds_and_approval_rules_of_a_file_that_extends_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let approvals = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/approvals.yaml");
    let out = orchestrator(dir.path()).args(["--config", approvals, "check"]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains(
            "card_keeper: llm, model offline at $0 in, $0 out per million tokens\n  clip_offer: native, \
             needs approval (Clipping an offer changes the user's card.)\n"
        ),
        "{stdout}"
    );
    // No file: the reference deployment, its routing tools and its built-in support agent.
    let out = orchestrator(dir.path()).arg("check").output().unwrap();
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("  ask_support: agent\n")
            && stdout.contains("support: support (built by the deployment)\n")
    );
}

#[test]
fn a_teams_file_runs_only_what_it_declares() {
    let dir = tempfile::tempdir().unwrap();
    let own = "entry: lead\nagents:\n  - name: lead\n    instruction: Lead.\n    tools: [search_offers]\n";
    let file = team_file(dir.path(), own);
    let out = orchestrator(dir.path()).arg("--config").arg(&file).args(["chat", "hi"]).output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("line 5: agents[0] (`lead`).tools: unknown tool `search_offers`; available: none"),
        "the reference tools are not the team's: {stderr}"
    );

    let file = team_file(dir.path(), "entry: lead\nagents:\n  - name: lead\n    instruction: Lead.\n");
    let out = orchestrator(dir.path()).arg("--config").arg(&file).args(["chat", "hi"]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.starts_with("model: offline") && !stderr.contains("support:"), "{stderr}");
    assert!(!stderr.contains("FORETHOUGHT"), "{stderr}");
    assert!(stdout.contains("✓ completed: Ok"), "{stdout}");

    // Its --help names none of the reference's agents or settings; with no file they are there.
    let help =
        orchestrator(dir.path()).arg("--config").arg(&file).args(["serve", "--help"]).output().unwrap();
    let (help, _) = text(&help);
    assert!(help.contains("--config") && !help.to_lowercase().contains("shopping"), "{help}");
    assert!(!help.to_lowercase().contains("forethought"), "{help}");
    let mut chat = orchestrator(dir.path());
    let out = chat.env("BATON_CONFIG", &file).args(["chat", "--shopping-model", "x", "hi"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "not a flag of a team's deployment");
    let help = orchestrator(dir.path()).args(["serve", "--help"]).output().unwrap();
    assert!(text(&help).0.contains("--forethought-token"));
}

#[test]
fn check_connect_reaches_each_lambda_tool_without_running_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = team_file(
        dir.path(),
        "agents:\n  - name: desk\n    instruction: Rent cars.\n    tools: [book_car]\nlambda_tools:\n  book_car:\n    \
         function: book-car\n    description: Books a rental car.\n    parameters: {type: object}\n",
    );
    let unreachable = format!("http://127.0.0.1:{}", refused_port());
    let run = |connect: bool| {
        let mut command = orchestrator(dir.path());
        command
            .env("AWS_ENDPOINT_URL_LAMBDA", &unreachable)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .arg("--config")
            .arg(&file)
            .arg("check");
        if connect {
            command.arg("--connect");
        }
        command.output().unwrap()
    };
    let out = run(true);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let error = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(error.contains("Lambda tool `book_car` (function book-car)"), "{error}");
    assert!(!error.contains(&unreachable), "no endpoint address: {error}");
    let out = run(false);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("  book_car: lambda\n"), "{stdout}");
}

#[test]
fn check_without_connect_knows_an_openapi_files_operations_and_refuses_others() {
    let dir = tempfile::tempdir().unwrap();
    let petstore = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/openapi/petstore.yaml");
    let yaml = format!(
        "agents:\n  - name: clerk\n    instruction: Mind the store.\n    tools: [getPetById, getInventory]\n\
         openapi:\n  petstore:\n    document: {petstore}\n    base_url: http://127.0.0.1:1\n"
    );
    let file = team_file(dir.path(), &yaml);
    let out = orchestrator(dir.path()).arg("--config").arg(&file).arg("check").output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("  getPetById: openapi\n  getInventory: openapi\n"), "{stdout}");
    let file = team_file(dir.path(), &yaml.replace("getInventory]", "getInventry]"));
    let out = orchestrator(dir.path()).arg("--config").arg(&file).arg("check").output().unwrap();
    let (_, stderr) = text(&out);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr.contains("unknown tool `getInventry`") && stderr.contains("getInventory"), "{stderr}");
}

/// A team whose concierge hands work to a remote A2A agent and a remote NDJSON agent.
fn remote_team(a2a_port: u16, ndjson_port: u16) -> String {
    format!(
        "\
entry: concierge
agents:
  - name: concierge
    instruction: Ask the others.
    agents: [far, near]
  - name: far
    description: A remote A2A agent.
    remote: {{a2a: \"http://127.0.0.1:{a2a_port}\"}}
  - name: near
    description: A remote NDJSON agent.
    instruction: Answer what you are asked.
    remote: {{url: \"http://127.0.0.1:{ndjson_port}/agent\"}}
"
    )
}

/// A loopback HTTP server answering every request `status` with `{{}}`, on a thread of its own;
/// the paths it was asked for come back through the returned channel.
fn answering(status: &'static str) -> (u16, std::sync::mpsc::Receiver<String>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (asked, paths) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut line = String::new();
            let mut reader = BufReader::new(&stream);
            let _ = reader.read_line(&mut line);
            let _ = asked.send(line.split_whitespace().nth(1).unwrap_or_default().to_owned());
            let _ = (&stream).write_all(
                format!("HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}").as_bytes(),
            );
        }
    });
    (port, paths)
}

#[test]
fn check_connect_reaches_each_remote_agent_and_names_the_one_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let (a2a, a2a_paths) = answering("200 OK");
    let (ndjson, _) = answering("405 Method Not Allowed");
    let file = team_file(dir.path(), &remote_team(a2a, ndjson));
    let out =
        orchestrator(dir.path()).arg("--config").arg(&file).args(["check", "--connect"]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(a2a_paths.try_recv().unwrap(), "/.well-known/agent-card.json", "the card was fetched");

    let file = team_file(dir.path(), &remote_team(refused_port(), ndjson));
    let out =
        orchestrator(dir.path()).arg("--config").arg(&file).args(["check", "--connect"]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let error = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(error.contains("remote agent `far`") && error.contains("agent-card.json"), "{error}");

    let (missing, _) = answering("404 Not Found");
    let file = team_file(dir.path(), &remote_team(missing, refused_port()));
    let out =
        orchestrator(dir.path()).arg("--config").arg(&file).args(["check", "--connect"]).output().unwrap();
    let error = text(&out).1;
    assert!(error.contains("remote agent `far`") && error.contains("HTTP 404"), "{error}");
}
