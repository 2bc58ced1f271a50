# The README's two commands: `make demo` and `make test`.
# Each creates .venv on first use and installs what it needs; later runs reuse it
# (re-installing only when pyproject.toml or constraints.txt change).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt
ARGS   ?=

.PHONY: demo test lint apiref bench tutorials clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch is installed first and pinned, so resolving the extras never picks a CUDA build.
$(VENV)/.core: $(BIN)/python pyproject.toml constraints.txt
	$(PIP) "torch==2.13.0"
	$(PIP) -e ".[test,images,s3,http,redis,servers]"
	@# the redis tests start a redis-server of their own; install it once (as root) when missing
	@command -v redis-server >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -q && apt-get install -y -q redis-server; } || echo "make test: redis-server is missing and cannot be installed here (not root); its tests skip"
	touch $@

$(VENV)/.bench: $(VENV)/.core
	$(PIP) "tensordict>=0.14"
	touch $@

demo: $(VENV)/.bench
	$(BIN)/python benchmarks/demo.py $(ARGS)

test: $(VENV)/.core
	$(BIN)/python -m pytest $(ARGS)

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

clean:
	rm -rf $(VENV) .cache
