//! The example as a team runs it: `serve` on a free port with its configuration and a model
//! script, one chat turn over HTTP, its own tool called with the model's arguments.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

#[test]
fn the_teams_own_tool_answers_a_turn_through_serve() {
    let dir = std::env::temp_dir().join(format!("own-tool-{}", std::process::id()));
    let here = env!("CARGO_MANIFEST_DIR");
    let mut child = Command::new(env!("CARGO_BIN_EXE_own-tool"))
        .env("BATON_CONFIG", format!("{here}/assistant.yaml"))
        .env("BATON_MODEL_SCRIPT", format!("{here}/assistant.script.yaml"))
        .env("BATON_STORE_PATH", dir.join("store.redb"))
        .env("BATON_ADDR", "127.0.0.1:0")
        .env_remove("OPENAI_API_KEY")
        .env_remove("AWS_LAMBDA_RUNTIME_API")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr =
        line.trim().strip_prefix("listening on http://").unwrap_or_else(|| panic!("{line:?}")).to_owned();

    let body = r#"{"message": "what are 100 euros in dollars?"}"#;
    let mut conn = TcpStream::connect(&addr).unwrap();
    write!(
        conn,
        "POST /chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nx-baton-user: team\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);

    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let result = answer.lines().find(|l| l.contains(r#""name":"convert_currency""#) && l.contains("result"));
    let result = result.unwrap_or_else(|| panic!("no convert_currency result in {answer}"));
    assert!(result.contains(r#""amount":108.0"#) && result.contains("USD"), "{result}");
    assert!(answer.contains("108 US dollars"), "{answer}");
    assert!(answer.contains("event: completed"), "{answer}");
}
