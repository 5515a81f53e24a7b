//! Redaction of vendor text before it reaches a log line.
//!
//! A vendor's error body is not Baton's to repeat: a model server or vendor API answering 401
//! may echo the `Authorization` header it was sent. Client-facing errors therefore carry a code
//! and Baton's own message, never a vendor's words; logs keep an [`excerpt`] of what the vendor
//! said: at most `EXCERPT_CHARS` characters, on one line, with these masked as `MASK`:
//! - the configured secrets the caller names (API keys, tokens), wherever they appear;
//! - the token after `Bearer` / `Basic` and the value after a key-like word (`api_key`,
//!   `token`, `password`, `secret`, `authorization`, …);
//! - OpenAI-style keys (`sk-…`) and JWTs (`eyJ….….…`).
//!
//! Scanning is linear in the text, and only the first `SCAN_CHARS` characters are scanned, so
//! a huge body costs no more than a small one.

/// What a masked secret is replaced with.
pub(crate) const MASK: &str = "[REDACTED]";
/// The longest excerpt, in characters (an ellipsis marks a cut).
pub(crate) const EXCERPT_CHARS: usize = 300;
/// How much of a text is read before the excerpt is cut. Larger than the excerpt, so a secret
/// that begins inside the excerpt is masked whole.
pub(crate) const SCAN_CHARS: usize = 4096;
/// Configured secrets shorter than this are not searched for (they would mask ordinary words).
const MIN_SECRET_LEN: usize = 6;

/// Words whose value (after `:` or `=`) is a credential; so is any word ending in `_key`,
/// `-key` or `_token`.
const KEY_WORDS: &[&str] = &[
    "token",
    "api_key",
    "apikey",
    "password",
    "passwd",
    "secret",
    "client_secret",
    "authorization",
    "credential",
    "credentials",
];

/// Authorization schemes whose next word is a credential.
const SCHEMES: &[&str] = &["bearer", "basic"];

/// `text` with every secret masked (see the module doc), whole: no cut, no line folding.
pub(crate) fn redact(text: &str, secrets: &[&str]) -> String {
    let mut masked = text.to_owned();
    for secret in secrets.iter().map(|s| s.trim()).filter(|s| s.len() >= MIN_SECRET_LEN) {
        if masked.contains(secret) {
            masked = masked.replace(secret, MASK);
        }
    }
    mask_tokens(&masked)
}

/// A log-safe excerpt of `text`: redacted, control characters folded to spaces, trimmed, and
/// cut to `EXCERPT_CHARS` characters; `(empty)` for blank text.
pub fn excerpt(text: &str, secrets: &[&str]) -> String {
    let scanned = match text.char_indices().nth(SCAN_CHARS) {
        Some((cut, _)) => &text[..cut],
        None => text,
    };
    let redacted = redact(scanned, secrets);
    let folded: String =
        redacted.chars().map(|c| if c.is_control() { ' ' } else { c }).collect::<String>().trim().to_owned();
    if folded.is_empty() {
        return "(empty)".to_owned();
    }
    match folded.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &folded[..cut]),
        None if scanned.len() < text.len() => format!("{folded}…"),
        None => folded,
    }
}

/// Characters that make up a token (a key, a JWT segment, base64 without its padding).
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~' | '+' | '/')
}

/// What the previous token announced.
#[derive(Clone, Copy, PartialEq)]
enum Announced {
    Nothing,
    /// `Bearer` / `Basic`: the next word, after white space, is a credential.
    Scheme,
    /// A key word: the next word, after `:` or `=` (and quotes, spaces), is a credential.
    Value,
}

/// Masks `sk-` keys, JWTs and the credential a key word or scheme announces.
fn mask_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut announced = Announced::Nothing;
    let mut rest = text;
    while let Some(start) = rest.find(is_token_char) {
        let (gap, tail) = rest.split_at(start);
        out.push_str(gap);
        let end = tail.find(|c| !is_token_char(c)).unwrap_or(tail.len());
        let (token, tail) = tail.split_at(end);
        let announced_here = match announced {
            Announced::Nothing => false,
            Announced::Scheme => !gap.is_empty() && gap.chars().all(char::is_whitespace),
            Announced::Value => {
                gap.contains([':', '='])
                    && gap.chars().all(|c| matches!(c, ':' | '=' | '"' | '\'' | ' ' | '\t'))
            }
        };
        let word = token.to_ascii_lowercase();
        if is_openai_key(token) || is_jwt(token) {
            out.push_str(MASK);
            announced = Announced::Nothing;
        } else if SCHEMES.contains(&word.as_str()) {
            out.push_str(token);
            announced = Announced::Scheme;
        } else if announced_here {
            out.push_str(MASK);
            announced = Announced::Nothing;
        } else {
            out.push_str(token);
            announced = if is_key_word(&word) { Announced::Value } else { Announced::Nothing };
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

fn is_key_word(word: &str) -> bool {
    KEY_WORDS.contains(&word) || word.ends_with("_key") || word.ends_with("-key") || word.ends_with("_token")
}

fn is_openai_key(token: &str) -> bool {
    token.len() >= 8 && (token.starts_with("sk-") || token.starts_with("sk_"))
}

fn is_jwt(token: &str) -> bool {
    let mut parts = token.split('.');
    matches!(
        (parts.next(), parts.next(), parts.next(), parts.next()),
        (Some(header), Some(payload), Some(_), None) if header.starts_with("eyJ") && payload.len() >= 2
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-test-0123456789abcdef";

    #[test]
    fn an_echoed_authorization_header_is_masked() {
        let body = format!(r#"{{"error":{{"message":"Incorrect API key provided: Bearer {KEY}."}}}}"#);
        let got = excerpt(&body, &[]);
        assert!(!got.contains("0123456789abcdef"), "{got}");
        assert!(got.contains("Bearer [REDACTED]"), "{got}");
    }

    #[test]
    fn configured_secrets_are_masked_wherever_they_appear() {
        let got = redact("we saw ft-secret-token-42 in your request", &["ft-secret-token-42"]);
        assert_eq!(got, "we saw [REDACTED] in your request");
    }

    #[test]
    fn openai_keys_and_jwts_are_masked_without_being_configured() {
        let jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ1In0.c2lnbmF0dXJl";
        let got = redact(&format!("key {KEY} and jwt {jwt} here"), &[]);
        assert_eq!(got, "key [REDACTED] and jwt [REDACTED] here");
    }

    #[test]
    fn values_after_key_words_are_masked() {
        assert_eq!(redact(r#"{"api_key": "abc123xyz"}"#, &[]), r#"{"api_key": "[REDACTED]"}"#);
        assert_eq!(redact("token=zzz999; next", &[]), "token=[REDACTED]; next");
        assert_eq!(redact("Authorization: Basic dXNlcjpwYXNz==", &[]), "Authorization: Basic [REDACTED]==");
        assert_eq!(redact("x-api-key: k1k2k3k4", &[]), "x-api-key: [REDACTED]");
    }

    #[test]
    fn ordinary_text_is_kept() {
        let text = "The model `gpt-4o` does not exist or you do not have access to it.";
        assert_eq!(redact(text, &["short"]), text);
        let text = "Invalid token provided; check your API key settings.";
        assert_eq!(redact(text, &[]), text);
    }

    #[test]
    fn excerpts_are_bounded_and_on_one_line() {
        let long = "x".repeat(10_000);
        let got = excerpt(&long, &[]);
        assert_eq!(got.chars().count(), EXCERPT_CHARS + 1);
        assert!(got.ends_with('…'));
        assert_eq!(excerpt("a\nb\r\nc", &[]), "a b  c");
        assert_eq!(excerpt("  \n", &[]), "(empty)");
    }

    #[test]
    fn a_secret_straddling_the_cut_is_masked_whole() {
        let text = format!("{} Bearer {KEY}", "y".repeat(EXCERPT_CHARS - 10));
        let got = excerpt(&text, &[]);
        assert!(!got.contains("sk-te"), "{got}");
    }
}
