//! The smalltalk corpus (`data/routing/smalltalk-corpus.yaml`): messages labelled smalltalk or
//! request, in six languages, in a part looked at while the type check was written and a part held
//! out. Scored here for the test that holds the check to it and for `routing-eval`'s report.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Deserialize;

use super::SuiteError;
use baton::text::Lexicon;

/// The labelled smalltalk corpus, embedded.
pub const SMALLTALK_CORPUS: &str = include_str!("../../../data/routing/smalltalk-corpus.yaml");

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CorpusPart {
    smalltalk: BTreeMap<String, Vec<String>>,
    requests: BTreeMap<String, Vec<String>>,
}

/// How the smalltalk check does on one part of the corpus.
#[derive(Debug, Clone, PartialEq)]
pub struct CorpusScore {
    /// The part (`tuning`, `held_out`).
    pub part: String,
    /// Smalltalk messages in it.
    pub smalltalk: usize,
    /// Requests in it.
    pub requests: usize,
    /// Smalltalk messages not recognised, as `language: message`.
    pub missed: Vec<String>,
    /// Requests taken for smalltalk, as `language: message`: each one a request the fastpath
    /// would let the model answer directly.
    pub passed: Vec<String>,
}

impl CorpusScore {
    /// Smalltalk recognised, of all smalltalk, in percent.
    pub fn recall(&self) -> f64 {
        percent(self.smalltalk - self.missed.len(), self.smalltalk)
    }

    /// Smalltalk recognised, of all messages taken for smalltalk, in percent.
    pub fn precision(&self) -> f64 {
        let found = self.smalltalk - self.missed.len();
        percent(found, found + self.passed.len())
    }
}

fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 { 100.0 } else { 100.0 * part as f64 / whole as f64 }
}

/// Scores `lexicon` on each part of the corpus `yaml` (from `origin`).
pub fn score_smalltalk_corpus(
    lexicon: &Lexicon,
    yaml: &str,
    origin: &str,
) -> Result<Vec<CorpusScore>, SuiteError> {
    let corpus: BTreeMap<String, CorpusPart> = serde_yaml_ng::from_str(yaml)
        .map_err(|e| SuiteError::Invalid { origin: origin.to_owned(), message: e.to_string() })?;
    let labelled = |lists: &BTreeMap<String, Vec<String>>, smalltalk: bool| -> Vec<String> {
        lists
            .iter()
            .flat_map(|(language, messages)| messages.iter().map(move |m| (language, m)))
            .filter(|(_, m)| lexicon.classify(m).is_some() != smalltalk)
            .map(|(language, m)| format!("{language}: {m}"))
            .collect()
    };
    Ok(corpus
        .iter()
        .map(|(part, c)| CorpusScore {
            part: part.clone(),
            smalltalk: c.smalltalk.values().map(Vec::len).sum(),
            requests: c.requests.values().map(Vec::len).sum(),
            missed: labelled(&c.smalltalk, true),
            passed: labelled(&c.requests, false),
        })
        .collect())
}

/// The scores as JSON: per part its counts, recall and precision (in percent), and what it got
/// wrong.
pub fn corpus_json(scores: &[CorpusScore]) -> serde_json::Value {
    scores
        .iter()
        .map(|c| {
            serde_json::json!({"part": c.part, "smalltalk": c.smalltalk, "requests": c.requests,
                "recall": c.recall(), "precision": c.precision(), "missed": c.missed, "passed": c.passed})
        })
        .collect()
}

/// The scores as a table, with every request taken for smalltalk.
pub fn format_corpus(scores: &[CorpusScore]) -> String {
    let mut s =
        String::from("smalltalk type check on the labelled corpus (data/routing/smalltalk-corpus.yaml)\n");
    let _ = writeln!(
        s,
        "{:<10} {:>9} {:>8} {:>8} {:>10}",
        "part", "smalltalk", "recall", "requests", "precision"
    );
    for c in scores {
        let _ = writeln!(
            s,
            "{:<10} {:>9} {:>7.1}% {:>8} {:>9.1}%",
            c.part,
            c.smalltalk,
            c.recall(),
            c.requests,
            c.precision()
        );
    }
    for c in scores {
        for m in &c.passed {
            let _ = writeln!(s, "REQUEST TAKEN FOR SMALLTALK in {}: {m}", c.part);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check holds to its corpus: no request taken for smalltalk on any part, and a recall of
    /// 95 % or more on each, the parts held out included.
    #[test]
    fn smalltalk_corpus() {
        let scores = score_smalltalk_corpus(Lexicon::reference(), SMALLTALK_CORPUS, "corpus").unwrap();
        print!("{}", format_corpus(&scores));
        let parts: Vec<&str> = scores.iter().map(|c| c.part.as_str()).collect();
        assert_eq!(parts, ["held_out", "held_out_2", "tuning", "tuning_2", "tuning_3"]);
        for c in scores.iter().filter(|c| c.part.starts_with("tuning")) {
            for m in &c.missed {
                println!("  missed in {}: {m}", c.part);
            }
        }
        for c in &scores {
            assert!(c.smalltalk >= 70 && c.requests >= 50, "{c:?}");
            assert!(c.passed.is_empty(), "{}: requests taken for smalltalk: {:?}", c.part, c.passed);
            assert!(c.recall() >= 95.0, "{}: recall {:.1} %", c.part, c.recall());
        }
        let total = |f: fn(&CorpusScore) -> usize| scores.iter().map(f).sum::<usize>();
        assert!(total(|c| c.smalltalk) >= 300 && total(|c| c.requests) >= 300);
    }

    #[test]
    fn a_classifier_that_takes_everything_fails_on_precision() {
        let everything = Lexicon::new([&baton::text::SmalltalkLists {
            greetings: vec!["hi".into()],
            ..Default::default()
        }])
        .unwrap();
        let yaml = "p:\n  smalltalk: {en: [hi, hello]}\n  requests: {en: [hi, where are my points]}\n";
        let scores = score_smalltalk_corpus(&everything, yaml, "x").unwrap();
        assert_eq!(scores[0].missed, ["en: hello"]);
        assert_eq!(scores[0].passed, ["en: hi"]);
        assert_eq!(scores[0].recall(), 50.0);
        assert_eq!(scores[0].precision(), 50.0);
        assert!(format_corpus(&scores).contains("REQUEST TAKEN FOR SMALLTALK in p: en: hi"));
        assert_eq!(corpus_json(&scores)[0]["precision"], 50.0);
        assert_eq!(corpus_json(&scores)[0]["passed"][0], "en: hi");
        let bad = score_smalltalk_corpus(&everything, "p: {smalltak: {}}", "x.yaml").unwrap_err();
        assert!(bad.to_string().contains("x.yaml"), "{bad}");
    }
}
