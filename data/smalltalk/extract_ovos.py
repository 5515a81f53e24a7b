"""Extracts labelled rows for the smalltalk check's learned reading from OpenVoiceOS skills nobody on
the project wrote (PyPI; Apache-2.0, see LICENCE-ovos), into ovos.yaml beside this script.

    python3 -m pip download --no-deps -d /tmp/ovos ovos-skill-hello-world==0.2.1 \
        ovos-skill-personal==0.1.19 ovos-skill-weather==1.0.6 ovos-skill-date-time==1.1.5 \
        ovos-skill-wikipedia==0.8.13 ovos-skill-icanhazdadjokes==0.3.7 ovos-skill-naptime==0.3.15 \
        ovos-skill-spelling==0.2.6
    python3 data/smalltalk/extract_ovos.py /tmp/ovos

Labels are the skills' own intents: hello-world's `Greetings` and `HowAreYou` and personal's
`WhoAreYou` ("who are you?", the project's chitchat) are smalltalk (personal's other intents, what
made the assistant and where, are left out: they ask about facts), and so are the assistant's
lines in those exchanges, hello-world's dialogs `hello`, `how.are.you` and `welcome` ("I'm doing
well", "could be better", "you're welcome");
every intent of the weather, date-time, Wikipedia, jokes, naptime and spelling skills (a forecast, the
time, a fact, a joke, a command) is a request. Intent files are Padatious templates: alternatives
`(a|b)` and optional parts `[a]` are expanded; a line with a slot (`{location}`) is left out, as the
slot would need words the project writes. At most PER_INTENT lines per intent and language (in
the expansion's order) keep the data the check learns from on first use small. Only the languages
the check supports are kept.
"""

import itertools
import re
import sys
import zipfile
from pathlib import Path

import yaml

HERE = Path(__file__).parent
LANGUAGES = {"en": "en", "es": "es", "fr": "fr", "pt": "pt", "de": "de", "it": "it", "nl": "nl", "pl": "pl"}
SMALLTALK = {"Greetings", "HowAreYou", "WhoAreYou"}
# The assistant's own lines in those exchanges (hello-world's dialogs): a greeting, how it is
# ("I'm doing well", "could be better"), and "you're welcome".
SMALLTALK_REPLIES = {"hello.dialog", "how.are.you.dialog", "welcome.dialog"}
SMALLTALK_SKILLS = {"ovos_skill_hello_world", "ovos_skill_personal"}
REQUEST_SKILLS = {"ovos_skill_weather", "ovos_skill_date_time", "ovos_skill_wikipedia",
                  "ovos_skill_icanhazdadjokes", "ovos_skill_naptime", "ovos_skill_spelling"}
PER_INTENT = 30


def expand(template):
    """Every sentence a Padatious template stands for: `(a|b)` and `[a]` (an optional part)."""
    template = re.sub(r"\[([^\[\]]*)\]", r"(\1|)", template)
    pieces = re.split(r"(\([^()]*\))", template)
    options = [p[1:-1].split("|") if p.startswith("(") else [p] for p in pieces]
    for combo in itertools.product(*options):
        yield " ".join("".join(combo).split())


def main(folder):
    smalltalk, requests = {}, {}
    for wheel in sorted(Path(folder).glob("ovos_skill_*.whl")):
        with zipfile.ZipFile(wheel) as z:
            for name in sorted(z.namelist()):
                parts = name.split("/")
                if not name.endswith((".intent", ".dialog")) or "locale" not in parts or "vocabulary" in parts:
                    continue
                skill, language = parts[0], parts[parts.index("locale") + 1].split("-")[0]
                intent = parts[-1].removesuffix(".intent")
                if language not in LANGUAGES:
                    continue
                if skill in SMALLTALK_SKILLS and (intent in SMALLTALK or intent in SMALLTALK_REPLIES):
                    target = smalltalk.setdefault(LANGUAGES[language], [])
                elif skill in REQUEST_SKILLS and name.endswith(".intent"):
                    target = requests.setdefault(LANGUAGES[language], [])
                else:
                    continue
                kept = 0
                for line in z.read(name).decode("utf-8").splitlines():
                    line = line.strip()
                    if not line or line.startswith("#") or "{" in line:
                        continue
                    for sentence in expand(line):
                        if kept < PER_INTENT and sentence and sentence not in target:
                            target.append(sentence)
                            kept += 1
    with open(HERE / "ovos.yaml", "w", encoding="utf-8") as f:
        f.write("# Extracted by extract_ovos.py from OpenVoiceOS skills (PyPI; Apache-2.0, see LICENCE-ovos).\n"
                "# Tuned on: the smalltalk check's learned reading trains on it.\n")
        yaml.safe_dump({"ovos": {"smalltalk": smalltalk, "requests": requests}}, f, allow_unicode=True,
                       sort_keys=True, width=200)


if __name__ == "__main__":
    main(sys.argv[1])
