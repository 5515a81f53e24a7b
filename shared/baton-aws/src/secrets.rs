//! Secrets by reference: the template passes Secrets Manager ARNs, never the values; each function
//! resolves them once, at init.

use aws_sdk_secretsmanager::Client;

/// Reads the `SecretString` of `secret_id` (a name or ARN).
pub async fn secret_string(client: &Client, secret_id: &str) -> Result<String, String> {
    let out = client.get_secret_value().secret_id(secret_id).send().await.map_err(|e| {
        format!("cannot read secret {secret_id}: {}", aws_sdk_secretsmanager::error::DisplayErrorContext(&e))
    })?;
    out.secret_string()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("secret {secret_id} has no SecretString"))
}

/// Resolves each `Some(arn)` to its value with a client from the environment (region,
/// credentials, `AWS_ENDPOINT_URL_SECRETS_MANAGER`); `None` stays `None`.
pub(crate) async fn resolve(arns: &[Option<String>]) -> Result<Vec<Option<String>>, String> {
    if arns.iter().all(Option::is_none) {
        return Ok(vec![None; arns.len()]);
    }
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let client = Client::new(&config);
    let mut out = Vec::with_capacity(arns.len());
    for arn in arns {
        out.push(match arn {
            Some(arn) => Some(secret_string(&client, arn).await?),
            None => None,
        });
    }
    Ok(out)
}
