# The README's two commands: `make demo` and `make test`.
# Each creates .venv on first use and installs what it needs; later runs reuse it
# (re-installing only when pyproject.toml or constraints.txt change).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt
ARGS   ?=

.PHONY: demo test test-mds lint apiref bench tutorials clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch is installed first and pinned, so resolving the extras never picks a CUDA build.
$(VENV)/.core: $(BIN)/python pyproject.toml constraints.txt
	$(PIP) "torch==2.13.0"
	$(PIP) -e ".[test,images,interop]"
	touch $@

$(VENV)/.bench: $(VENV)/.core
	$(PIP) "tensordict>=0.14"
	touch $@

demo: $(VENV)/.bench
	$(BIN)/python benchmarks/demo.py $(ARGS)

test: $(VENV)/.core
	$(BIN)/python -m pytest $(ARGS)

# MDS (mosaicml-streaming) pins numpy below 2.2: its tests run in a venv of their own.
test-mds:
	$(PYTHON) -m venv .venv-mds
	.venv-mds/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0"
	.venv-mds/bin/python -m pip install -q --disable-pip-version-check -e ".[test,arrow,mds]"
	.venv-mds/bin/python -m pytest tests/test_interop_package.py -k mds $(ARGS)

lint: $(VENV)/.core
	$(BIN)/python -m pip install -q ruff
	$(BIN)/ruff check tensorbox tests benchmarks tutorials tools
	$(BIN)/ruff format --check tensorbox tests benchmarks tutorials tools

# docs/api.md, the API reference, regenerated from the code (tests/test_api_reference.py
# fails until it is, whenever a public name, signature or docstring changes).
apiref: $(VENV)/.core
	$(BIN)/python -m tools.apiref

bench: $(VENV)/.bench
	$(BIN)/python benchmarks/ops.py
	$(BIN)/python benchmarks/persist.py
	$(BIN)/python benchmarks/extend.py
	$(BIN)/python benchmarks/jagged.py
	$(BIN)/python benchmarks/weights.py
	$(BIN)/python benchmarks/dataload.py
	$(BIN)/python benchmarks/buffer.py
	$(BIN)/python benchmarks/interop.py

clean:
	rm -rf $(VENV) .venv-mds .cache
