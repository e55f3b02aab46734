# The two commands: `make run` (install, then serve) and `make test` (install, then run the tests).
# Both create the virtual environment .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
ARGS ?=

.PHONY: run test test-fast bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: requirements.txt | $(PY)
	@echo "installing runtime dependencies into $(VENV)"
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.installed-test: requirements.txt requirements-test.txt | $(PY)
	@echo "installing test dependencies into $(VENV)"
	$(PY) -m pip install --quiet -r requirements-test.txt
	touch $@

$(VENV)/.installed-engine: scripts/install-engine.sh | $(PY)
	scripts/install-engine.sh $(PY) auto
	touch $@

$(VENV)/.installed-engines: scripts/install-engine.sh | $(PY)
	scripts/install-engine.sh $(PY) all
	touch $@ $(VENV)/.installed-engine

run: $(VENV)/.installed-run $(VENV)/.installed-engine
	$(PY) app.py $(ARGS)

test: $(VENV)/.installed-test $(VENV)/.installed-engines
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) -m pytest $(ARGS)

test-fast: $(VENV)/.installed-test
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) -m pytest -m "not vllm and not llamacpp" $(ARGS)

bench: $(VENV)/.installed-test
	$(PY) -m pip install --quiet -r requirements-bench.txt
	$(PY) bench/scheduler.py $(ARGS)

clean:
	rm -rf $(VENV)
