#!/usr/bin/env python3
"""The docs against the repository.

Every repository path the docs name exists: the relative links of docs/*.md and README.md, and
the paths they quote in code spans (`shared/baton/src/outbound/cleartext.rs`, `http/wire.rs`: a
file name with its extension, or a folder with its `/`), matched against the tracked files as a
suffix (a path relative to a crate's `src/` counts). Paths a build or a test writes (`target/`,
`.venv/`, `node_modules/`, screenshots) and HTTP routes (`GET/...`) are not checked.

The event table of docs/architecture.md ("The event protocol") has one row per variant of
`baton::event::Event` (by its wire name), and no other.

Usage: check_docs.py  (from anywhere in the repository) -> each missing path as `doc: path` and
each event the table lacks or has too many, then their count on the last line."""
import pathlib
import re
import subprocess

root = pathlib.Path(subprocess.run(['git', 'rev-parse', '--show-toplevel'], capture_output=True,
                                   text=True, check=True).stdout.strip())
files = set(subprocess.run(['git', 'ls-files'], cwd=root, capture_output=True, text=True,
                           check=True).stdout.split())
dirs = {'/'.join(f.split('/')[:i]) + '/' for f in files for i in range(1, f.count('/') + 1)}
EXT = r'\.(?:rs|md|py|sh|ya?ml|toml|json|js|mjs|html|css|txt|csv|jsonl|lock|svg)'
SKIP = ('target/', '.venv/', 'node_modules/', 'tests/mcp/node_modules', '/')


def exists(path):
    have = dirs if path.endswith('/') else files
    return path in have or any(p.endswith('/' + path) for p in have)


missing = []
for doc in sorted(root.glob('docs/*.md')) + [root / 'README.md']:
    text = doc.read_text()
    name = doc.relative_to(root)
    for link in re.findall(r'\]\(([^)\s#]+)(?:#[^)]*)?\)', text):
        if '://' in link or link.startswith('mailto:'):
            continue
        target = (doc.parent / link).resolve()
        rel = str(target.relative_to(root)) if target.is_relative_to(root) else link
        if rel not in files and rel + '/' not in dirs:
            missing.append(f'{name}: {link}')
    for path in re.findall(r'`([\w./-]+)`', text):
        quoted = re.fullmatch(r'[\w./-]+' + EXT, path) or (path.endswith('/') and len(path) > 1)
        if not quoted or path.startswith(SKIP) or re.match(r'[A-Z]+/', path):
            continue
        if not exists(path.removeprefix('./')):
            missing.append(f'{name}: {path}')


def wire_names(source):
    """The wire names of the `Event` enum's variants: snake_case, or their `serde(rename)`."""
    body = re.search(r'pub enum Event \{(.*?)\n\}', source, re.S).group(1)
    names, rename = [], None
    for line in body.split('\n'):
        if m := re.match(r'    #\[serde\(rename = "([^"]+)"\)\]', line):
            rename = m.group(1)
        elif m := re.match(r'    ([A-Z]\w*)\b', line):
            names.append(rename or re.sub(r'(?<!^)([A-Z])', r'_\1', m.group(1)).lower())
            rename = None
    return set(names)


def table_names(doc):
    """The events the first column of the event table names (`a` / `b`; `p.x` / `y` is `p.y`)."""
    section = doc.split('## The event protocol', 1)[1].split('\n## ', 1)[0]
    names = set()
    for row in re.findall(r'^\| (`[^|]*`) \|', section, re.M):
        prefix = ''
        for name in re.findall(r'`([\w.]+)`', row):
            prefix = name.rsplit('.', 1)[0] + '.' if '.' in name else prefix
            names.add(name if '.' in name else prefix + name)
    return names


events = wire_names((root / 'shared/baton/src/event/mod.rs').read_text())
table = table_names((root / 'docs/architecture.md').read_text())
missing += [f'docs/architecture.md: event `{e}` has no row' for e in sorted(events - table)]
missing += [f'docs/architecture.md: `{e}` is no event' for e in sorted(table - events)]
print('\n'.join(missing + [str(len(missing))]))
