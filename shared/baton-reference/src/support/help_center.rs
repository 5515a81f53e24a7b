//! The offline support agent: BM25 retrieval over the shipped help-center articles
//! (`data/help/*.md`), answering with the best article and naming it.
//!
//! An article is a small Markdown file with a front matter block:
//!
//! ```text
//! ---
//! title: My receipt didn't scan
//! category: rejected_receipt
//! keywords: scan, blurry, photo
//! ---
//! The body.
//! ```

use std::sync::Arc;

use super::SUPPORT_APOLOGY;
use baton::agent::{Agent, AgentRequest};
use baton::event::Event;
use baton::event::EventStream;
use baton::retrieval::SearchIndex;

/// `(slug, file text)` of every shipped article, embedded by the build script.
const ARTICLES: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/help_articles.rs"));

/// One help-center article.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Article {
    /// File name without `.md`; the citation (`help/<slug>`).
    pub slug: String,
    /// Title.
    pub title: String,
    /// Support category.
    pub category: String,
    /// Search keywords.
    pub keywords: String,
    /// The text.
    pub body: String,
}

/// An article file is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("help article `{slug}`: {reason}")]
pub(crate) struct ArticleError {
    /// Which article.
    pub slug: String,
    /// What is wrong.
    pub reason: String,
}

impl Article {
    /// Parses an article file.
    pub(crate) fn parse(slug: &str, text: &str) -> Result<Article, ArticleError> {
        let error = |reason: &str| ArticleError { slug: slug.to_owned(), reason: reason.to_owned() };
        let rest =
            text.strip_prefix("---\n").ok_or_else(|| error("must start with a `---` front matter line"))?;
        let (front, body) =
            rest.split_once("\n---\n").ok_or_else(|| error("front matter is not closed by `---`"))?;
        let field = |name: &str| {
            front
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':').map(str::trim))
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| error(&format!("missing `{name}:`")))
        };
        let body = body.trim().to_owned();
        if body.is_empty() {
            return Err(error("the body is empty"));
        }
        Ok(Article {
            slug: slug.to_owned(),
            title: field("title")?,
            category: field("category")?,
            keywords: field("keywords")?,
            body,
        })
    }
}

/// The articles and their index.
#[derive(Debug)]
pub(crate) struct HelpCenter {
    articles: Vec<Article>,
    index: SearchIndex,
}

/// A hit whose score is below this share of the best one is not worth naming as related.
const RELATED_SHARE: f32 = 0.5;

impl HelpCenter {
    /// The articles shipped in `data/help/`.
    pub(crate) fn embedded() -> HelpCenter {
        let articles = ARTICLES
            .iter()
            .map(|(slug, text)| {
                Article::parse(slug, text).expect("shipped articles are valid (checked by a test)")
            })
            .collect();
        HelpCenter::new(articles)
    }

    /// A help center over `articles`.
    pub(crate) fn new(articles: Vec<Article>) -> HelpCenter {
        let texts: Vec<String> = articles
            .iter()
            // Title and keywords say what an article is about: they count twice.
            .map(|a| format!("{0} {1} {0} {1} {2}", a.title, a.keywords, a.body))
            .collect();
        HelpCenter { index: SearchIndex::new(&texts), articles }
    }

    /// All articles.
    #[cfg(test)]
    pub(crate) fn articles(&self) -> &[Article] {
        &self.articles
    }

    /// The best articles for `query`, best first.
    pub(crate) fn search(&self, query: &str, limit: usize) -> Vec<&Article> {
        self.index.search(query, limit).into_iter().map(|h| &self.articles[h.index]).collect()
    }

    /// The answer to `query`: the best article's text, citing it, and a related article when
    /// one scores close.
    pub(crate) fn answer(&self, query: &str) -> String {
        let hits = self.index.search(query, 2);
        let Some(best) = hits.first() else {
            return "I couldn't find a help-center article about that. You can reach a person from \
                    Profile > Help > Contact us."
                .to_owned();
        };
        let article = &self.articles[best.index];
        let mut text = format!(
            "{}\n\n(Source: help-center article \"{}\", help/{})",
            article.body, article.title, article.slug
        );
        if let Some(related) = hits.get(1).filter(|h| h.score >= best.score * RELATED_SHARE) {
            let related = &self.articles[related.index];
            text.push_str(&format!("\nRelated: \"{}\" (help/{})", related.title, related.slug));
        }
        text
    }
}

/// Name of the [`SearchHelpCenter`] tool.
pub(crate) const SEARCH_HELP_CENTER: &str = "search_help_center";

/// The help center as a tool: the best articles for a query, for any agent that answers from it.
#[derive(Debug, Clone)]
pub(crate) struct SearchHelpCenter {
    help: Arc<HelpCenter>,
}

impl SearchHelpCenter {
    /// The tool over `help`.
    pub(crate) fn new(help: Arc<HelpCenter>) -> SearchHelpCenter {
        SearchHelpCenter { help }
    }
}

#[async_trait::async_trait]
impl baton::tool::Tool for SearchHelpCenter {
    fn name(&self) -> &str {
        SEARCH_HELP_CENTER
    }

    fn description(&self) -> &str {
        "Search the help center: the best articles for the user's question, with their text and citation."
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {
            "query": {"type": "string", "minLength": 1, "description": "The question, in the user's words."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 5, "description": "How many articles (default 2)."},
        }, "required": ["query"], "additionalProperties": false})
    }

    async fn call(
        &self,
        arguments: serde_json::Value,
        _context: &baton::tool::ToolContext,
    ) -> Result<serde_json::Value, baton::tool::ToolError> {
        let query = arguments["query"].as_str().unwrap_or_default().to_owned();
        let limit = arguments["limit"].as_u64().unwrap_or(2) as usize;
        let articles: Vec<serde_json::Value> = self
            .help
            .search(&query, limit)
            .into_iter()
            .map(|a| {
                serde_json::json!({"title": a.title, "category": a.category, "text": a.body,
                    "citation": format!("help/{}", a.slug)})
            })
            .collect();
        Ok(serde_json::json!({"query": query, "articles": articles}))
    }
}

/// The support agent when no Forethought token is configured.
#[derive(Debug, Clone)]
pub(crate) struct HelpCenterAgent {
    help: Arc<HelpCenter>,
}

impl HelpCenterAgent {
    /// The agent over `help`.
    pub(crate) fn new(help: Arc<HelpCenter>) -> HelpCenterAgent {
        HelpCenterAgent { help }
    }
}

impl Agent for HelpCenterAgent {
    fn name(&self) -> &str {
        "support"
    }

    fn run(&self, request: AgentRequest, instance: String) -> EventStream {
        let help = self.help.clone();
        Box::pin(async_stream::stream! {
            // Earlier context helps retrieval too ("it still didn't" → the article about it).
            let query = match &request.prior_context {
                Some(ctx) => format!("{} {ctx}", request.query),
                None => request.query.clone(),
            };
            if query.trim().is_empty() {
                yield Event::error(instance.clone(), "empty_query", "support was asked nothing", false);
                yield Event::text(instance.clone(), SUPPORT_APOLOGY);
                return;
            }
            yield Event::ResponseId { agent: instance.clone(), id: format!("ft_offline_{}", uuid::Uuid::new_v4().simple()) };
            // Sentence by sentence, like the vendor's chunks.
            for piece in help.answer(&query).split_inclusive(". ") {
                yield Event::text(instance.clone(), piece);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[test]
    fn every_shipped_article_parses_and_every_category_is_covered() {
        let help = HelpCenter::embedded();
        assert!(help.articles().len() >= 30, "{}", help.articles().len());
        let config = crate::reference_config();
        let routing = config.agents.get("orchestrator").and_then(|a| a.routing.clone()).unwrap();
        for category in routing.categories {
            assert!(help.articles().iter().any(|a| a.category == category), "no article for {category}");
        }
    }

    #[test]
    fn malformed_articles_are_refused_with_the_reason() {
        assert!(Article::parse("x", "no front matter").unwrap_err().reason.contains("---"));
        let missing = Article::parse("x", "---\ntitle: T\ncategory: c\n---\nbody").unwrap_err();
        assert!(missing.reason.contains("keywords"), "{missing}");
    }

    #[test]
    fn questions_find_their_article() {
        let help = HelpCenter::embedded();
        let top = |q: &str| help.search(q, 1)[0].slug.clone();
        assert_eq!(top("my receipt didn't scan"), "receipt-did-not-scan");
        assert_eq!(top("where are my points from yesterday's receipt?"), "missing-points");
        assert_eq!(top("how do I connect my email for e-receipts"), "ereceipts-connect");
        assert_eq!(top("my friend used my referral code but I got nothing"), "referral-missing");
        assert_eq!(top("cancel point pass refund"), "point-pass-billing");
        assert_eq!(top("I forgot my password"), "profile-password");
    }

    #[tokio::test]
    async fn the_answer_streams_in_pieces_and_cites_its_article() {
        let agent = HelpCenterAgent::new(Arc::new(HelpCenter::embedded()));
        let request = AgentRequest { query: "my receipt didn't scan".into(), ..Default::default() };
        let events: Vec<Event> = agent.run(request, "support[1]".into()).collect().await;
        assert!(matches!(&events[0], Event::ResponseId { id, .. } if id.starts_with("ft_")));
        let texts: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                Event::Text { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert!(texts.len() > 3, "streamed in pieces");
        let answer = texts.concat();
        assert!(answer.starts_with("If the app could not read your receipt"), "{answer}");
        assert!(
            answer.contains(
                "(Source: help-center article \"My receipt didn't scan\", help/receipt-did-not-scan)"
            )
        );
    }

    #[test]
    fn an_unrelated_question_says_so() {
        assert!(HelpCenter::embedded().answer("zebra xylophone").starts_with("I couldn't find"));
    }
}
