# The two set-up commands (see README):
#   make run   the Debian packages of the build, the library and the CLI,
#              sample photos, index them, search a variant
#   make test  the packages of the tests, everything built, the OpenCV peer's
#              venv, the whole test suite with CTest, then a summary
#   make install   cmake --install into PREFIX (default /usr/local)
# Sanitizers and fuzzing (CPU-only builds of their own):
#   make asan   the suite under AddressSanitizer + UBSan   (build-asan)
#   make ubsan  the suite under UBSan alone                (build-ubsan)
#   make valgrind  the C unit tests of BUILD under valgrind's memcheck
#               (scripts/valgrind.sh; VALGRIND_TESTS="test_image ..." picks some)
#   make fuzz   builds the libFuzzer targets with clang and runs each for
#               FUZZ_SECONDS (default 60); FUZZ_TARGETS="jpeg png" picks some
#               (build-fuzz; docs/fuzzing.md)
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
WERROR ?= OFF
# The CUDA kernels (nvcc, sm_90): built where nvidia-smi sees a GPU. Without
# one the build is CPU-only (the GPU tests skip); CUDA=AUTO builds the
# kernels wherever nvcc is, CUDA=ON insists on them.
CUDA ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo AUTO || echo OFF)
CMAKE_FLAGS ?=
PREFIX ?= /usr/local
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
# What `make run` needs: the library, the CLI and the demo's variant maker.
RUN_TARGETS = patina patina_cli patina_variant
CONFIGURE = -DCMAKE_BUILD_TYPE=Release -DPATINA_WERROR=$(WERROR) -DPATINA_CUDA=$(CUDA) $(CMAKE_FLAGS)

.PHONY: all bootstrap build build-run samples peers run test install asan ubsan tsan valgrind fuzz clean
all: build

bootstrap:
	@scripts/bootstrap.sh test

# The same build/ for both: the tests and benchmarks are configured only for
# `make test` (cmocka is not among run's packages); switching them on or off
# recompiles nothing else.
build: bootstrap
	@JOBS=$(JOBS) scripts/build.sh $(BUILD) all -DPATINA_TESTS=ON -DPATINA_BENCH=ON $(CONFIGURE)

build-run:
	@scripts/bootstrap.sh run
	@JOBS=$(JOBS) scripts/build.sh $(BUILD) "$(RUN_TARGETS)" -DPATINA_TESTS=OFF -DPATINA_BENCH=OFF $(CONFIGURE)

samples:
	@scripts/fetch-samples.sh

run: build-run samples
	@scripts/demo.sh $(BUILD)

# The OpenCV contrib peer of the signature family: a venv (.venv-peers) from
# PyPI. Its failure (no network) only makes test_signature_opencv skip.
peers:
	-@tests/peers/setup-opencv.sh

# CTest's report, then scripts/test-summary.py's: the counts and each
# skipped test's reason (from CTest's JUnit file); the exit status is CTest's.
test: build samples peers
	@rc=0; (cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --output-junit Testing/junit.xml) || rc=$$?; \
	  python3 scripts/test-summary.py $(BUILD)/Testing/junit.xml; exit $$rc

# The library, its headers, pkg-config file, the CLI and the web UI into
# PREFIX; as root, ldconfig then lets the loader (and the Python binding)
# find libpatina.so.0 there.
install:
	@[ -f $(BUILD)/cmake_install.cmake ] || { echo "make install: nothing built in $(BUILD) (make run builds what is installed)" >&2; exit 1; }
	cmake --install $(BUILD) --prefix $(PREFIX)
	@if [ "$$(id -u)" -eq 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

# The suite under AddressSanitizer + UBSan (CPU-only build).
asan:
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DPATINA_SANITIZE=ON -DPATINA_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug"

# The CPU suite under ThreadSanitizer (the thread pool, shared contexts,
# concurrent searches and the store's readers and writers).
tsan:
	$(MAKE) test BUILD=build-tsan CMAKE_FLAGS="-DPATINA_SANITIZE=thread -DPATINA_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo"

# The suite under UBSan alone (CPU-only build).
ubsan:
	$(MAKE) test BUILD=build-ubsan CMAKE_FLAGS="-DPATINA_SANITIZE=undefined -DPATINA_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug"

# The C unit tests under valgrind (memcheck errors and definite leaks fail
# them; libjpeg-turbo's SIMD off: scripts/valgrind.sh says why).
VALGRIND_TESTS ?=
valgrind: build
	scripts/valgrind.sh $(BUILD) $(VALGRIND_TESTS)

# libFuzzer targets (tests/fuzz): clang + compiler-rt come from the
# bootstrap's fuzz list; only the library, the targets and their seeds are
# built.
fuzz:
	@scripts/bootstrap.sh fuzz
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DPATINA_FUZZ=ON -DPATINA_CUDA=OFF -DPATINA_TESTS=OFF \
	  -DPATINA_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPATINA_WERROR=$(WERROR)
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target patina_fuzz
	scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

clean:
	rm -rf $(BUILD) build-asan build-ubsan build-tsan $(FUZZ_BUILD) demo
