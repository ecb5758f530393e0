# godist: `make demo` and `make test` set everything up themselves (virtual
# environment, torch from PyPI, Go modules, the package) and are safe to run
# again.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
export GOTOOLCHAIN := local
STAMP := $(VENV)/.deps-stamp
# The oldest torch godist supports: `make test-compat` runs the Python suite
# under it, in a virtual environment of its own.
COMPAT_TORCH ?= 2.11.0
COMPAT_VENV ?= .venv-torch$(COMPAT_TORCH)
COMPAT_STAMP := $(COMPAT_VENV)/.deps-stamp
GOFILES = $(shell git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.venv/*')

.PHONY: all venv deps lib install wheel demo test test-go test-py test-compat lint bench clean mpi-system fuzz

all: install

$(STAMP): requirements-dev.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -r requirements-dev.txt
	@touch $@

venv: $(STAMP)

deps:
	$(GO) mod download

# godist-gpuinfo (cmd/godist-gpuinfo) is a program of its own, never linked
# into the library: the NVML bindings it uses leave NVML's symbols undefined
# until it opens libnvidia-ml.so.1. NVML's header marks some functions it
# binds deprecated; those warnings are not ours.
GPUINFO_CFLAGS := -O2 -g -Wno-deprecated-declarations

lib: deps
	$(GO) build -buildmode=c-shared -o python/godist/libgodist.so ./capi
	cp capi/godist.h python/godist/godist.h
	@mkdir -p python/godist/bin
	CGO_CFLAGS="$(GPUINFO_CFLAGS)" $(GO) build -o python/godist/bin/godist-gpuinfo ./cmd/godist-gpuinfo
	@$(MAKE) --no-print-directory mpi-shims

# The MPI shims (backends/mpi/shim), one per MPI implementation whose mpicc
# is installed; libgodist.so loads the one matching the launcher at run
# time and never links MPI itself. A shim is compiled with its mpicc's
# compile flags only (include directories, macros) and links no MPI
# library: its MPI symbols stay undefined (no DT_NEEDED entry, so a wheel
# with the shims stays manylinux) and resolve against the MPI library that
# the loader (backends/mpi/lib.go) opens RTLD_GLOBAL before the shim.
# setup.py builds them the same way.
MPI_SHIM_SRC := backends/mpi/shim/godist_mpi.c backends/mpi/shim/godist_mpi.h backends/mpi/shim/godist_mpi_reduce.h
MPI_SHIM_CFLAGS := -shared -fPIC -O2
mpi_compile_flags = $(filter -I% -D% -pthread,$(shell $(1) 2>/dev/null))
MPI_SHIMS := $(if $(shell command -v mpicc.openmpi 2>/dev/null),python/godist/mpi/libgodist_mpi_openmpi.so) \
	$(if $(shell command -v mpicc.mpich 2>/dev/null),python/godist/mpi/libgodist_mpi_mpich.so)

.PHONY: mpi-shims
mpi-shims: $(MPI_SHIMS)
	@command -v mpicc.openmpi >/dev/null 2>&1 || echo "skipped libgodist_mpi_openmpi.so: mpicc.openmpi not found"
	@command -v mpicc.mpich >/dev/null 2>&1 || echo "skipped libgodist_mpi_mpich.so: mpicc.mpich not found"

python/godist/mpi/libgodist_mpi_openmpi.so: $(MPI_SHIM_SRC)
	@mkdir -p $(@D)
	$(CC) $(call mpi_compile_flags,mpicc.openmpi -showme:compile) $(MPI_SHIM_CFLAGS) -o $@ backends/mpi/shim/godist_mpi.c

python/godist/mpi/libgodist_mpi_mpich.so: $(MPI_SHIM_SRC)
	@mkdir -p $(@D)
	$(CC) $(call mpi_compile_flags,mpicc.mpich -compile_info) $(MPI_SHIM_CFLAGS) -o $@ backends/mpi/shim/godist_mpi.c

install: $(STAMP) deps
	$(PY) -m pip install --no-build-isolation --no-deps -e .

# A wheel that installs without Go, into dist/ (docs/install.md): its native
# files are built with zig cc (ziglang, from requirements-dev.txt) for glibc
# WHEEL_GLIBC, torch's manylinux_2_28. build/ goes first so that no file left
# there from an older tree ends up in the wheel.
WHEEL_GLIBC ?= 2.28
wheel: $(STAMP) deps
	rm -rf build
	GODIST_WHEEL_GLIBC=$(WHEEL_GLIBC) $(PY) -m pip wheel . --no-deps --no-build-isolation -w dist/

demo: install
	$(PY) examples/ddp_demo.py

lint: deps
	@out=$$(gofmt -l $(GOFILES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	CGO_CFLAGS="$(GPUINFO_CFLAGS)" $(GO) vet ./...
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }

# backends/nccl's tests check its tables against the nccl.h of the
# nvidia-nccl wheel in $(VENV) and load the wheel's libraries, so the
# virtual environment comes first.
test-go: lint $(STAMP)
	GODIST_TEST_VENV=$(abspath $(VENV)) CGO_CFLAGS="$(GPUINFO_CFLAGS)" $(GO) test -race -count=1 ./...

# Every Go fuzz target (found by tools/fuzz.sh) for FUZZTIME each, from the
# seeds in the targets and their testdata/fuzz corpora.
FUZZTIME ?= 5s
fuzz: deps
	GO=$(GO) FUZZTIME=$(FUZZTIME) tools/fuzz.sh

test-py: install
	$(PY) -m pytest python/tests

$(COMPAT_STAMP): requirements-dev.txt
	@test -x $(COMPAT_VENV)/bin/python || $(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install --upgrade pip
	$(COMPAT_VENV)/bin/python -m pip install torch==$(COMPAT_TORCH) $$(grep -v '^#' requirements-dev.txt | grep -vx torch)
	@touch $@

# The package from the source tree (the library that `install` built). The
# suites that exercise godist's own parts rather than torch's API (its
# transports over simulated hosts, faults and time, its stores, the wheel,
# the MPI and NCCL libraries it loads, its reports, its benchmark, its logs,
# the tutorial's programs) use torch only to hold tensors or through the same
# calls the other suites make: they run once, under the main torch.
COMPAT_SKIP := test_hosts.py test_bench_hosts.py test_fault_matrix.py test_soak.py test_torchft_faults.py \
	test_agreement.py test_faults.py test_desync.py test_auth.py test_store.py test_packaging.py test_mpi.py \
	test_mpi_shim.py test_bench_mpi.py test_nccl.py test_nccl_fake.py test_gpuinfo.py test_info.py test_netif.py \
	test_facts.py test_bench.py test_bench_cuda.py test_bench_deepspeed.py test_logging.py test_examples.py \
	test_debug_tools.py
# Of the suites that run, the cases about godist's own runtime (process exit,
# its threads) and the 4-rank repeats of what 1-3 ranks check already.
COMPAT_DESELECT := test_work.py::test_exit_with_completion_thread_busy test_work.py::test_runtime_keeps_spare_procs \
	test_custom_ops.py::test_custom_ops_match_gloo[4] test_native_ops.py::test_native_kernel_runs_and_matches_gloo[4] \
	test_collectives.py::test_collectives_match_gloo_and_reference[4-auto] test_ddp.py::test_ddp_matches_gloo[4] \
	test_ops.py::test_rooted_and_list_ops[4] test_ops.py::test_point_to_point[4] test_ops.py::test_coalesced[4] \
	test_ops.py::test_object_collectives[4] test_ops.py::test_subgroups[4] \
	test_split.py::test_children_match_gloo_on_every_op[4]
test-compat: install $(COMPAT_STAMP)
	PYTHONPATH=$(CURDIR)/python $(COMPAT_VENV)/bin/python -m pytest python/tests \
		$(foreach f,$(COMPAT_SKIP),--ignore=python/tests/$(f)) \
		$(foreach t,$(COMPAT_DESELECT),--deselect=python/tests/$(t))

# Open MPI and MPICH for the MPI path's tests, from Debian, installed when
# missing where this machine can (root with apt-get); elsewhere the MPI tests
# skip, saying why.
mpi-system:
	@if command -v mpicc.openmpi >/dev/null 2>&1 && command -v mpicc.mpich >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Open MPI and MPICH with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenmpi-dev openmpi-bin \
			mpich libmpich-dev >/dev/null || echo "apt-get failed: the MPI tests will skip"; \
	else echo "Open MPI or MPICH missing and not installable here: the MPI tests will skip"; fi

test: mpi-system test-go fuzz test-py test-compat

bench: install
	$(PY) -m godist.bench

clean:
	rm -rf build dist python/*.egg-info python/godist/libgodist.so python/godist/libgodist.h python/godist/godist.h \
		python/godist/bin python/godist/mpi
