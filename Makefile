# streamknn: the two commands.
#   make run    set up (Debian packages), configure, build, run the main job on its default stream
#   make test   set up, configure, build, run every test through ctest
# Knobs: BUILD=<dir> (default build), CMAKE_FLAGS="-DSTREAMKNN_CUDA=OFF ...", JOBS=<n>.
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

.PHONY: run test deps configure build clean

deps:
	@scripts/setup-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > $(BUILD).configure.log 2>&1 \
	  || (cat $(BUILD).configure.log; exit 1)
	@grep -E "streamknn:" $(BUILD).configure.log || true

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

run: build
	@$(BUILD)/streams/streamknn run

test: build
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

clean:
	rm -rf $(BUILD) $(BUILD).configure.log
