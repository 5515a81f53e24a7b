#!/usr/bin/env bash
# The one test command (`make test`; CI runs exactly this through .ci/run).
# Format, lints, docs, then every test of the workspace. Needs only cargo.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings
step "cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
step "cargo test"
cargo test --workspace --locked
