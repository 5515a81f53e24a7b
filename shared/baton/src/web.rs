//! The browser chat page, embedded in the binary and served by `serve` at `GET /`.
//!
//! The page is static (HTML, CSS and ES modules from the repository's `web/` folder, with a
//! Markdown parser and sanitiser vendored in `web/vendor/`; no build step), so it can equally be shipped from any static host in front of the Function URL. This
//! module owns only the serving: the embedded files, their content types, and headers that keep
//! the page from being framed or sniffed. The page itself (and `web/baton-client.js`, the
//! reference client of the SSE protocol) is documented in `docs/web-client.md`.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// One embedded file of the page.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asset {
    /// The path it is served at.
    pub path: &'static str,
    /// Its `content-type`.
    pub content_type: &'static str,
    /// Its bytes.
    pub body: &'static str,
}

/// The file `web/<name>`, served at `/<name>` with `content_type`.
macro_rules! asset {
    ($name:literal, $content_type:expr) => {
        Asset {
            path: concat!("/", $name),
            content_type: $content_type,
            body: include_str!(concat!("../../../web/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// The page's files. `index.html` is also served at `/`.
pub(crate) const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("chat.js", JS),
    asset!("baton-client.js", JS),
    asset!("dom.js", JS),
    asset!("approvals.js", JS),
    asset!("markdown.js", JS),
    // Vendored as published on npm, pinned (web/vendor/README.md).
    asset!("vendor/marked.esm.js", JS),
    asset!("vendor/purify.es.mjs", JS),
];

/// Scripts, styles and requests from the page's own origin only; no framing.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; connect-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

impl IntoResponse for Asset {
    fn into_response(self) -> Response {
        let mut response = self.body.into_response();
        let h = response.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(self.content_type));
        // Embedded in the binary: a new binary may bring new files, so revalidate each time.
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
        h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
        response
    }
}

/// `GET /` (the page) and `GET` of each of its files, for any router state.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let mut router = Router::new().route("/", get(|| async { ASSETS[0] }));
    for asset in ASSETS {
        router = router.route(asset.path, get(move || async move { *asset }));
    }
    router
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_the_page_loads_is_embedded() {
        let index = ASSETS[0].body;
        for asset in &ASSETS[1..] {
            assert!(index.contains(&asset.path[1..]), "index.html does not load {}", asset.path);
        }
        assert!(ASSETS[2].body.contains("from \"./baton-client.js\""), "chat.js imports the client");
        assert!(ASSETS[2].body.contains("from \"./markdown.js\""), "chat.js imports the renderer");
        let markdown = ASSETS.iter().find(|a| a.path == "/markdown.js").unwrap().body;
        assert!(markdown.contains("from \"./vendor/marked.esm.js\""), "markdown.js imports marked");
        assert!(markdown.contains("from \"./vendor/purify.es.mjs\""), "markdown.js imports DOMPurify");
    }

    #[tokio::test]
    async fn the_page_and_its_files_are_served_with_their_types() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move { axum::serve(listener, routes::<()>()).await });
        let get = |path: &str| reqwest::get(format!("{url}{path}"));
        let page = get("/").await.unwrap();
        assert_eq!(page.status(), 200);
        assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
        assert_eq!(page.headers()["x-content-type-options"], "nosniff");
        assert!(
            page.headers()["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'")
        );
        assert_eq!(page.text().await.unwrap(), ASSETS[0].body);
        let client = get("/baton-client.js").await.unwrap();
        assert_eq!(client.headers()["content-type"], "text/javascript; charset=utf-8");
        assert!(client.text().await.unwrap().contains("export class BatonClient"));
        let purify = get("/vendor/purify.es.mjs").await.unwrap();
        assert_eq!(purify.headers()["content-type"], "text/javascript; charset=utf-8");
        assert!(purify.text().await.unwrap().starts_with("/*! @license DOMPurify 3.4.18"));
        assert_eq!(get("/nope.js").await.unwrap().status(), 404);
        server.abort();
    }
}
