#!/usr/bin/env bash
# The one test command (`make test`; CI runs exactly this through .ci/run).
# Format, lints, docs, the SAM template checks, then every test of the workspace (the Lambda
# functions included, under `cargo lambda watch`). Needs cargo and python3 (with venv):
# the DynamoDB store's tests run against a real moto_server, which this script installs into
# .venv (once), starts on a free loopback port, and stops when it exits.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# A clean CI clone builds everything once: incremental caches would only add ~2.5 GB of disk.
if [[ "${CI:-}" == true ]]; then
    export CARGO_INCREMENTAL=0
fi

step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings
step "cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

step "no import circles (modules and rooms), and no module using one its crate's Layout lists above it"
python3 scripts/import_circles.py --self-test
for crate_src in shared/*/src functions/*/src; do
    circles=$(python3 scripts/import_circles.py "$crate_src")
    if [[ "$(tail -n 1 <<<"$circles")" != 0 ]]; then
        echo "$crate_src:" >&2
        echo "$circles" >&2
        exit 1
    fi
done
echo "none"

step "the wall: the runtime crates name no reference agent or vendor outside their tests"
for crate_src in shared/baton/src shared/baton-aws/src; do
    wall=$(python3 scripts/check_wall.py "$crate_src")
    if [[ "$(tail -n 1 <<<"$wall")" != 0 ]]; then
        echo "$wall" >&2
        exit 1
    fi
done
echo "none"

step "the docs: every path they name exists, the event table matches the Event enum"
missing=$(python3 scripts/check_docs.py)
if [[ "$(tail -n 1 <<<"$missing")" != 0 ]]; then
    echo "$missing" >&2
    exit 1
fi
echo "none missing"

step "moto_server (local DynamoDB for the store tests)"
requirements=scripts/requirements-test.txt
if [[ ! -x .venv/bin/moto_server ]] || ! cmp -s "$requirements" .venv/requirements-test.txt; then
    python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" .venv/requirements-test.txt
fi
port=$(.venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
moto_log=$(mktemp -t baton-moto.XXXXXX.log)
# moto with its DynamoDB writes made atomic, as DynamoDB's are (scripts/moto_server.py).
.venv/bin/python scripts/moto_server.py -H 127.0.0.1 -p "$port" >"$moto_log" 2>&1 &
moto_pid=$!
trap 'kill "$moto_pid" 2>/dev/null || true; wait "$moto_pid" 2>/dev/null || true; rm -f "$moto_log"' EXIT
export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$port"
if ! .venv/bin/python - "$AWS_ENDPOINT_URL_DYNAMODB" <<'PY'
import sys, time, urllib.request
deadline = time.monotonic() + 60
while True:
    try:
        urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/moto-api/reset", method="POST"), timeout=2)
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(1)
        time.sleep(0.2)
PY
then
    echo "moto_server did not start; its log:" >&2
    cat "$moto_log" >&2
    exit 1
fi
echo "moto_server on $AWS_ENDPOINT_URL_DYNAMODB"
# The Lambda tests run `cargo lambda` from the same virtual environment.
export BATON_TEST_VENV="$PWD/.venv"

step "MCP test servers and conformance suite (npm, into tests/mcp/node_modules)"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    sudo_if_needed=$([[ $(id -u) -eq 0 ]] && echo "" || echo sudo)
    $sudo_if_needed apt-get update -qq && $sudo_if_needed apt-get install -y -qq nodejs npm
fi
if ! cmp -s tests/mcp/package-lock.json tests/mcp/node_modules/.installed-lock.json; then
    (cd tests/mcp && npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.installed-lock.json)
fi

step "OpenAPI test server: Stoplight Prism (npm, into tests/openapi/node_modules)"
if ! cmp -s tests/openapi/package-lock.json tests/openapi/node_modules/.installed-lock.json; then
    (cd tests/openapi && npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.installed-lock.json)
fi

step "AG-UI and AI SDK official clients (npm, into tests/protocols/node_modules)"
if ! cmp -s tests/protocols/package-lock.json tests/protocols/node_modules/.installed-lock.json; then
    (cd tests/protocols && npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.installed-lock.json)
fi

step "A2A: the official Python SDK (a2a-sdk, from requirements-test.txt) for tests/tests/a2a.rs"
.venv/bin/python -c 'import importlib.metadata as m, a2a.client, a2a.server; print("a2a-sdk", m.version("a2a-sdk"))'

step "SAM template: sam validate --lint, and what it deploys per auth mode (SAM's translator, offline)"
SAM_CLI_TELEMETRY=0 .venv/bin/sam validate --lint
.venv/bin/python -m pytest -q -p no:cacheprovider tests/template

step "make preflight against moto_server (a passing account and each failure; scripts/preflight.py)"
.venv/bin/python -m pytest -q -p no:cacheprovider tests/preflight

step "checkov on template.yaml (findings fixed, or suppressed in the template with a reason)"
# Its own virtual environment: checkov pins urllib3 and packaging below what the tools above need.
checkov_requirements=scripts/requirements-checkov.txt
if [[ ! -x .venv-checkov/bin/checkov ]] || ! cmp -s "$checkov_requirements" .venv-checkov/requirements.txt; then
    python3 -m venv .venv-checkov
    .venv-checkov/bin/pip install --quiet --disable-pip-version-check -r "$checkov_requirements"
    cp "$checkov_requirements" .venv-checkov/requirements.txt
fi
# --skip-download: nothing is fetched from the vendor (this machine reaches only package registries).
timeout 600 .venv-checkov/bin/checkov --file template.yaml --framework cloudformation --compact --quiet --skip-download

step "cargo test"
cargo test --workspace --locked

step "a team's crate outside the workspace (examples/own-tool: fmt, clippy, its test)"
# Built in the workspace's target directory, so only baton, baton-aws and the example compile.
example_target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo fmt --manifest-path examples/own-tool/Cargo.toml -- --check
CARGO_TARGET_DIR="$example_target" cargo clippy --manifest-path examples/own-tool/Cargo.toml --all-targets --locked -- -D warnings
CARGO_TARGET_DIR="$example_target" cargo test --manifest-path examples/own-tool/Cargo.toml --locked

step "Lambda functions under cargo lambda watch (outside cargo's build lock)"
lambda_test=$(cargo test -p baton-tests --test lambda --no-run --locked --message-format=json 2>/dev/null \
    | .venv/bin/python -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("executable") and m.get("target", {}).get("name") == "lambda":
        print(m["executable"])')
# Bounded: a hung emulator fails the run instead of holding CI.
timeout 900 "$lambda_test" --ignored --test-threads=1


step "Browser: the JS client's SSE parser (node --test), the chat page, the protocol example pages and eval report in headless Chromium"
# Debian's Chromium and its WebDriver, installed once (CI runs as root; elsewhere through sudo).
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null || ! command -v node >/dev/null; then
    as_root=(); [[ $(id -u) -eq 0 ]] || as_root=(sudo)
    "${as_root[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq chromium chromium-driver nodejs >/dev/null
fi
node --test tests/browser/
# The example pages' official clients, bundled (esbuild, well under a second) for their browser test.
if ! cmp -s examples/protocol-pages/package-lock.json examples/protocol-pages/node_modules/.installed-lock.json; then
    (cd examples/protocol-pages && npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.installed-lock.json)
fi
(cd examples/protocol-pages && npm run --silent build)
cargo build -p orchestrator -p eval --locked --quiet
cargo build -p baton-tests --example scripted_server --locked --quiet
BATON_TEST_OUTPUT="$PWD/target/browser-test-output" timeout 600 .venv/bin/python -m pytest -q -p no:cacheprovider tests/browser
echo "browser screenshots: target/browser-test-output/"
