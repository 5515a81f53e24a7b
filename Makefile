# Baton: the README's commands.
.PHONY: run test bench serve preflight

MESSAGE ?= my receipt didn't scan and find me coffee deals

# One chat turn on embedded defaults: offline model, no key, no cloud account.
run:
	cargo run --release -p orchestrator -- chat "$(MESSAGE)"

# Serve the SSE chat endpoint on 127.0.0.1:3000.
serve:
	cargo run --release -p orchestrator -- serve

# Format, lints, docs and every test (what CI runs).
test:
	bash scripts/test.sh

# Benchmarks: turn overhead, mux throughput, Lambda cold start, serve start/memory, and the
# latency a client sees over real HTTP, mini-agents on vs off, the durable turn log (on vs off in process and through HTTP, resume, DynamoDB units), approvals (paused and resumed vs plain), Baton's cleartext HTTP/1.1 client vs reqwest. `make bench ONLY=serve` (or turn, agents,
# mux, lambda, latency, store, cleartext, minis, log, resume, dynamodb, approvals) for one section; BATON_BENCH_BASELINE=path/to/orchestrator[:another] compares other builds
# in the latency section. See docs/benchmarks.md.
bench:
	cargo build --release -p orchestrator -p shopping -p eval
	cargo bench -p baton-tests -- $(ONLY)

# Before a first `sam deploy`: credentials, region, concurrency, API Gateway's logging role, the
# build tools on PATH, the secrets and config the parameters name (docs/deployment.md).
# `make preflight PARAMS="AuthMode=jwt JwtPublicKeySecretArn=arn:..."` (as --parameter-overrides).
PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
preflight:
	$(PYTHON) scripts/preflight.py $(PARAMS)
