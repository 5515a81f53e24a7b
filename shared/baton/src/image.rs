//! An image the user attached to a message: its kind (which routes it), a description, and the
//! image itself as an `https` URL or a base64 `data:` URL, forwarded to the entry agent's model
//! as an image content part.
//!
//! The request's `image` object is checked here, once, at the edge: unknown keys, an unknown
//! `type`, a description past the message limit and a URL that is neither `https://` nor a base64
//! `data:image/...` URL are refused with a message naming the field. A data URL's size is bounded
//! by the request body limit (`max_body_bytes`).

use serde::{Deserialize, Serialize};

/// Longest `https` image URL accepted.
pub(crate) const MAX_IMAGE_URL_CHARS: usize = 2_048;

/// Image formats a `data:` URL may carry (the ones both OpenAI APIs accept).
const DATA_URL_TYPES: [&str; 4] = ["png", "jpeg", "gif", "webp"];

/// What an attached image shows, as the client classified it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageKind {
    /// A purchase receipt.
    Receipt,
    /// A product.
    Product,
    /// Anything else.
    Other,
}

impl ImageKind {
    /// The name used on the wire and in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageKind::Receipt => "receipt",
            ImageKind::Product => "product",
            ImageKind::Other => "other",
        }
    }
}

/// An attached image. Every field is optional; a request's image has at least one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Image {
    /// What it shows, when the client knows.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ImageKind>,
    /// A description of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The image: an `https` URL or a base64 `data:image/...` URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl Image {
    /// An image known by its description only.
    pub fn described(description: impl Into<String>) -> Image {
        Image { description: Some(description.into()), ..Image::default() }
    }

    /// The request's `image` field, checked (see the module docs); the error says which field
    /// is wrong and why.
    pub(crate) fn from_request(
        value: serde_json::Value,
        max_description_chars: usize,
    ) -> Result<Image, String> {
        if !value.is_object() {
            return Err("the field `image` must be an object".into());
        }
        let image: Image = serde_json::from_value(value).map_err(|e| format!("`image`: {e}"))?;
        if image.kind.is_none() && image.description.is_none() && image.url.is_none() {
            return Err("`image` needs at least one of `type`, `description` and `url`".into());
        }
        if image.description.as_ref().is_some_and(|d| d.chars().count() > max_description_chars) {
            return Err(format!("`image.description` is longer than {max_description_chars} characters"));
        }
        if let Some(url) = &image.url {
            check_url(url)?;
        }
        Ok(image)
    }

    /// The note the model reads after the user's words: the kind and the description, if any.
    pub fn note(&self) -> Option<String> {
        let description = self.description.as_deref().map(str::trim).filter(|d| !d.is_empty());
        match (self.kind, description) {
            (None, None) if self.url.is_none() => None,
            (None, None) => Some("[The user attached an image.]".into()),
            (None, Some(d)) => Some(format!("[The user attached an image: {d}]")),
            (Some(kind), None) => Some(format!("[The user attached an image of a {}.]", kind.as_str())),
            (Some(kind), Some(d)) => {
                Some(format!("[The user attached an image of a {}: {d}]", kind.as_str()))
            }
        }
    }
}

/// An `https://host/...` URL of at most [`MAX_IMAGE_URL_CHARS`], or `data:image/<png|jpeg|gif|
/// webp>;base64,<base64>`.
fn check_url(url: &str) -> Result<(), String> {
    if let Some(rest) = url.strip_prefix("https://") {
        let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if host.is_empty()
            || url.chars().count() > MAX_IMAGE_URL_CHARS
            || url.chars().any(char::is_whitespace)
        {
            return Err(format!(
                "`image.url` must be an https URL with a host, without spaces, at most {MAX_IMAGE_URL_CHARS} characters"
            ));
        }
        return Ok(());
    }
    if let Some(rest) = url.strip_prefix("data:image/") {
        let (format, data) = rest.split_once(";base64,").unwrap_or(("", ""));
        let base64 = |c: u8| c.is_ascii_alphanumeric() || c == b'+' || c == b'/';
        let padded = data.trim_end_matches('=');
        let valid = DATA_URL_TYPES.contains(&format)
            && !data.is_empty()
            && data.len() % 4 == 0
            && data.len() - padded.len() <= 2
            && padded.bytes().all(base64);
        if valid {
            return Ok(());
        }
        return Err(format!(
            "`image.url`: a data URL must be `data:image/<{}>;base64,<base64>`",
            DATA_URL_TYPES.join("|")
        ));
    }
    Err("`image.url` must be an https URL or a base64 data:image URL".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: serde_json::Value) -> Result<Image, String> {
        Image::from_request(value, 50)
    }

    #[test]
    fn a_typed_described_image_with_a_url_is_accepted() {
        let image = parse(json!({"type": "receipt", "description": "a Kroger receipt", "url": "https://cdn.example.com/r.jpg"}))
            .unwrap();
        assert_eq!(image.kind, Some(ImageKind::Receipt));
        assert_eq!(image.note().unwrap(), "[The user attached an image of a receipt: a Kroger receipt]");
        let data = parse(json!({"url": "data:image/png;base64,iVBORw0KGgo="})).unwrap();
        assert_eq!(data.note().unwrap(), "[The user attached an image.]");
        assert_eq!(
            parse(json!({"description": "a cat"})).unwrap().note().unwrap(),
            "[The user attached an image: a cat]"
        );
    }

    #[test]
    fn bad_images_are_refused_naming_the_field() {
        let cases = [
            (json!("a receipt"), "must be an object"),
            (json!({}), "at least one of"),
            (json!({"type": "selfie"}), "unknown variant `selfie`"),
            (json!({"kind": "receipt"}), "unknown field `kind`"),
            (json!({"description": "x".repeat(51)}), "longer than 50"),
            (json!({"url": "http://example.com/a.png"}), "https URL"),
            (json!({"url": "https:///a.png"}), "with a host"),
            (json!({"url": format!("https://a.com/{}", "x".repeat(MAX_IMAGE_URL_CHARS))}), "at most"),
            (json!({"url": "data:image/svg+xml;base64,PHN2Zz4="}), "data URL"),
            (json!({"url": "data:image/png;base64,not base64!"}), "data URL"),
            (json!({"url": "data:image/png;base64,abc"}), "data URL"),
            (json!({"url": "file:///etc/passwd"}), "https URL"),
        ];
        for (value, expected) in cases {
            let err = parse(value.clone()).unwrap_err();
            assert!(err.contains(expected), "{value}: {err}");
        }
    }
}
