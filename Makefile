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

# Only the runner and the library it needs: a fresh `make run` does not wait for every test.
run: configure
	@cmake --build $(BUILD) -j$(JOBS) --target streamknn_cli
	@$(BUILD)/streams/streamknn run

test: build
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

clean:
	rm -rf $(BUILD) $(BUILD).configure.log

# ---- reliability (docs/reliability.md) -----------------------------------------------------------
#   make test-sanitizers   the CPU build and its whole suite under ThreadSanitizer (build-tsan) and
#                          under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan)
#   make test-asan-mpi     the sharded store's suites (mpirun, 1-4 ranks) under AddressSanitizer +
#                          UndefinedBehaviorSanitizer (build-asan-mpi); needs MPI
#   make fuzz              builds the libFuzzer harnesses with clang (build-fuzz) and runs each for
#                          FUZZ_SECONDS on its corpus in fuzz/corpus/; new inputs go to build-fuzz/new
#   make fuzz-merge        folds the new inputs that add coverage into fuzz/corpus/ (to commit)
# The sharded store's suites (MPI) run in `make test`, and under ASan + UBSan in test-asan-mpi, not
# in test-sanitizers (CI's time): Open MPI's own libraries are not instrumented, so ThreadSanitizer
# would judge its transports rather than this code, and the memory Open MPI leaves at exit (from
# plugins it has unloaded, which no suppression can name) turns leak detection off there.
SANITIZER_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTREAMKNN_CUDA=OFF -DSTREAMKNN_PYTHON=OFF -DSTREAMKNN_BUILD_BENCH=OFF \
  -DSTREAMKNN_MPI=OFF
FUZZ_SECONDS ?= 60
FUZZERS := fuzz_ops fuzz_csv fuzz_vecs fuzz_checkpoint

.PHONY: test-sanitizers test-tsan test-asan test-asan-mpi fuzz fuzz-build fuzz-merge

test-sanitizers: test-tsan test-asan

test-tsan test-asan: test-%: deps
	@cmake -S . -B build-$* $(SANITIZER_FLAGS) -DSTREAMKNN_SANITIZE=$(if $(filter tsan,$*),thread,address$(,)undefined) \
	  > build-$*.configure.log 2>&1 || (cat build-$*.configure.log; exit 1)
	@cmake --build build-$* -j$(JOBS)
	@cd build-$* && ctest --output-on-failure -j$(JOBS) -LE gpu

, := ,

test-asan-mpi: deps
	@cmake -S . -B build-asan-mpi $(filter-out -DSTREAMKNN_MPI=OFF,$(SANITIZER_FLAGS)) -DSTREAMKNN_MPI=ON \
	  -DSTREAMKNN_SANITIZE=address$(,)undefined > build-asan-mpi.configure.log 2>&1 || (cat build-asan-mpi.configure.log; exit 1)
	@cmake --build build-asan-mpi -j$(JOBS) --target test_distributed_cpu
	@cd build-asan-mpi && ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -L mpi -LE gpu

fuzz-build: deps
	@cmake -S . -B build-fuzz $(SANITIZER_FLAGS) -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DSTREAMKNN_SANITIZE=address,undefined -DSTREAMKNN_BUILD_FUZZERS=ON -DSTREAMKNN_BUILD_TESTS=OFF \
	  -DSTREAMKNN_BUILD_EXAMPLES=OFF > build-fuzz.configure.log 2>&1 || (cat build-fuzz.configure.log; exit 1)
	@cmake --build build-fuzz -j$(JOBS) --target $(FUZZERS)

fuzz: fuzz-build
	@mkdir -p build-fuzz/artifacts
	@for f in $(FUZZERS); do \
	  mkdir -p build-fuzz/new/$$f; \
	  echo "fuzz: $$f for $(FUZZ_SECONDS) s on fuzz/corpus/$$f"; \
	  if ! build-fuzz/fuzz/$$f -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -print_final_stats=1 \
	      -artifact_prefix=build-fuzz/artifacts/$$f- build-fuzz/new/$$f fuzz/corpus/$$f > build-fuzz/$$f.log 2>&1; then \
	    tail -n 60 build-fuzz/$$f.log; echo "fuzz: $$f FAILED; the input is in build-fuzz/artifacts/"; exit 1; \
	  fi; \
	  grep -E "^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)" build-fuzz/$$f.log | sed "s/^/fuzz: $$f /"; \
	done

fuzz-merge: fuzz-build
	@for f in $(FUZZERS); do build-fuzz/fuzz/$$f -merge=1 fuzz/corpus/$$f build-fuzz/new/$$f 2>&1 | tail -n 1; done
