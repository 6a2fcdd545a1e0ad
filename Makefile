# make demo   generate demo data, write it as shards, read it back (samples/s table)
# make lint   ruff, mypy over hpcio/, stubtest of the _core stubs, the size check, and the
#             tests of the habits (typed errors, paths named in docs); first in CI
# make test   the test suite: every test but those marked interop, slow, bench, openmpi,
#             slurm and wheel (PYTEST_DEFAULT_MARKS)
# make test-interop  the interop tests, in the cached Python 3.12 reference environment
# make test-bench    the benchmark smoke runs (asv --quick, peers, DataLoader sweep)
# make test-openmpi  conversion and staging under Debian's Open MPI, against the mpich wheel
# make test-slurm    every slurm/ script submitted to a real Slurm started on this machine
#                    (tools/slurm/cluster.sh; needs root), which is stopped afterwards
# make wheel         the manylinux wheel in dist/ (tools/wheel.sh: python -m build, then
#                    auditwheel repair bundles C-Blosc2 into hpcio.libs/), built in a
#                    venv of its own, build/wheel-env, without torch
# make test-wheel    make wheel, then that wheel installed into a fresh venv where no
#                    compiler or pkg-config is on the PATH, and the demo run from it
# make fuzz          the C kernels' libFuzzer targets built (clang, ASan, UBSan) and the
#                    Python parsers' atheris targets, every committed input replayed, then
#                    each target fuzzed for FUZZ_SECONDS
# Each target but wheel sets up .venv first (tools/setup.sh; fast when already done).

VENV ?= .venv
PY := $(VENV)/bin/python
HPCIO_INTEROP_ENV ?= $(HOME)/.cache/hpcio/interop-py312
export HPCIO_INTEROP_ENV
HPCIO_OPENMPI_ENV ?= $(HOME)/.cache/hpcio/openmpi-py311
export HPCIO_OPENMPI_ENV
PYTEST_DEFAULT_MARKS := not interop and not slow and not bench and not openmpi and not slurm and not wheel

.PHONY: setup lint demo test test-interop test-bench test-openmpi test-slurm wheel test-wheel fuzz docs clean

setup:
	VENV=$(VENV) tools/setup.sh

# The demo needs no torch: a .venv made for it alone holds the formats' libraries only
# (make test adds torch and the test extra to it later).
demo:
	VENV=$(VENV) HPCIO_SETUP=demo tools/setup.sh
	$(VENV)/bin/hpcio demo run

# The compiled modules stubtest compares with their .pyi stubs.
CORE_MODULES := $(patsubst hpcio/_core/%.pyi,hpcio._core.%,$(wildcard hpcio/_core/_*.pyi))

lint: setup
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m mypy.stubtest --mypy-config-file pyproject.toml --allowlist tools/stubtest-allowlist.txt $(CORE_MODULES)
	$(PY) tools/check_sizes.py
	$(PY) -m pytest -q -p no:cacheprovider tests/test_error_types.py tests/test_doc_paths.py

test: setup
	$(VENV)/bin/hpcio info
	$(PY) -m pytest -m "$(PYTEST_DEFAULT_MARKS)"

test-interop: setup
	tools/interop-env.sh
	HPCIO_REQUIRE_INTEROP=1 HPCIO_INTEROP_PYTHON=$(HPCIO_INTEROP_ENV)/bin/python \
		$(PY) -m pytest -m interop

test-bench:
	VENV=$(VENV) HPCIO_EXTRAS=bench tools/setup.sh
	HPCIO_REQUIRE_BENCH=1 $(PY) -m pytest -m "bench and not interop"

test-openmpi: setup
	PYTHON=$(abspath $(PY)) tools/openmpi-env.sh
	HPCIO_REQUIRE_OPENMPI=1 HPCIO_OPENMPI_PYTHON=$(HPCIO_OPENMPI_ENV)/bin/python \
		$(PY) -m pytest -m openmpi

test-slurm: setup
	tools/slurm/cluster.sh start
	eval "$$(tools/slurm/cluster.sh env)" && HPCIO_REQUIRE_SLURM=1 $(PY) -m pytest -m slurm tests/test_slurm.py; \
		status=$$?; tools/slurm/cluster.sh stop; exit $$status

# Its own build venv (build/wheel-env), not .venv: building the wheel needs no torch.
wheel:
	tools/wheel.sh

test-wheel: setup wheel
	HPCIO_REQUIRE_WHEEL=1 $(PY) -m pytest -m wheel

FUZZ_SECONDS ?= 20
fuzz: setup
	PY=$(PY) FUZZ_CI_SECONDS=$(FUZZ_SECONDS) tools/fuzz.sh ci

docs: setup
	$(PY) -m mkdocs build --strict --site-dir site

clean:
	rm -rf site build dist .pytest_cache
