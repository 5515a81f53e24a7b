//! What the platform in front of the service says about a request, and the extractors handlers
//! take it with. The Lambda glue puts a [`Platform`] into each request's extensions (the IAM
//! principal the platform verified, the invocation's deadline, the API stage taken off the
//! path); `serve` puts none. A handler asks for what it needs: [`Caller`] (who the request is
//! from), [`Deadline`] (when the turn must have ended), [`BasePath`] (the prefix of the
//! service's paths in the URL a client sees).

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::{ApiError, Caller, ChatService};

/// The platform's context of one request, in its extensions.
#[derive(Debug, Clone, Default)]
pub struct Platform {
    /// The identity the platform verified (an IAM principal from the request context), if any:
    /// the caller under [`crate::auth::AuthMode::Iam`].
    pub principal: Option<String>,
    /// When the invocation ends (less a margin to send `completed`): a turn ends by then.
    pub deadline: Option<tokio::time::Instant>,
    /// What the platform's URL has before the service's paths (an API stage, `/v1`), taken
    /// off the request's path before routing; empty when none.
    pub base_path: String,
}

impl FromRequestParts<Arc<ChatService>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, service: &Arc<ChatService>) -> Result<Caller, ApiError> {
        let principal = parts.extensions.get::<Platform>().and_then(|p| p.principal.as_deref());
        service.caller(&parts.headers, principal)
    }
}

/// The platform's deadline for the request (a Lambda invocation's), if any.
pub(crate) struct Deadline(pub(crate) Option<tokio::time::Instant>);

impl<S: Send + Sync> FromRequestParts<S> for Deadline {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Deadline, Infallible> {
        Ok(Deadline(parts.extensions.get::<Platform>().and_then(|p| p.deadline)))
    }
}

/// The prefix of the service's paths in the URL the client called (see [`Platform::base_path`]).
pub(crate) struct BasePath(pub(crate) String);

impl<S: Send + Sync> FromRequestParts<S> for BasePath {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<BasePath, Infallible> {
        Ok(BasePath(parts.extensions.get::<Platform>().map(|p| p.base_path.clone()).unwrap_or_default()))
    }
}
