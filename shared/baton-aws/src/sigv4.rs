//! SigV4 signing of the calls to remote A2A agents (`remote: {a2a: …, auth: sigv4}`, docs/a2a.md):
//! the runtime crate's [`RequestSigner`] on the official `aws-sigv4` crate, with credentials from
//! the default chain of `aws-config` (environment, profile, the Lambda function's role), fetched
//! (and refreshed by the chain) at each signature. The credentials never reach a log or an error.

use std::sync::Arc;
use std::time::SystemTime;

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use baton::a2a::{RequestSigner, SigningScope};
use baton::config::Config;
use baton::config::agents::RemoteAuthKind;
use reqwest::header::{HeaderName, HeaderValue};

/// Signs requests with AWS Signature Version 4.
#[derive(Debug, Clone)]
pub struct SigV4Signer {
    credentials: Option<SharedCredentialsProvider>,
    region: Option<String>,
}

impl SigV4Signer {
    /// A signer over `credentials`, in `region` unless a scope names its own.
    pub fn new(credentials: SharedCredentialsProvider, region: Option<String>) -> SigV4Signer {
        SigV4Signer { credentials: Some(credentials), region }
    }

    /// A signer over the default credentials chain and region (`AWS_REGION`, a profile).
    pub(crate) async fn from_env() -> SigV4Signer {
        let shared = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        SigV4Signer {
            credentials: shared.credentials_provider(),
            region: shared.region().map(|r| r.to_string()),
        }
    }
}

/// The signer for `config`'s remote A2A agents, when one of them has `auth: sigv4` (the AWS
/// configuration is read only then).
pub async fn a2a_signer(config: &Config) -> Option<Arc<dyn RequestSigner>> {
    let signs =
        config.agents.agents.iter().any(|a| {
            a.remote.as_ref().is_some_and(|r| r.a2a.is_some() && r.auth == Some(RemoteAuthKind::Sigv4))
        });
    if !signs {
        return None;
    }
    Some(Arc::new(SigV4Signer::from_env().await))
}

#[async_trait::async_trait]
impl RequestSigner for SigV4Signer {
    async fn sign(&self, request: &mut reqwest::Request, scope: &SigningScope) -> Result<(), String> {
        let provider = self.credentials.as_ref().ok_or("no AWS credentials are configured")?;
        // The chain's errors name where it looked, never a secret.
        let credentials =
            provider.provide_credentials().await.map_err(|e| format!("no AWS credentials: {e}"))?;
        let region = scope
            .region
            .as_deref()
            .or(self.region.as_deref())
            .ok_or("no AWS region: set `region:` on the remote or AWS_REGION")?;
        let identity = credentials.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(region)
            .name(&scope.service)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| format!("cannot sign: {e}"))?
            .into();
        let headers: Vec<(&str, &str)> = request
            .headers()
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
            .collect();
        let body =
            request.body().map_or(Some(&[][..]), |b| b.as_bytes()).ok_or("cannot sign a streamed body")?;
        let signable = SignableRequest::new(
            request.method().as_str(),
            request.url().as_str(),
            headers.into_iter(),
            SignableBody::Bytes(body),
        )
        .map_err(|e| format!("cannot sign: {e}"))?;
        let (instructions, _) =
            sign(signable, &params).map_err(|e| format!("cannot sign: {e}"))?.into_parts();
        let mut signed = Vec::new();
        for (name, value) in instructions.headers() {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| format!("cannot sign: {e}"))?;
            let mut value = HeaderValue::from_str(value).map_err(|e| format!("cannot sign: {e}"))?;
            value.set_sensitive(true);
            signed.push((name, value));
        }
        for (name, value) in signed {
            request.headers_mut().insert(name, value);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use aws_credential_types::Credentials;

    use super::*;

    #[tokio::test]
    async fn a_request_is_signed_for_its_scope_and_no_secret_shows() {
        let credentials = Credentials::new("AKIDEXAMPLE", "s3cret-key", Some("t0ken".into()), None, "test");
        let signer = SigV4Signer::new(SharedCredentialsProvider::new(credentials), Some("us-east-1".into()));
        let client = reqwest::Client::new();
        let mut request = client
            .post("http://127.0.0.1:9/a2a")
            .header("content-type", "application/json")
            .body("{}")
            .build()
            .unwrap();
        let scope = SigningScope { service: "execute-api".into(), region: Some("eu-west-1".into()) };
        signer.sign(&mut request, &scope).await.unwrap();
        let auth = request.headers()["authorization"].to_str().unwrap();
        assert!(auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"), "{auth}");
        assert!(auth.contains("/eu-west-1/execute-api/aws4_request"), "the scope's region wins: {auth}");
        assert!(auth.contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token"), "{auth}");
        assert_eq!(request.headers()["x-amz-security-token"], "t0ken");
        assert!(request.headers().contains_key("x-amz-date"));
        assert!(!format!("{:?}", request.headers()).contains("s3cret"), "the secret key is never sent");
        assert!(
            !format!("{:?}", request.headers()).contains("t0ken"),
            "signed headers are sensitive in Debug"
        );
        let none = SigV4Signer { credentials: None, region: None };
        let err = none.sign(&mut request, &scope).await.unwrap_err();
        assert_eq!(err, "no AWS credentials are configured");
    }
}
