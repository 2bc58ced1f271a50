# The README's two commands: `make demo` (installs only what the demo runs) and `make test`. Also: `make check` (the quick
# edit-test loop: lint and the fast tests), `make docs` (the site, strict), `make bench`
# (benchmarks, their JSON results and the charts), `make wheelcheck` (build the wheel,
# install it into a fresh environment, run the README tour there).
# Each creates .venv on first use and installs what it needs; later runs reuse it
# (re-installing only when pyproject.toml or constraints.txt change).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt
# The long installs (torch, the extras) print pip's progress: a first run downloads
# hundreds of MB, and a silent terminal for minutes reads as a hang.
PIPV   := $(BIN)/python -m pip install --disable-pip-version-check --progress-bar on -c constraints.txt
# Where pip also looks for torch: PyTorch's CPU-only builds (`2.13.0+cpu` sorts above
# PyPI's CUDA `2.13.0`, so pip takes it). `make TORCH_INDEX=` uses only your pip's own
# index (for example when it already serves a CPU build).
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH  := $(PIPV) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) "torch==2.13.0"
ARGS   ?=
# pytest-xdist workers for `make test` and `make check` (0: one process, no xdist).
# loadgroup keeps the tests of one xdist_group (the shared mypy run) in one worker.
WORKERS ?= 2
XDIST  := -n $(WORKERS) --dist loadgroup

.PHONY: demo test test-mds check lint docs figures apiref bench wheelcheck tutorials clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch is installed first and pinned, so resolving the extras never picks a CUDA build.
$(VENV)/.torch: $(BIN)/python constraints.txt
	@echo "== installing torch 2.13.0, CPU build (a first run downloads about 200 MB)"
	$(TORCH)
	touch $@

$(VENV)/.core: $(VENV)/.torch pyproject.toml constraints.txt
	@echo "== installing tensorbox and the test, interop, remote and server extras"
	$(PIPV) -e ".[test,images,interop,s3,http,obstore,redis,servers,compat]"
	@# the redis tests start a redis-server of their own; install it once (as root) when missing
	@command -v redis-server >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -q && apt-get install -y -q redis-server; } || echo "make test: redis-server is missing and cannot be installed here (not root); its tests skip"
	touch $@

$(VENV)/.bench: $(VENV)/.core
	$(PIPV) -e ".[bench]"
	touch $@

$(VENV)/.docs: $(VENV)/.core
	$(PIPV) -e ".[docs]"
	touch $@

# The demo installs only what it runs: torch, tensorbox, Pillow and tqdm, and tensordict
# (the tutorial pipeline it compares with); no test tools, servers or apt packages.
$(VENV)/.demo: $(VENV)/.torch pyproject.toml constraints.txt
	@echo "== installing tensorbox and the demo extra (Pillow, tqdm, tensordict)"
	$(PIPV) -e ".[demo]"
	touch $@

demo: $(VENV)/.demo
	$(BIN)/python benchmarks/demo.py $(ARGS)

# The full suite, as CI runs it (the docs extra too: the site build is a test); -rs lists
# each skipped test with its reason (a missing server or optional package).
test: $(VENV)/.core $(VENV)/.docs
	@echo "== make test: the full suite; under 5 minutes of pytest on 2 idle cores, longer under other load"
	$(BIN)/python -m pytest -rs $(XDIST) $(ARGS)

# The MDS bridge (to_mds) against mosaicml-streaming, in a venv of its own: streaming pins
# numpy below 2.2 and pulls in torchvision and ~80 more packages, so it stays out of the
# test extra and of .venv. TENSORBOX_REQUIRE_MDS=1 turns "streaming unusable: skip" into
# a failure, so this target never passes without running the tests it exists for.
VENV_MDS := .venv-mds
$(VENV_MDS)/.mds: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV_MDS)
	$(VENV_MDS)/bin/python -m pip install --disable-pip-version-check -c constraints.txt $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) "torch==2.13.0"
	$(VENV_MDS)/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[test,mds]"
	touch $@

test-mds: $(VENV_MDS)/.mds
	TENSORBOX_REQUIRE_MDS=1 $(VENV_MDS)/bin/python -m pytest -m mds $(ARGS)

# The edit-test loop: lint, then `pytest --quick` (tests/conftest.py): the tests that start
# no interpreter, process pool or external tool (marked `heavy` where they live; a module
# marked as a whole is not even imported), nor the `mds` ones, with 15 examples per property
# test instead of 40; about 50 s on 2 idle cores, 3 minutes with other work on them.
check: $(VENV)/.core
	$(BIN)/ruff check tensorbox tests benchmarks tutorials tools
	$(BIN)/ruff format --check tensorbox tests benchmarks tutorials tools
	$(BIN)/python -m pytest --quick -x $(XDIST) $(ARGS)

# The documentation site, into site/ (strict: a broken link, anchor or nav entry fails).
docs: $(VENV)/.docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict  # never --quiet: it hides the warnings strict mode counts

figures: $(VENV)/.bench
	$(BIN)/python benchmarks/figures.py

lint: $(VENV)/.core
	$(BIN)/ruff check tensorbox tests benchmarks tutorials tools
	$(BIN)/ruff format --check tensorbox tests benchmarks tutorials tools

# docs/api/, the API reference (a page per public area), regenerated from the code (tests/meta/test_api_reference.py
# fails until it is, whenever a public name, signature or docstring changes).
apiref: $(VENV)/.core
	$(BIN)/python -m tools.apiref

# Every benchmark writes its medians, settings and the machine's load average to
# benchmarks/results/NAME.json; figures.py draws the docs' charts from those files only.
BENCH_JSON := benchmarks/results
bench: $(VENV)/.bench
	$(BIN)/python benchmarks/ops.py --json $(BENCH_JSON)/ops.json
	$(BIN)/python benchmarks/persist.py --json $(BENCH_JSON)/persist.json
	$(BIN)/python benchmarks/extend.py --json $(BENCH_JSON)/extend.json
	$(BIN)/python benchmarks/jagged.py --json $(BENCH_JSON)/jagged.json
	$(BIN)/python benchmarks/weights.py --json $(BENCH_JSON)/weights.json
	$(BIN)/python benchmarks/dataload.py --json $(BENCH_JSON)/dataload.json
	$(BIN)/python benchmarks/buffer.py --json $(BENCH_JSON)/buffer.json
	$(BIN)/python benchmarks/figures.py

# The wheel as pip users get it: built, installed with its dependencies into a fresh
# environment, the README tour run there and the LICENSE checked inside the wheel.
wheelcheck: $(VENV)/.core
	rm -rf .whl && $(BIN)/python -m pip wheel -q --no-deps -w .whl/dist .
	$(BIN)/python -c "import sys, zipfile; n = zipfile.ZipFile(sys.argv[1]).namelist(); assert any(x.endswith('licenses/LICENSE') for x in n), n" .whl/dist/tensorbox-*.whl
	$(PYTHON) -m venv .whl/venv
	.whl/venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) "torch==2.13.0"
	.whl/venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt .whl/dist/tensorbox-*.whl
	cd .whl && venv/bin/python ../tools/readme_tour.py ../README.md

clean:
	rm -rf $(VENV) $(VENV_MDS) .cache .whl site
