//! Small-corpus full-text retrieval: BM25 ranking (the `bm25` crate) over an English tokenizer
//! that lowercases, drops stop words and stems ("scanned" and "scanning" both find "scan").
//!
//! Used by the reference deployment's offline agents and tools (articles, offers). Ties are
//! broken by document order, so results are deterministic.

use std::sync::OnceLock;

use bm25::{Embedder, EmbedderBuilder, Scorer, Tokenizer};
use rust_stemmers::{Algorithm, Stemmer};

/// Words too common to say anything about a document, sorted (looked up by binary search).
const STOP_WORDS: &[&str] = &[
    "a", "about", "all", "am", "an", "and", "any", "are", "as", "at", "be", "been", "but", "by", "can",
    "could", "did", "do", "does", "for", "from", "get", "got", "had", "has", "have", "how", "i", "i'm", "if",
    "in", "into", "is", "it", "it's", "its", "just", "me", "my", "of", "on", "or", "our", "please", "so",
    "some", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "to", "too",
    "was", "we", "were", "what", "when", "where", "which", "who", "why", "will", "with", "would", "you",
    "your",
];

/// Lowercases, splits on anything but letters, digits and apostrophes, drops stop words and
/// stems.
pub(crate) struct EnglishTokenizer {
    stemmer: Stemmer,
}

impl Default for EnglishTokenizer {
    fn default() -> Self {
        EnglishTokenizer { stemmer: Stemmer::create(Algorithm::English) }
    }
}

impl Tokenizer for EnglishTokenizer {
    fn tokenize(&self, input_text: &str) -> Vec<String> {
        input_text
            .split(|c: char| !(c.is_alphanumeric() || c == '\''))
            .map(|w| w.trim_matches('\'').to_lowercase())
            .filter(|w| !w.is_empty() && STOP_WORDS.binary_search(&w.as_str()).is_err())
            .map(|w| {
                // "didn't" → "didn"; the stemmer handles the rest ("receipts" → "receipt").
                let w = w.split('\'').next().unwrap_or_default();
                self.stemmer.stem(w).into_owned()
            })
            .filter(|w| !w.is_empty())
            .collect()
    }
}

/// One ranked hit: the document's position in the corpus and its BM25 score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Index into the corpus the index was built from.
    pub index: usize,
    /// BM25 score; higher is better, always above zero.
    pub score: f32,
}

/// A BM25 index over a fixed corpus, built on its first search.
///
/// Building it tokenizes and stems every document (about 10 ms for the shipped articles and
/// offers), so a process that never searches never pays for it, and one that does pays once,
/// not before it can serve (`serve` listens, and a Lambda asks for its first invocation, sooner).
pub struct SearchIndex {
    corpus: Vec<String>,
    built: OnceLock<Built>,
}

struct Built {
    embedder: Embedder<u32, EnglishTokenizer>,
    scorer: Scorer<usize>,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("documents", &self.corpus.len())
            .field("built", &self.built.get().is_some())
            .finish_non_exhaustive()
    }
}

impl SearchIndex {
    /// An index of `corpus`; a hit's `index` is the position of its document here.
    pub fn new<S: AsRef<str>>(corpus: &[S]) -> SearchIndex {
        SearchIndex { corpus: corpus.iter().map(|s| s.as_ref().to_owned()).collect(), built: OnceLock::new() }
    }

    fn built(&self) -> &Built {
        self.built.get_or_init(|| {
            let texts: Vec<&str> = self.corpus.iter().map(String::as_str).collect();
            let embedder = EmbedderBuilder::<u32, EnglishTokenizer>::with_tokenizer_and_fit_to_corpus(
                EnglishTokenizer::default(),
                &texts,
            )
            .build();
            let mut scorer = Scorer::new();
            for (i, text) in self.corpus.iter().enumerate() {
                scorer.upsert(&i, embedder.embed(text));
            }
            Built { embedder, scorer }
        })
    }

    /// Whether the first search has built the index yet.
    #[cfg(test)]
    pub(crate) fn is_built(&self) -> bool {
        self.built.get().is_some()
    }

    /// The best `limit` documents for `query`, best first; documents sharing no term with the
    /// query are never returned.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        let Built { embedder, scorer } = self.built();
        let query = embedder.embed(query);
        let mut hits: Vec<Hit> = scorer
            .matches(&query)
            .into_iter()
            .filter(|m| m.score > 0.0)
            .map(|m| Hit { index: m.id, score: m.score })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
        hits.truncate(limit);
        hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_words_are_sorted_for_binary_search() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]), "STOP_WORDS must stay sorted and unique");
    }

    #[test]
    fn tokenizer_stems_and_drops_stop_words() {
        let t = EnglishTokenizer::default();
        assert_eq!(t.tokenize("My receipts didn't SCAN"), ["receipt", "didn", "scan"]);
        assert_eq!(t.tokenize("scanning scanned"), ["scan", "scan"]);
    }

    #[test]
    fn the_most_relevant_document_comes_first() {
        let index = SearchIndex::new(&[
            "Coffee offers: points on ground coffee and beans.",
            "Receipts that did not scan: retake the photo in good light.",
            "Referral bonus: invite friends and earn points.",
        ]);
        let hits = index.search("my receipt didn't scan", 3);
        assert_eq!(hits[0].index, 1);
        assert!(hits.iter().all(|h| h.index != 2), "no shared term, no hit: {hits:?}");
        assert!(index.search("weather tomorrow", 3).is_empty());
    }

    #[test]
    fn the_index_is_built_by_the_first_search_only() {
        let index = SearchIndex::new(&["tea deal", "coffee deal"]);
        assert!(!index.is_built(), "building an index is left to its first search");
        assert_eq!(index.search("coffee", 1)[0].index, 1);
        assert!(index.is_built());
    }

    #[test]
    fn ties_keep_corpus_order() {
        let index = SearchIndex::new(&["tea deal", "tea deal", "tea deal"]);
        let order: Vec<usize> = index.search("tea", 3).iter().map(|h| h.index).collect();
        assert_eq!(order, [0, 1, 2]);
    }
}
