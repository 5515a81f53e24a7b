//! What a configuration says of one OpenAPI source: its document, the operations offered, its
//! auth and its limits. Parsed and checked by `config::tools` (which re-exports these types);
//! kept here, with the tools they build, so the tool layer needs nothing from the configuration's.

use std::time::Duration;

use serde::Deserialize;

/// A tool call of these kinds may take this long unless its source says otherwise.
pub(crate) const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);
/// A result of these kinds may be this large unless its source says otherwise.
pub(crate) const DEFAULT_MAX_RESULT_BYTES: usize = 256 * 1024;
/// One OpenAPI document whose operations become tools.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenApiSource {
    /// A file path (relative to the configuration file's folder) or an `http(s)://` URL.
    pub document: String,
    /// Where requests go; else the document's first absolute `servers` URL.
    #[serde(default)]
    pub base_url: Option<String>,
    /// The operations offered, by `operationId`; else all of them.
    #[serde(default)]
    pub operations: Option<Vec<String>>,
    /// How requests prove who sends them.
    #[serde(default)]
    pub auth: Option<AuthSpec>,
    /// Longest one call may take.
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Largest result the model reads.
    #[serde(default)]
    pub max_result_bytes: Option<usize>,
}

/// How an HTTP tool's requests are authenticated: exactly one of these.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSpec {
    /// `Authorization: Bearer <value of this environment variable>`.
    #[serde(default)]
    pub bearer_env: Option<String>,
    /// `Authorization: Bearer <this Secrets Manager secret>`.
    #[serde(default)]
    pub bearer_secret_arn: Option<String>,
    /// A key in a header.
    #[serde(default)]
    pub api_key: Option<ApiKeySpec>,
    /// AWS Signature Version 4 (API Gateway with IAM auth, a function URL).
    #[serde(default)]
    pub sigv4: Option<SigV4Spec>,
}

/// An API key sent in a header, read from the environment or Secrets Manager.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeySpec {
    /// The header.
    pub header: String,
    /// The environment variable holding the key.
    #[serde(default)]
    pub env: Option<String>,
    /// The Secrets Manager secret holding the key.
    #[serde(default)]
    pub secret_arn: Option<String>,
}

/// What SigV4 signatures are for.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SigV4Spec {
    /// The service (`execute-api`, `lambda`).
    pub service: String,
    /// The region; else the environment's.
    #[serde(default)]
    pub region: Option<String>,
}

impl OpenApiSource {
    /// Its timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout_seconds.map_or(DEFAULT_TOOL_TIMEOUT, Duration::from_secs_f64)
    }

    /// Its result cap.
    pub fn max_result_bytes(&self) -> usize {
        self.max_result_bytes.unwrap_or(DEFAULT_MAX_RESULT_BYTES)
    }

    /// Whether its document is read over HTTP.
    pub fn is_url(&self) -> bool {
        self.document.starts_with("http://") || self.document.starts_with("https://")
    }
}

impl AuthSpec {
    pub fn check(&self) -> Result<(), String> {
        let set = [
            self.bearer_env.is_some(),
            self.bearer_secret_arn.is_some(),
            self.api_key.is_some(),
            self.sigv4.is_some(),
        ];
        if set.iter().filter(|s| **s).count() != 1 {
            return Err("give exactly one of bearer_env, bearer_secret_arn, api_key, sigv4".into());
        }
        if let Some(key) = &self.api_key {
            if key.header.trim().is_empty() || reqwest::header::HeaderName::try_from(&key.header).is_err() {
                return Err(format!("api_key.header `{}` is not a header name", key.header));
            }
            if key.env.is_some() == key.secret_arn.is_some() {
                return Err("api_key takes exactly one of env, secret_arn".into());
            }
        }
        if self.sigv4.as_ref().is_some_and(|s| s.service.trim().is_empty()) {
            return Err("sigv4.service must name the AWS service (execute-api, lambda)".into());
        }
        Ok(())
    }
}
