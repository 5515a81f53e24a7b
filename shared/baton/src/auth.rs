//! Who is calling. The user id of a turn always comes from a verified identity, never from the
//! request body:
//! - [`AuthMode::Iam`]: the platform verified the caller (Function URL `AWS_IAM`, or API Gateway
//!   IAM auth); the Lambda glue reads the principal from the request context.
//! - [`AuthMode::Jwt`]: a browser client sends `Authorization: Bearer <JWT>`, verified here
//!   (signature, expiry, issuer and audience); the user is its `sub`.
//! - [`AuthMode::LocalHeader`]: local development only: the user is the `x-baton-user` header,
//!   unauthenticated.

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

/// How callers are identified.
pub enum AuthMode {
    /// The platform verified the caller (IAM); its principal is the user.
    Iam,
    /// A bearer JWT verified with this key.
    Jwt(Box<JwtVerifier>),
    /// Unauthenticated local mode: the `x-baton-user` header names the user.
    LocalHeader,
}

impl std::fmt::Debug for AuthMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AuthMode::Iam => "Iam",
            AuthMode::Jwt(_) => "Jwt",
            AuthMode::LocalHeader => "LocalHeader",
        })
    }
}

/// A caller could not be identified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No credentials where some are required.
    #[error("authentication required: {0}")]
    Missing(&'static str),
    /// Credentials that do not verify.
    #[error("invalid credentials: {0}")]
    Invalid(String),
    /// A key or setting of the verifier is unusable.
    #[error("authentication is misconfigured: {0}")]
    Config(String),
}

/// Verifies bearer JWTs.
pub struct JwtVerifier {
    key: DecodingKey,
    validation: Validation,
}

#[derive(Deserialize)]
struct Claims {
    sub: Option<String>,
}

impl JwtVerifier {
    /// HS256 with a shared secret.
    pub fn hs256(
        secret: &[u8],
        issuer: Option<&str>,
        audience: Option<&str>,
    ) -> Result<JwtVerifier, AuthError> {
        if secret.len() < 32 {
            return Err(AuthError::Config("an HS256 secret must be at least 32 bytes".into()));
        }
        Ok(JwtVerifier::new(DecodingKey::from_secret(secret), Algorithm::HS256, issuer, audience))
    }

    /// RS256 with the issuer's public key (PEM).
    pub fn rs256_pem(
        pem: &[u8],
        issuer: Option<&str>,
        audience: Option<&str>,
    ) -> Result<JwtVerifier, AuthError> {
        let key = DecodingKey::from_rsa_pem(pem)
            .map_err(|e| AuthError::Config(format!("RS256 public key: {e}")))?;
        Ok(JwtVerifier::new(key, Algorithm::RS256, issuer, audience))
    }

    fn new(key: DecodingKey, alg: Algorithm, issuer: Option<&str>, audience: Option<&str>) -> JwtVerifier {
        let mut validation = Validation::new(alg);
        validation.leeway = 30;
        match issuer {
            Some(iss) => validation.set_issuer(&[iss]),
            None => validation.iss = None,
        }
        match audience {
            Some(aud) => validation.set_audience(&[aud]),
            None => validation.validate_aud = false,
        }
        JwtVerifier { key, validation }
    }

    /// The user (`sub`) of a verified `Authorization: Bearer` header value.
    pub fn verify(&self, authorization: Option<&str>) -> Result<String, AuthError> {
        let header = authorization.ok_or(AuthError::Missing("send `Authorization: Bearer <token>`"))?;
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .ok_or(AuthError::Missing("the Authorization header must be `Bearer <token>`"))?;
        let data = jsonwebtoken::decode::<Claims>(token.trim(), &self.key, &self.validation)
            .map_err(|e| AuthError::Invalid(e.to_string()))?;
        data.claims
            .sub
            .filter(|s| !s.is_empty())
            .ok_or_else(|| AuthError::Invalid("the token has no `sub`".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header, encode};
    use serde_json::json;

    const SECRET: &[u8] = b"a-test-secret-that-is-long-enough-for-hs256";

    fn token(claims: serde_json::Value, secret: &[u8]) -> String {
        encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(secret)).unwrap()
    }

    fn now() -> u64 {
        jsonwebtoken::get_current_timestamp()
    }

    fn verifier() -> JwtVerifier {
        JwtVerifier::hs256(SECRET, Some("https://issuer.example"), Some("baton")).unwrap()
    }

    #[test]
    fn a_valid_token_yields_its_subject() {
        let t = token(
            json!({"sub": "alice", "exp": now() + 600, "iss": "https://issuer.example", "aud": "baton"}),
            SECRET,
        );
        assert_eq!(verifier().verify(Some(&format!("Bearer {t}"))), Ok("alice".into()));
    }

    #[test]
    fn bad_tokens_are_refused() {
        let good =
            json!({"sub": "alice", "exp": now() + 600, "iss": "https://issuer.example", "aud": "baton"});
        let forged = token(good.clone(), b"another-secret-that-is-long-enough-for-hs256");
        assert!(matches!(verifier().verify(Some(&format!("Bearer {forged}"))), Err(AuthError::Invalid(_))));
        let mut expired = good.clone();
        expired["exp"] = json!(now() - 3600);
        assert!(verifier().verify(Some(&format!("Bearer {}", token(expired, SECRET)))).is_err());
        let mut other_aud = good.clone();
        other_aud["aud"] = json!("someone-else");
        assert!(verifier().verify(Some(&format!("Bearer {}", token(other_aud, SECRET)))).is_err());
        let mut no_sub = good;
        no_sub.as_object_mut().unwrap().remove("sub");
        assert!(verifier().verify(Some(&format!("Bearer {}", token(no_sub, SECRET)))).is_err());
        assert!(matches!(verifier().verify(None), Err(AuthError::Missing(_))));
        assert!(matches!(verifier().verify(Some("Basic abc")), Err(AuthError::Missing(_))));
    }

    #[test]
    fn a_short_secret_is_a_configuration_error() {
        assert!(matches!(JwtVerifier::hs256(b"short", None, None), Err(AuthError::Config(_))));
    }
}
