"""Extracts the sentiment word lists the smalltalk check's learned reading uses (sentiment.yaml beside
this script) from the sentiment lexicons that nlp.js ships in node-nlp 3.10.2 (npm; MIT, see
LICENCE-nlpjs, which also names the lexicons' own sources and licences).

    (cd /tmp && npm pack node-nlp@3.10.2)
    python3 data/smalltalk/extract_sentiment.py /tmp/node-nlp-3.10.2.tgz

The learned reading drops from both lists any word the smalltalk vocabulary or a function-word list
uses (French "fine", Dutch "bot"): a sentiment word of one language may be another's plain word.

- `negative_words`: every single word the lexicon scores below zero. The learned reading never takes a
  message with one of them ("I feel awful", "me siento fatal"): a sensitive remark is the model's.
- `positive_words`: single words scored strongly positive (AFINN 2 or more, Pattern 0.3 or more). The
  learned reading lets one of them head a message that is not a question ("super stoked").

German and Polish have no lexicon there under a licence this project can keep (German's is
ML-SentiCon); their sensitive words are the hand-written ones in signals.yaml.
"""

import json
import sys
import tarfile
from pathlib import Path

import yaml

HERE = Path(__file__).parent
LEXICONS = {  # language: (file in the package, threshold for `positive`)
    "en": ("afinn_en.json", 2),
    "es": ("afinn_es.json", 2),
    "pt": ("afinn_pt.json", 2),
    "fr": ("pattern_fr.json", 0.3),
    "it": ("pattern_it.json", 0.3),
    "nl": ("pattern_nl.json", 0.3),
}


def main(tarball):
    out = {}
    with tarfile.open(tarball) as t:
        for language, (name, strong) in LEXICONS.items():
            lexicon = json.load(t.extractfile(f"package/lib/sentiment/languages/{language}/{name}"))
            words = {w.lower(): v for w, v in lexicon.items() if w.replace("'", "").isalpha()}
            out[language] = {
                "negative_words": sorted(w for w, v in words.items() if v < 0),
                "positive_words": sorted(w for w, v in words.items() if v >= strong),
            }
    with open(HERE / "sentiment.yaml", "w", encoding="utf-8") as f:
        f.write("# Extracted by extract_sentiment.py from node-nlp 3.10.2 (npm; MIT, see LICENCE-nlpjs): the\n"
                "# sentiment lexicons of nlp.js (AFINN for en, es, pt; Pattern for fr, it, nl).\n")
        yaml.safe_dump(out, f, allow_unicode=True, sort_keys=True, width=120, default_flow_style=None)


if __name__ == "__main__":
    main(sys.argv[1])
