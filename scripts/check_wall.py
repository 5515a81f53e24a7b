#!/usr/bin/env python3
"""The wall between the generic runtime and the reference deployment: the runtime crate's non-test code
(docs and comments included) names no reference agent or vendor. Fails, listing each line, on the
words support, shopping, Forethought and help center (any case, any separator), outside `#[cfg(test)]`
modules and test files (`tests.rs`, `testing.rs`, `*_tests.rs`).
Usage: check_wall.py CRATE_SRC_DIR  -> prints each offending line, then their count on the last line."""
import re, sys, pathlib

# `support` as a name (`support`, `Support`, `support_category`, `SupportSessions`, `SUPPORT_KIND`),
# not the English word inside `supports` or `unsupported`: case matters here.
SUPPORT = re.compile(r'(?<![a-z])[sS]upport(?![a-z])|(?<![A-Za-z])SUPPORT(?![A-Z])|[A-Za-z]Support(?![a-z])')
# The other names, in any case.
OTHERS = re.compile(r'shopping|forethought|help[\s_-]?center', re.I)

def non_test_lines(text):
    """The lines before a `#[cfg(test)]` that opens a module (the crate's convention: tests last)."""
    lines = text.split('\n')
    for i, line in enumerate(lines):
        if line.strip() == '#[cfg(test)]' and i + 1 < len(lines) and re.match(r'\s*(pub(\(crate\))? )?mod \w+', lines[i + 1]):
            break
        yield i + 1, line

src = pathlib.Path(sys.argv[1])
found = 0
for path in sorted(src.rglob('*.rs')):
    if path.name in ('tests.rs', 'testing.rs') or path.name.endswith('_tests.rs'):
        continue
    for number, line in non_test_lines(path.read_text(errors='replace')):
        if SUPPORT.search(line) or OTHERS.search(line):
            print(f'{path}:{number}: {line.strip()}')
            found += 1
print(found)
