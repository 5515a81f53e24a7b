//! How an HTTP tool's requests prove who sends them: a bearer token or an API key header, read
//! at start from the environment or a secret store ([`SecretSource`], AWS Secrets Manager in
//! `baton-aws`), or a SigV4 signature ([`crate::outbound::RequestSigner`], also in `baton-aws`).
//!
//! A value read here is kept only in [`Credential`], whose `Debug` prints no secret, and is
//! masked in any error text a tool returns ([`Credential::secrets`]).

use std::sync::Arc;

use super::spec::AuthSpec;
use crate::outbound::{RequestSigner, SigningScope};

/// Reads secrets by id (a Secrets Manager name or ARN). The error names the secret, never a
/// value.
#[async_trait::async_trait]
pub trait SecretSource: Send + Sync {
    /// The secret's text.
    async fn secret(&self, id: &str) -> Result<String, String>;
}

/// How one source's requests are authenticated.
#[derive(Clone, Default)]
pub(crate) enum Credential {
    /// Not at all.
    #[default]
    None,
    /// A header with a secret value (`Authorization: Bearer …`, an API key).
    Header {
        /// The header.
        name: reqwest::header::HeaderName,
        /// Its value, marked sensitive.
        value: reqwest::header::HeaderValue,
        /// The secret itself, to mask in error texts.
        secret: String,
    },
    /// Each request signed.
    Signed(Arc<dyn RequestSigner>, SigningScope),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::None => f.write_str("None"),
            Credential::Header { name, .. } => write!(f, "Header({name}: [REDACTED])"),
            Credential::Signed(_, scope) => write!(f, "Signed({})", scope.service),
        }
    }
}

/// The resolvers a credential may need.
#[derive(Clone, Default)]
pub(crate) struct AuthHooks {
    /// Reads `*_secret_arn` values.
    pub secrets: Option<Arc<dyn SecretSource>>,
    /// Signs requests for `sigv4`.
    pub signer: Option<Arc<dyn RequestSigner>>,
}

impl Credential {
    /// The credential `spec` describes, its secret read now. The error says what could not be
    /// read and names no value.
    pub(crate) async fn resolve(spec: Option<&AuthSpec>, hooks: &AuthHooks) -> Result<Credential, String> {
        let Some(spec) = spec else { return Ok(Credential::None) };
        if let Some(sigv4) = &spec.sigv4 {
            let signer = hooks.signer.clone().ok_or("`sigv4` needs the AWS deployment's signer")?;
            let scope = SigningScope { service: sigv4.service.clone(), region: sigv4.region.clone() };
            return Ok(Credential::Signed(signer, scope));
        }
        let (header, env, arn, bearer) = match (&spec.bearer_env, &spec.bearer_secret_arn, &spec.api_key) {
            (env @ Some(_), _, _) => ("authorization", env.as_deref(), None, true),
            (_, arn @ Some(_), _) => ("authorization", None, arn.as_deref(), true),
            (_, _, Some(key)) => (key.header.as_str(), key.env.as_deref(), key.secret_arn.as_deref(), false),
            _ => return Ok(Credential::None),
        };
        let secret = match (env, arn) {
            (Some(env), _) => std::env::var(env)
                .ok()
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("the environment variable `{env}` is not set"))?,
            (_, Some(arn)) => {
                let secrets = hooks
                    .secrets
                    .as_ref()
                    .ok_or("a `secret_arn` needs the AWS deployment's secret reader")?;
                secrets.secret(arn).await?
            }
            _ => return Ok(Credential::None),
        };
        let text = if bearer { format!("Bearer {secret}") } else { secret.clone() };
        let mut value = reqwest::header::HeaderValue::from_str(&text)
            .map_err(|_| "the secret is not a valid header value".to_owned())?;
        value.set_sensitive(true);
        let name = reqwest::header::HeaderName::try_from(header).map_err(|e| e.to_string())?;
        Ok(Credential::Header { name, value, secret })
    }

    /// Adds this credential to `request`.
    pub(super) async fn apply(&self, request: &mut reqwest::Request) -> Result<(), String> {
        match self {
            Credential::None => Ok(()),
            Credential::Header { name, value, .. } => {
                request.headers_mut().insert(name.clone(), value.clone());
                Ok(())
            }
            Credential::Signed(signer, scope) => signer.sign(request, scope).await,
        }
    }

    /// The secret values to mask in any text a tool returns or logs.
    pub(super) fn secrets(&self) -> Vec<&str> {
        match self {
            Credential::Header { secret, .. } => vec![secret.as_str()],
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::openapi::spec::ApiKeySpec;

    struct Missing;
    #[async_trait::async_trait]
    impl SecretSource for Missing {
        async fn secret(&self, id: &str) -> Result<String, String> {
            Err(format!("cannot read secret {id}: AccessDenied"))
        }
    }

    #[tokio::test]
    async fn a_secret_that_cannot_be_read_says_which_and_a_read_one_never_prints() {
        let spec = AuthSpec {
            api_key: Some(ApiKeySpec { header: "x-key".into(), env: None, secret_arn: Some("arn:s".into()) }),
            ..Default::default()
        };
        let hooks = AuthHooks { secrets: Some(Arc::new(Missing)), signer: None };
        let err = Credential::resolve(Some(&spec), &hooks).await.unwrap_err();
        assert_eq!(err, "cannot read secret arn:s: AccessDenied");
        let unset = AuthSpec { bearer_env: Some("BATON_TEST_UNSET_TOKEN".into()), ..Default::default() };
        let err = Credential::resolve(Some(&unset), &AuthHooks::default()).await.unwrap_err();
        assert!(err.contains("`BATON_TEST_UNSET_TOKEN` is not set"), "{err}");
        let path = std::env::var("PATH").unwrap();
        let set = AuthSpec { bearer_env: Some("PATH".into()), ..Default::default() };
        let credential = Credential::resolve(Some(&set), &AuthHooks::default()).await.unwrap();
        assert!(!format!("{credential:?}").contains(&path));
        assert_eq!(credential.secrets(), [path.trim()]);
    }
}
