//! The AWS side of the tools a configuration declares (docs/tools.md): Lambda tools
//! ([`crate::lambda_tool`]), Secrets Manager for the secrets an OpenAPI source names by ARN, and
//! the SigV4 signer for `auth: {sigv4}`; then the runtime's [`baton::wiring::declared_tools`]
//! builds them all into the backends.

use std::sync::Arc;

use baton::config::Config;
use baton::tool::openapi::SecretSource;
use baton::wiring::Backends;

/// Secrets read from AWS Secrets Manager.
#[derive(Debug, Clone)]
pub(crate) struct SecretsManager(aws_sdk_secretsmanager::Client);

#[async_trait::async_trait]
impl SecretSource for SecretsManager {
    async fn secret(&self, id: &str) -> Result<String, String> {
        crate::secrets::secret_string(&self.0, id).await
    }
}

/// Adds the configuration's declared tools to `backends`, with the AWS hooks they need (each
/// made only when a source needs it). The error names the tool or source and what to fix.
pub(crate) async fn declared_tools(config: &Config, backends: &mut Backends) -> Result<(), String> {
    let sources = &config.tool_sources;
    let auths = || sources.openapi.values().filter_map(|s| s.auth.as_ref());
    if backends.secrets.is_none()
        && auths().any(|a| {
            a.bearer_secret_arn.is_some() || a.api_key.as_ref().is_some_and(|k| k.secret_arn.is_some())
        })
    {
        let shared = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        backends.secrets = Some(Arc::new(SecretsManager(aws_sdk_secretsmanager::Client::new(&shared))));
    }
    if backends.signer.is_none() && auths().any(|a| a.sigv4.is_some()) {
        backends.signer = Some(Arc::new(crate::sigv4::SigV4Signer::from_env().await));
    }
    let lambda = crate::lambda_tool::lambda_tools(config).await;
    baton::wiring::declared_tools(config, backends, lambda).await
}
