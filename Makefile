# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.13.0
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: run test bench lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[test]"
	touch $@

run: $(VENV)/.installed
	$(PY) -m bench.engine --quick

test: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m pytest -q -ra

bench: $(VENV)/.installed
	$(PY) -m bench.engine

lint: $(VENV)/.installed
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
