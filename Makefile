# noumena: `make demo` and `make test` are all a newcomer needs. Everything installs itself.
SHELL := /bin/bash
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

# Our own ports, so a developer's other PostgreSQL or Kafka is never touched.
export NOUMENA_PG_PORT ?= 55432
export NOUMENA_KAFKA_PORT ?= 59092
export NOUMENA_KAFKA_BOOTSTRAP ?= 127.0.0.1:$(NOUMENA_KAFKA_PORT)
# mkdocs-material prints a banner about mkdocs 2 on every build; we pin mkdocs < 2.
export NO_MKDOCS_2_WARNING := 1

.PHONY: install demo test services services-stop bench fuzz eval lint docs docs-serve clean chromium clients-types

$(VENV)/.installed: pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]' -e clients/python
	touch $@

# The explorer's graph library: pinned in ui/package-lock.json, copied into the package with its licence.
VENDOR := api/explorer/static/vendor
$(VENDOR)/cytoscape.esm.min.js: ui/package.json ui/package-lock.json
	@command -v npm >/dev/null || apt-get install -y -q npm >/dev/null
	cd ui && npm ci --no-audit --no-fund --silent
	mkdir -p $(VENDOR)
	cp ui/node_modules/cytoscape/dist/cytoscape.esm.min.mjs $(VENDOR)/cytoscape.esm.min.js
	cp ui/node_modules/cytoscape/LICENSE $(VENDOR)/LICENSE.cytoscape.txt

# The TypeScript client's pinned tools (typescript, openapi-typescript): its tests compile and run it with node.
TS_CLIENT := clients/typescript
$(TS_CLIENT)/node_modules/.package-lock.json: $(TS_CLIENT)/package.json $(TS_CLIENT)/package-lock.json
	@command -v npm >/dev/null || apt-get install -y -q npm >/dev/null
	cd $(TS_CLIENT) && npm ci --no-audit --no-fund --silent

install: $(VENV)/.installed $(VENDOR)/cytoscape.esm.min.js $(TS_CLIENT)/node_modules/.package-lock.json

# After a change to the HTTP API: the TypeScript client's OpenAPI document and the types generated from it
# (tests/e2e/test_typescript_client.py fails until they are regenerated).
clients-types: install
	$(BIN)/python $(TS_CLIENT)/scripts/openapi.py
	cd $(TS_CLIENT) && npm run --silent generate

# The explorer's browser tests drive Debian's headless Chromium (Playwright cannot download its own browsers here);
# the CJK fonts make the story's Chinese labels readable in their screenshots.
chromium:
	@command -v chromium >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q chromium fonts-noto-cjk >/dev/null; }

demo: install
	$(BIN)/noumena demo

services:
	infra/scripts/postgres.sh start
	infra/scripts/kafka.sh start

services-stop:
	-infra/scripts/kafka.sh stop
	-infra/scripts/postgres.sh stop

test: install services chromium
	HYPOTHESIS_PROFILE=ci $(BIN)/pytest -p no:cacheprovider
	$(BIN)/mkdocs build --strict

# The documentation site (mkdocs, material theme) into site/; the settings page is generated from infra/settings.py.
docs: install
	$(BIN)/mkdocs build --strict

docs-serve: install
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

bench: install services
	@command -v wrk >/dev/null || apt-get install -y -q wrk >/dev/null 2>&1 || echo "(no wrk: bench_api.py uses its Python load only)"
	@set -e; for script in tests/benchmarks/bench_*.py; do \
	  echo "== $$script"; $(BIN)/python $$script; done

# schemathesis at a volume CI cannot afford (5,000+ cases, stateful included) against a served process: prints the
# number of cases, server errors and the "valid per schema but refused" findings (docs/hardening.md).
fuzz: install
	$(BIN)/python tests/benchmarks/fuzz_api.py

# Retrieval quality on LoCoMo (not vendored: CC BY-NC 4.0). LOCOMO_DATA: a folder of its conversation files.
LOCOMO_DATA ?= ../shared/data/locomo-dev
eval: install
	$(BIN)/python tests/benchmarks/eval_locomo.py --data $(LOCOMO_DATA)

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python tests/check_entry_points.py
	$(BIN)/python tests/check_class_size.py

clean:
	rm -rf $(VENV) .noumena .infra ui/node_modules $(TS_CLIENT)/node_modules $(TS_CLIENT)/dist $(VENDOR) site
