//! Who is calling. The user id of a turn always comes from a verified identity, never from the
//! request body:
//! - [`AuthMode::Iam`]: the platform verified the caller (Function URL `AWS_IAM`, or API Gateway
//!   IAM auth); the Lambda glue reads the principal from the request context.
//! - [`AuthMode::Jwt`]: a browser client sends `Authorization: Bearer <JWT>`, verified here
//!   (signature; `exp` and `sub` required; `nbf` and `iat` not in the future; `iss` and `aud`
//!   required and matched when configured; `JWT_LEEWAY_SECS` of clock skew); the user is its
//!   `sub`.
//! - [`AuthMode::LocalHeader`]: local development only: the user is the `x-baton-user` header,
//!   unauthenticated.

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

/// Clock skew tolerated between the token issuer and this server on `exp`, `nbf` and `iat`.
pub(crate) const JWT_LEEWAY_SECS: u64 = 60;

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
    iat: Option<serde_json::Value>,
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
        validation.leeway = JWT_LEEWAY_SECS;
        validation.validate_nbf = true;
        // A configured issuer or audience is required, not only matched when present: a token
        // minted for another service without `aud` must not pass here.
        let mut required = vec!["exp", "sub"];
        match issuer {
            Some(iss) => {
                validation.set_issuer(&[iss]);
                required.push("iss");
            }
            None => validation.iss = None,
        }
        match audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        validation.set_required_spec_claims(&required);
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
        // jsonwebtoken does not look at `iat`: a token issued in the future is forged or minted
        // by a clock that cannot be trusted.
        match &data.claims.iat {
            None => {}
            Some(iat) => match iat.as_u64() {
                Some(iat) if iat <= jsonwebtoken::get_current_timestamp() + JWT_LEEWAY_SECS => {}
                Some(_) => return Err(AuthError::Invalid("the token's `iat` is in the future".into())),
                None => return Err(AuthError::Invalid("the token's `iat` is not a timestamp".into())),
            },
        }
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

    fn good() -> serde_json::Value {
        json!({"sub": "alice", "exp": now() + 600, "iss": "https://issuer.example", "aud": "baton"})
    }

    fn verify_claims(claims: serde_json::Value) -> Result<String, AuthError> {
        verifier().verify(Some(&format!("Bearer {}", token(claims, SECRET))))
    }

    fn without(claim: &str) -> serde_json::Value {
        let mut claims = good();
        claims.as_object_mut().unwrap().remove(claim);
        claims
    }

    fn with(claim: &str, value: serde_json::Value) -> serde_json::Value {
        let mut claims = good();
        claims[claim] = value;
        claims
    }

    #[test]
    fn a_configured_audience_is_required() {
        let refused = verify_claims(without("aud")).unwrap_err();
        assert!(refused.to_string().contains("aud"), "{refused}");
        let no_aud_configured = JwtVerifier::hs256(SECRET, Some("https://issuer.example"), None).unwrap();
        let t = token(without("aud"), SECRET);
        assert_eq!(no_aud_configured.verify(Some(&format!("Bearer {t}"))), Ok("alice".into()));
    }

    #[test]
    fn a_configured_issuer_is_required() {
        assert!(verify_claims(without("iss")).is_err());
    }

    #[test]
    fn exp_is_required() {
        let refused = verify_claims(without("exp")).unwrap_err();
        assert!(refused.to_string().contains("exp"), "{refused}");
    }

    #[test]
    fn a_token_not_yet_valid_is_refused_beyond_the_leeway() {
        assert!(verify_claims(with("nbf", json!(now() + 3600))).is_err(), "an hour ahead");
        assert!(verify_claims(with("nbf", json!(now() + 2 * JWT_LEEWAY_SECS))).is_err(), "past the leeway");
        assert_eq!(verify_claims(with("nbf", json!(now() + 10))), Ok("alice".into()), "within the leeway");
        assert_eq!(verify_claims(with("nbf", json!(now() - 10))), Ok("alice".into()));
    }

    #[test]
    fn a_token_issued_in_the_future_is_refused_beyond_the_leeway() {
        let refused = verify_claims(with("iat", json!(now() + 3600))).unwrap_err();
        assert!(refused.to_string().contains("iat"), "{refused}");
        assert!(verify_claims(with("iat", json!("yesterday"))).is_err(), "not a timestamp");
        assert_eq!(verify_claims(with("iat", json!(now() + 10))), Ok("alice".into()), "within the leeway");
        assert_eq!(verify_claims(with("iat", json!(now() - 60))), Ok("alice".into()));
    }

    #[test]
    fn expiry_has_the_same_small_leeway() {
        assert_eq!(verify_claims(with("exp", json!(now() - 10))), Ok("alice".into()), "within the leeway");
        assert!(verify_claims(with("exp", json!(now() - 2 * JWT_LEEWAY_SECS))).is_err());
    }

    #[test]
    fn a_short_secret_is_a_configuration_error() {
        assert!(matches!(JwtVerifier::hs256(b"short", None, None), Err(AuthError::Config(_))));
    }
}
