//! A request signed before it is sent ([`RequestSigner`]): the remote A2A agents' calls and the
//! OpenAPI tools' with `auth: sigv4` (AWS Signature Version 4, implemented outside the runtime
//! crate, in `baton-aws`).

/// What a signature is for: the AWS service name and region (`None`: the signer's own region,
/// e.g. `AWS_REGION`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningScope {
    /// The service the signature is for (`execute-api` for API Gateway, `lambda` for a function
    /// URL, `bedrock-agentcore` for AgentCore).
    pub service: String,
    /// The region, when the configuration names one.
    pub region: Option<String>,
}

/// Signs a request before it is sent: adds the headers that prove who sends it (for SigV4:
/// `Authorization`, `X-Amz-Date` and, with temporary credentials, `X-Amz-Security-Token`).
/// The body is in memory when it is called. An error says why in words that name no secret.
#[async_trait::async_trait]
pub trait RequestSigner: Send + Sync {
    /// Signs `request` for `scope`.
    async fn sign(&self, request: &mut reqwest::Request, scope: &SigningScope) -> Result<(), String>;
}
