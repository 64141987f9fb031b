# Relay — the two commands a newcomer needs are `make demo` and `make test`.
# Both create .venv and install what they need on a fresh machine (Python 3.11+ and PyPI only).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint unit bench serve clean chart-examples

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)  ## Relay on embedded SQLite + a fake upstream + a demo catalog, until Ctrl-C
	$(BIN)/relay demo

lint: $(STAMP)  ## ruff, mypy on src/, import-linter contracts (ARCHITECTURE.md rule 3)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# Test workers (pytest-xdist). Tests wait on processes and sockets much of the time, so 3 beat 2 on
# a 2-core machine; `make test TEST_WORKERS=0` runs in one process. See tests/README.md.
TEST_WORKERS ?= 3

test: lint  ## lint, then every test in parallel workers (real Postgres and Redis on 127.0.0.1; see README)
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup

bench: $(STAMP)  ## benchmarks: print figures next to a baseline measured in the same run
	$(BIN)/python bench/fake_upstream_speed.py
	$(BIN)/python bench/live_overhead.py
	$(BIN)/python bench/batch_throughput.py

chart-examples: $(STAMP)  ## re-render deploy/helm/relay/examples/*.yaml with real Helm (review the diff)
	$(BIN)/python -m tests.deploy.helm_render

serve: $(STAMP)
	$(BIN)/relay serve

clean:
	rm -rf $(VENV) relay-data relay-batch-payloads .pytest_cache .mypy_cache .ruff_cache
