# The two set-up commands (see README):
#   make run   bootstrap, build, fetch sample photos, index them, search a variant
#   make test  bootstrap, build, run the whole test suite with CTest
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
WERROR ?= OFF
CMAKE_FLAGS ?=

.PHONY: all bootstrap build samples run test asan tsan clean
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

test: build samples
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# The suite under AddressSanitizer + UBSan (CPU-only build).
asan:
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DPATINA_SANITIZE=ON -DPATINA_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug"

# The CPU suite under ThreadSanitizer (the thread pool, shared contexts,
# concurrent searches and the store's readers and writers).
tsan:
	$(MAKE) test BUILD=build-tsan CMAKE_FLAGS="-DPATINA_SANITIZE=thread -DPATINA_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo"

clean:
	rm -rf $(BUILD) build-asan build-tsan demo
