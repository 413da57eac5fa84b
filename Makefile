# dbsp-spark: every target installs what it needs first (scripts/bootstrap.sh is a fast no-op
# when .venv is up to date), so `make demo` and `make test` work on a fresh clone.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV   := .venv
PY     := $(abspath $(VENV))/bin/python
PYTEST := $(PY) -m pytest
# Spark: bind to loopback, and run Python workers (UDFs) with the venv's python, not `python3`
# from PATH (which lacks pyarrow/pandas).
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON ?= $(PY)
export PYSPARK_DRIVER_PYTHON ?= $(PY)

.PHONY: help venv install test test-fast demo docs lint bench bench-smoke airflow clean slt

help:
	@echo "make demo        run the end-to-end demo on local Spark (installs first)"
	@echo "make test        run the whole test suite"
	@echo "make test-fast   tests not marked slow / airflow / cluster"
	@echo "make docs        build the documentation site from docs/ into build/site (mkdocs --strict)"
	@echo "make install     create/refresh .venv from requirements.lock (alias: venv)"
	@echo "make bench       benchmarks (BENCH_ARGS=... passes options to bench.run);  make bench-smoke: a quick run"
	@echo "make airflow     local Airflow (standalone) with the project's DAGs"
	@echo "make slt SLT_DIR=folder   sqllogictest files as maintained views (SLT_ARGS=--oracle duckdb ...)"
	@echo "make lint        byte-compile + ruff if available"
	@echo "make clean       remove .venv, caches and local Spark leftovers (keeps data/)"

venv install:
	@echo ">> install: scripts/bootstrap.sh (Java check, .venv, requirements.lock, editable project)"
	@bash scripts/bootstrap.sh

# The suite runs on two workers (pytest-xdist): most of a test is waiting on a JVM or a
# subprocess, and two workers use both cores. A test module is one unit (--dist loadfile), so its
# Airflow or cluster fixture starts once; modules binding fixed ports take turns (tests/conftest.py).
# TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
test: install
	@bash scripts/ensure_chromium.sh
	@echo ">> test: $(PYTEST) -q -n $(TEST_WORKERS) --dist loadfile"
	@$(PYTEST) -q -n $(TEST_WORKERS) --dist loadfile

test-fast: install
	@echo ">> test-fast: $(PYTEST) -q -m 'not slow and not airflow and not cluster'"
	@$(PYTEST) -q -m "not slow and not airflow and not cluster"

demo: install
	@echo ">> demo: $(PY) -m spark_jobs.demo"
	@$(PY) -m spark_jobs.demo

docs: install
	@echo ">> docs: $(abspath $(VENV))/bin/mkdocs build --strict (mkdocs.yml: docs/ -> build/site)"
	@NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

lint: install
	@echo ">> lint: compileall (+ ruff if installed in .venv)"
	@$(PY) -m compileall -q spark_jobs dags tests $(wildcard bench) >/dev/null
	@if [ -x $(VENV)/bin/ruff ]; then $(VENV)/bin/ruff check .; else echo "   (ruff not installed; skipped)"; fi

bench: install
	@echo ">> bench: $(PY) -m bench.run $(BENCH_ARGS); $(PY) -m bench.recursion (W3); $(PY) -m bench.iterate (while loop); $(PY) -m bench.topk; $(PY) -m bench.append_only; $(PY) -m bench.recompute (incremental vs recompute vs policy); $(PY) -m bench.airflow (DAG runs); $(PY) -m bench.cluster (W1 on a standalone cluster); $(PY) -m bench.nexmark; $(PY) -m bench.change (W1 SF3: a second view added vs computed once); $(PY) -m bench.floor (the in-process floor, W1 SF1 and SF10); $(PY) -m bench.views (100 SQL views, a few rows a step); $(PY) -m bench.text_inputs (CSV/JSON/cdc inputs, dbsp step from launch to exit)"
	@$(PY) -m bench.run $(BENCH_ARGS)
	@$(PY) -m bench.recursion
	@$(PY) -m bench.iterate
	@$(PY) -m bench.topk
	@$(PY) -m bench.append_only
	@$(PY) -m bench.recompute
	@$(PY) -m bench.airflow
	@$(PY) -m bench.cluster
	@$(PY) -m bench.nexmark
	@$(PY) -m bench.change
	@$(PY) -m bench.floor
	@$(PY) -m bench.views
	@$(PY) -m bench.text_inputs

bench-smoke: install
	@echo ">> bench-smoke: $(PY) -m bench.run --smoke; $(PY) -m bench.recursion --smoke (W3); $(PY) -m bench.iterate --smoke (while loop)"
	@$(PY) -m bench.run --smoke
	@$(PY) -m bench.recursion --smoke
	@$(PY) -m bench.iterate --smoke

SLT_DIR ?= tests/slt/cases
SLT_ARGS ?=
slt: install
	@echo ">> slt: $(PY) -m tests.slt $(SLT_ARGS) $(SLT_DIR)"
	@$(PY) -m tests.slt $(SLT_ARGS) $(SLT_DIR)

airflow: install
	@echo ">> airflow: scripts/airflow_local.sh"
	@PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/airflow_local.sh

clean:
	@echo ">> clean: removing $(VENV), __pycache__, *.egg-info, spark-warehouse, metastore_db, derby.log"
	@rm -rf $(VENV) *.egg-info spark-warehouse metastore_db derby.log .pytest_cache
	@find . -name __pycache__ -type d -prune -exec rm -rf {} +
