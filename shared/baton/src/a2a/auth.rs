//! How a call to a remote A2A agent proves who it is: a bearer token (`token_env`), or a request
//! signed by a [`RequestSigner`] (`auth: sigv4`: AWS Signature Version 4, implemented outside the
//! runtime crate, in `baton-aws`, and handed to the agents' build in [`crate::wiring::Backends`]).

use std::sync::Arc;

pub use crate::outbound::{RequestSigner, SigningScope};

/// How an [`super::A2aAgent`]'s calls are authenticated.
#[derive(Clone, Default)]
pub enum RemoteAuth {
    /// Not at all.
    #[default]
    None,
    /// `Authorization: Bearer …` on each JSON-RPC call.
    Bearer(BearerToken),
    /// Each request (the card's too) signed by the signer for its scope.
    Signed(Arc<dyn RequestSigner>, SigningScope),
}

impl std::fmt::Debug for RemoteAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoteAuth::None => f.write_str("None"),
            RemoteAuth::Bearer(token) => write!(f, "Bearer({token:?})"),
            RemoteAuth::Signed(_, scope) => write!(f, "Signed({scope:?})"),
        }
    }
}

impl RemoteAuth {
    /// Adds the credential to `request`: the bearer token only to a JSON-RPC call (`rpc`), a
    /// signature to every request.
    pub(crate) async fn apply(&self, request: &mut reqwest::Request, rpc: bool) -> Result<(), String> {
        match self {
            RemoteAuth::None => Ok(()),
            RemoteAuth::Bearer(token) => {
                if rpc {
                    let value = format!("Bearer {}", token.secret());
                    let mut value = reqwest::header::HeaderValue::from_str(&value)
                        .map_err(|_| "the bearer token is not a valid header value".to_owned())?;
                    value.set_sensitive(true);
                    request.headers_mut().insert(reqwest::header::AUTHORIZATION, value);
                }
                Ok(())
            }
            RemoteAuth::Signed(signer, scope) => signer.sign(request, scope).await,
        }
    }
}

/// A secret that never shows in a `Debug` or a log line.
#[derive(Clone)]
pub struct BearerToken(String);

impl BearerToken {
    /// The token.
    pub fn new(token: impl Into<String>) -> BearerToken {
        BearerToken(token.into())
    }

    pub(crate) fn secret(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(***)")
    }
}
