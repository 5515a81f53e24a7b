//! Test helper for the browser tests (tests/browser): a scripted OpenAI-compatible server and a
//! scripted Forethought server on loopback, driven by JSON commands on stdin, one per line, each
//! answered by one JSON line on stdout. Kept out of the runtime crates.
//!
//! `scripted_server` prints `{"model_base_url": .., "forethought_base_url": ..}` first, then reads:
//! - `{"push": "<model>", "reply": {"text": .., "tool_calls": [{"name": .., "arguments": {..}}],
//!   "chunk_delay_ms": .., "first_byte_delay_ms": .., "usage": [in, out]}}` or
//!   `{"push": "<model>", "reply": {"status": 500, "message": ..}}`: queue a model reply;
//! - `{"push_forethought": {"text": .., "chunk_delay_ms": .., "first_byte_delay_ms": ..}}` (the
//!   older `response` shape, streamed), or `{"push_forethought": {"body": {..}}}` (a documented
//!   answer object: `widget_components`, ...);
//! - `{"forethought_requests": true}`: the requests the Forethought server received (method,
//!   path, body, and the status it refused one with);
//! - `{"requests": "<model>"}`: the request bodies the model server received for that model.
//!
//! It exits when stdin closes, so it never outlives its test.
//!
//! `scripted_server stored <store.redb> <user> <episode>` prints the stored messages of an
//! episode (role, agent, content, status) as a JSON array.

use std::sync::Arc;
use std::time::Duration;

use baton::model::scripted::{Reply, ScriptedServer};
use baton::store::embedded::EmbeddedStore;
use baton::store::{Conversations, EpisodeKey, SystemClock};
use baton_reference::support::scripted::{ForethoughtServer, FtReply};
use serde_json::{Value, json};

fn ms(spec: &Value, key: &str) -> Duration {
    Duration::from_millis(spec[key].as_u64().unwrap_or(0))
}

fn model_reply(spec: &Value) -> Result<Reply, String> {
    if let Some(status) = spec["status"].as_u64() {
        let status = u16::try_from(status).map_err(|e| e.to_string())?;
        return Ok(Reply::status(status, spec["message"].as_str().unwrap_or("scripted error")));
    }
    let mut reply = Reply::text(spec["text"].as_str().unwrap_or(""))
        .chunk_delay(ms(spec, "chunk_delay_ms"))
        .first_byte_delay(ms(spec, "first_byte_delay_ms"));
    for call in spec["tool_calls"].as_array().into_iter().flatten() {
        let name = call["name"].as_str().ok_or("a tool call needs a name")?;
        reply = reply.tool_call(name, call["arguments"].clone());
    }
    if let [Some(input), Some(output)] = [spec["usage"][0].as_u64(), spec["usage"][1].as_u64()] {
        reply = reply.usage(input, output);
    }
    Ok(reply.into())
}

fn forethought_reply(spec: &Value) -> FtReply {
    if let Some(body) = spec.get("body") {
        return FtReply::body(body.clone());
    }
    FtReply::text(spec["text"].as_str().unwrap_or(""))
        .chunk_delay(ms(spec, "chunk_delay_ms"))
        .first_byte_delay(ms(spec, "first_byte_delay_ms"))
        .into()
}

fn answer(command: &Value, models: &ScriptedServer, ft: &ForethoughtServer) -> Result<Value, String> {
    if let Some(model) = command["push"].as_str() {
        models.push(model, model_reply(&command["reply"])?);
    } else if command.get("push_forethought").is_some() {
        ft.push(forethought_reply(&command["push_forethought"]));
    } else if command.get("forethought_requests").is_some() {
        let requests: Vec<Value> = ft
            .requests()
            .into_iter()
            .map(|r| json!({"method": r.method, "path": r.path, "body": r.body, "refused": r.refused}))
            .collect();
        return Ok(json!({"ok": true, "requests": requests}));
    } else if let Some(model) = command["requests"].as_str() {
        let bodies: Vec<Value> = models.requests_for(model).into_iter().map(|r| r.body).collect();
        return Ok(json!({"ok": true, "requests": bodies}));
    } else {
        return Err(format!("unknown command: {command}"));
    }
    Ok(json!({"ok": true}))
}

async fn stored(path: &str, user: &str, episode: &str) -> Result<Value, String> {
    let store = EmbeddedStore::open(path, Arc::new(SystemClock)).map_err(|e| e.to_string())?;
    let key = EpisodeKey::new(user, episode).map_err(|e| e.to_string())?;
    let messages = store.recent_messages(&key, 1000).await.map_err(|e| e.to_string())?;
    Ok(messages
        .iter()
        .map(|m| {
            json!({"turn_id": m.turn_id, "role": m.role.as_str(), "agent": m.agent,
                   "content": m.content, "status": m.status})
        })
        .collect())
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [cmd, path, user, episode] = args.as_slice() {
        if cmd == "stored" {
            println!("{}", stored(path, user, episode).await?);
            return Ok(());
        }
    }
    let models = ScriptedServer::start().await.map_err(|e| e.to_string())?;
    let ft = ForethoughtServer::start().await.map_err(|e| e.to_string())?;
    println!("{}", json!({"model_base_url": models.base_url(), "forethought_base_url": ft.base_url()}));
    // The servers run on the runtime's workers; commands are read on a blocking thread.
    let commands = tokio::task::spawn_blocking(move || {
        for line in std::io::stdin().lines() {
            let reply = match line
                .map_err(|e| e.to_string())
                .and_then(|l| serde_json::from_str::<Value>(&l).map_err(|e| format!("not JSON: {e}")))
            {
                Ok(command) => {
                    answer(&command, &models, &ft).unwrap_or_else(|e| json!({"ok": false, "error": e}))
                }
                Err(e) => json!({"ok": false, "error": e}),
            };
            println!("{reply}");
        }
    });
    commands.await.map_err(|e| e.to_string())
}
