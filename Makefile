# Thin front for the two set-up commands; the build itself is CMake.
#   make run   set up, build, fetch the default model, generate with a compressed cache
#   make test  build and run every test, then the whole suite again under ASan+UBSan
JOBS  ?= $(shell nproc)
MODEL ?= models/SmolLM2-135M-Instruct.Q4_1.gguf
KV    ?= full:f16
PROMPT ?= Explain in three sentences why the sky is blue.

.PHONY: all setup build build-asan model run test test-release test-asan fuzz format clean

all: build

setup:
	@bash scripts/setup

build: setup
	cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build -j $(JOBS)

build-asan: setup
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKVC_SANITIZE=ON >/dev/null
	cmake --build build-asan -j $(JOBS)

model: $(MODEL)
$(MODEL):
	bash scripts/fetch-model

run: build model
	./build/kvcomp run -m $(MODEL) -p "$(PROMPT)" -n 128 --kv $(KV)

test: test-release test-asan

test-release: build model
	cd build && ctest --output-on-failure -j $(JOBS)

test-asan: build-asan model
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan build-fuzz
