# The two set-up commands (see README):
#   make run   bootstrap, build, fetch sample photos, index them, search a variant
#   make test  bootstrap, build, the OpenCV peer's venv, run the whole test suite with CTest
# Sanitizers and fuzzing (CPU-only builds of their own):
#   make asan   the suite under AddressSanitizer + UBSan   (build-asan)
#   make ubsan  the suite under UBSan alone                (build-ubsan)
#   make fuzz   builds the libFuzzer targets with clang and runs each for
#               FUZZ_SECONDS (default 60); FUZZ_TARGETS="jpeg png" picks some
#               (build-fuzz; docs/fuzzing.md)
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
WERROR ?= OFF
CMAKE_FLAGS ?=
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=

.PHONY: all bootstrap build samples peers run test asan ubsan tsan fuzz clean
all: build

bootstrap:
	@scripts/bootstrap.sh

build: bootstrap
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DPATINA_WERROR=$(WERROR) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

samples: bootstrap
	@scripts/fetch-samples.sh

run: build samples
	@scripts/demo.sh $(BUILD)

# The OpenCV contrib peer of the signature family: a venv (.venv-peers) from
# PyPI. Its failure (no network) only makes test_signature_opencv skip.
peers:
	-@tests/peers/setup-opencv.sh

test: build samples peers
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

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
