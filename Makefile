# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SCALE ?= mini
export HF_DATASETS_OFFLINE ?= 1
export HF_HUB_OFFLINE ?= 1

.PHONY: install test demo table1

install: $(VENV)/.installed

# Reinstalls when pyproject.toml changes; otherwise a no-op (idempotent).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --upgrade pip
	$(VENV)/bin/pip install -e ".[dev]"
	touch $@

test: install
	$(PY) -m pytest

demo: install
	$(PY) -m rmsnorm_repro.report.table1

table1: install
	$(PY) -m rmsnorm_repro.report.table1
