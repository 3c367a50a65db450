# Thin front for the two set-up commands; the build itself is CMake.
#   make run   set up, build, fetch the default model, generate with a compressed cache
#   make test  build and run every test, then the whole suite again under ASan+UBSan
#   make install [PREFIX=/usr/local]  the command, libkvcomp (shared and static),
#              the headers and kvcomp.pc for pkg-config
JOBS  ?= $(shell nproc)
SMOLLM2 := models/SmolLM2-135M-Instruct.Q4_1.gguf
QWEN15  := models/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf
QWEN05  := models/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf
MODEL ?= $(SMOLLM2)
KV    ?= kivi:bits=4
PREFIX ?= /usr/local
PROMPT ?= Explain in three sentences why the sky is blue.

.PHONY: all setup build build-asan build-tsan model model-qwen1.5b model-qwen0.5b check-long run test test-release test-asan test-tsan install fuzz fuzz-build format clean

all: build

setup:
	@bash scripts/setup

build: setup
	cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build -j $(JOBS)

build-asan: setup
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKVC_SANITIZE=ON >/dev/null
	cmake --build build-asan -j $(JOBS)

# Models (scripts/fetch-model NAME: download, join, verify; README "Choosing a model").
# `make run MODEL=$(QWEN15)` fetches the model it names.
model: $(MODEL)
model-qwen1.5b: $(QWEN15)
model-qwen0.5b: $(QWEN05)
$(SMOLLM2):
	bash scripts/fetch-model smollm2-135m
$(QWEN15):
	bash scripts/fetch-model qwen2.5-coder-1.5b
$(QWEN05):
	bash scripts/fetch-model qwen2.5-coder-0.5b

# Long-context checks on Qwen2.5-Coder-1.5B (not part of `make test`: each LONG_CTX
# prefill is minutes; docs/benchmarks.md has the figures and what they cost here):
# KL against full:f32 on LONG_WINDOWS windows of the text, RULER needle tasks, and
# decode speed, all at LONG_CTX tokens, with peak RSS per method.
LONG_CTX     ?= 32768
LONG_WINDOWS ?= 2
LONG_KV      ?= full:f16,kivi:bits=4,kivi:bits=2
LONG_TEXT    ?= data/alice.txt
check-long: build $(QWEN15)
	./build/kvcomp eval kl -m $(QWEN15) --text $(LONG_TEXT) --ctx $(LONG_CTX) --cont 128 \
	    --windows $(LONG_WINDOWS) --kv $(LONG_KV)
	./build/kvcomp eval ruler -m $(QWEN15) --text $(LONG_TEXT) --len $(LONG_CTX) --samples 4 \
	    --task niah_single,niah_multikey --kv $(LONG_KV)
	./build/kvcomp bench decode -m $(QWEN15) --ctx $(LONG_CTX) -n 32 --kv $(LONG_KV)

run: build model
	./build/kvcomp run -m $(MODEL) -p "$(PROMPT)" -n 128 --kv $(KV)

test: test-release test-asan

install: build
	cmake --install build --prefix $(PREFIX)

test-release: build model
	cd build && ctest --output-on-failure -j $(JOBS)

test-asan: build-asan model
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

# ThreadSanitizer over the threaded tests (ctest label "threads": the pool,
# attention and the cache split across threads, every method on 2+ threads),
# at the native ISA only. OpenBLAS runs single-threaded: its own threads are
# not instrumented and would be reported as races.
build-tsan: setup
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DKVC_TSAN=ON >/dev/null
	cmake --build build-tsan -j $(JOBS)

test-tsan: build-tsan model
	cd build-tsan && OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	  ctest --output-on-failure -j $(JOBS) -L threads -R '\.avx512$$'

# Fuzz targets (tests/fuzz/fuzz_<name>.c): libFuzzer with clang under build-fuzz/
# (the whole library built with -fsanitize=fuzzer-no-link,address,undefined).
# `make fuzz` builds them and runs each for FUZZ_TIME seconds from the committed
# corpus tests/fuzz/corpus_<name>/ (new inputs go to build-fuzz/corpus_<name>),
# with tests/fuzz/<name>.dict when there is one; `make fuzz-build` only builds.
# `make test` replays the committed corpora without clang (ctest -L fuzz).
FUZZ_CC      ?= clang
FUZZ_TIME    ?= 60
FUZZ_TARGETS  = $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))

fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build-fuzz/corpus_$$t; \
	  dict=; [ -f tests/fuzz/$$t.dict ] && dict=-dict=tests/fuzz/$$t.dict; \
	  echo "== fuzz_$$t for $(FUZZ_TIME) s"; \
	  build-fuzz/fuzz_$$t -max_total_time=$(FUZZ_TIME) -rss_limit_mb=2048 -print_final_stats=1 $$dict \
	    build-fuzz/corpus_$$t tests/fuzz/corpus_$$t || exit 1; \
	done

fuzz-build:
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz: needs clang with libFuzzer (apt-get install clang)" >&2; exit 1; }
	CC=$(FUZZ_CC) cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DKVC_FUZZ=ON >/dev/null
	cmake --build build-fuzz -j $(JOBS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan build-fuzz build-tsan
