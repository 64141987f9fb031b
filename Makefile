# Relay — the two commands a newcomer needs are `make demo` and `make test`.
# Both create .venv and install what they need on a fresh machine (Python 3.11+ and PyPI only).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint unit bench serve clean chart-examples lock sbom oidc-provider screenshots

# Dependencies come from requirements/dev.lock only: every version pinned, every file checked against
# its recorded hash (--require-hashes), nothing resolved beyond the lock (--no-deps), and Relay itself
# built with the lock's setuptools (--no-build-isolation). `make lock` refreshes the locks.
LOCK_FLAGS := --generate-hashes --universal --python-version 3.11 --upgrade --quiet

$(STAMP): pyproject.toml requirements/dev.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r requirements/dev.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $(STAMP)

lock: $(STAMP)  ## refresh requirements/{dev,runtime}.lock from pyproject.toml (newest allowed, hashed); review the diff
	$(BIN)/uv pip compile pyproject.toml requirements/build.in --extra dev $(LOCK_FLAGS) -o requirements/dev.lock
	$(BIN)/uv pip compile pyproject.toml requirements/build.in $(LOCK_FLAGS) -o requirements/runtime.lock

sbom: $(STAMP)  ## the CycloneDX SBOM of what the image installs (requirements/runtime.lock) → sbom.cdx.json
	$(BIN)/cyclonedx-py requirements requirements/runtime.lock --pyproject pyproject.toml \
		--of JSON --output-reproducible --validate -o sbom.cdx.json

# `make demo DEMO_ARGS="--upstream-port 9010 --bind 0.0.0.0"` passes flags on to `relay demo`.
DEMO_ARGS ?=

demo: $(STAMP)  ## Relay on embedded SQLite + a fake upstream + a demo catalog, until Ctrl-C
	$(BIN)/relay demo $(DEMO_ARGS)

lint: $(STAMP)  ## ruff, mypy on src/, import-linter contracts (ARCHITECTURE.md rule 3)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# Test workers (pytest-xdist). Tests wait on processes and sockets much of the time, so 3 beat 2 on
# a 2-core machine; `make test TEST_WORKERS=0` runs in one process. See tests/README.md.
TEST_WORKERS ?= 3

test: lint oidc-provider  ## lint, then every test in parallel workers (real Postgres and Redis on 127.0.0.1; see README)
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup

# The single sign-on tests' OpenID Provider (npm oidc-provider, pinned by its package-lock.json) in a
# tests-local node_modules; reinstalled only when the lock changes. Without npm the SSO tests skip,
# except under CI=true, where a missing npm or a failed install fails here.
OIDC_PROVIDER := tests/fixtures/oidc_provider
oidc-provider: $(OIDC_PROVIDER)/node_modules/.package-lock.json
$(OIDC_PROVIDER)/node_modules/.package-lock.json: $(OIDC_PROVIDER)/package-lock.json
	@if command -v npm >/dev/null; then cd $(OIDC_PROVIDER) && npm ci --no-audit --no-fund --loglevel=error; \
	elif [ "$$CI" = "true" ]; then echo "npm is missing (the SSO tests need Node.js 20.19+)"; exit 1; \
	else echo "npm is missing: the single sign-on tests will skip"; fi

bench: $(STAMP)  ## benchmarks: print figures next to a baseline measured in the same run
	$(BIN)/python bench/fake_upstream_speed.py
	$(BIN)/python bench/live_overhead.py
	$(BIN)/python bench/batch_throughput.py

screenshots: $(STAMP)  ## regenerate docs/images/dashboard/*.png: a relay with demo data, every page in Chromium
	$(BIN)/python -m tests.e2e.dashboard.screenshots

chart-examples: $(STAMP)  ## re-render deploy/helm/relay/examples/*.yaml with real Helm (review the diff)
	$(BIN)/python -m tests.integration.deploy.helm_render

serve: $(STAMP)
	$(BIN)/relay serve

clean:
	rm -rf $(VENV) sbom.cdx.json relay-data relay-batch-payloads .pytest_cache .mypy_cache .ruff_cache
