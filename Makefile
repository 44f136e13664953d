# The two commands of the README, plus the benchmark suite.
#   make demo        build, then run the seed experiment (1M tasks)
#   make test        build, then run every test through ctest
#   make bench       the full benchmark suite against Go and the allocators
#   make bench-quick a four-minute version of it
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all build demo test bench bench-quick install clean

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	./$(BUILD)/mote_demo

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j2

bench:
	bash bench/run.sh --full

bench-quick:
	bash bench/run.sh --quick

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD)
