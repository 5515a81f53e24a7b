//! Remote agents reached without running them, for `orchestrator check --connect`: an A2A
//! agent's card is fetched (with its bearer token when it has one), an NDJSON endpoint answers
//! any HTTP request, and a Lambda function takes a `DryRun` invoke (it exists and this role may
//! invoke it). The first failure names the agent, where it was looked for, and why.

use std::time::Duration;

use baton::config::Config;
use baton::config::agents::{RemoteAuthKind, RemoteSpec};

/// How long each remote agent has to answer.
pub const REACH_TIMEOUT: Duration = Duration::from_secs(10);

/// Reaches every remote agent `config` declares, each within `timeout`: the first failure.
pub async fn reach_remote_agents(config: &Config, timeout: Duration) -> Result<(), String> {
    let client = reqwest::Client::builder().timeout(timeout).build().map_err(|e| e.to_string())?;
    let mut lambda = None;
    for spec in &config.agents.agents {
        let Some(remote) = &spec.remote else { continue };
        let failure = match remote {
            RemoteSpec { a2a: Some(url), .. } => a2a_card(&client, remote, url).await.err(),
            RemoteSpec { url: Some(url), .. } => client
                .get(url)
                .send()
                .await
                .err()
                .map(|e| format!("{url} could not be reached: {}", reason(&e))),
            RemoteSpec { function: Some(function), .. } => {
                if lambda.is_none() {
                    let shared = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
                    lambda = Some(crate::lambda_tool::client_of(&shared));
                }
                let client = lambda.as_ref().expect("set above");
                let reached = crate::lambda_tool::dry_run(client, function, timeout).await;
                reached.err().map(|failure| format!("Lambda function {function}: {failure}"))
            }
            _ => None,
        };
        if let Some(failure) = failure {
            return Err(format!("remote agent `{}`: {failure}", spec.name));
        }
    }
    Ok(())
}

/// Fetches an A2A agent's card: a 2xx answer, or a refusal a signed agent gives an unsigned
/// request (its calls are signed at run time).
async fn a2a_card(client: &reqwest::Client, remote: &RemoteSpec, url: &str) -> Result<(), String> {
    let url = url.trim_end_matches('/');
    let card = match url.ends_with(".json") {
        true => url.to_owned(),
        false => format!("{url}{}", baton::a2a::types::CARD_PATH),
    };
    let mut request = client.get(&card).header("accept", "application/json");
    if let Some(token) = remote.token_env.as_ref().and_then(|name| std::env::var(name).ok()) {
        request = request.bearer_auth(token);
    }
    let status = request
        .send()
        .await
        .map_err(|e| format!("its card at {card} could not be fetched: {}", reason(&e)))?;
    let status = status.status();
    let signed = remote.auth == Some(RemoteAuthKind::Sigv4);
    match status.as_u16() {
        200..=299 => Ok(()),
        401 | 403 if signed => Ok(()),
        401 | 403 => Err(format!("its card at {card} answered HTTP {status}: check its token (`token_env`)")),
        _ => Err(format!("its card at {card} answered HTTP {status}")),
    }
}

/// Why a request failed, in words: the connection refused, a timeout, or the client's own words.
fn reason(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        "no answer in time".to_owned()
    } else if error.is_connect() {
        "the connection was refused or the host is unknown".to_owned()
    } else {
        error.to_string()
    }
}
