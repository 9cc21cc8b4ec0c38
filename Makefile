# The two set-up commands: `make run` and `make test`. Both install missing
# Debian packages first (scripts/install-deps.sh), then build with CMake.
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build run run-controls test test-asan test-slow bench clean mutation

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build build -j $(JOBS)

# The quickstart runs afresh each time: its store, checkpoints, logs and
# report (runs/quickstart.db*, runs/quickstart-*) are removed first, but not
# the distillation quickstart's (runs/quickstart-distill*); its trainer API
# token is new.
run: build
	mkdir -p runs
	rm -rf runs/quickstart.db*
	find runs -maxdepth 1 -name 'quickstart-*' ! -name 'quickstart-distill*' -exec rm -rf {} +
	(umask 077 && head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' > runs/quickstart.token)
	./build/flashroll run configs/quickstart.yaml

# The controls beside the quickstart's gain (docs/BENCHMARKS.md, "The closed
# loop"): the quickstart's fixed evaluation, tuning and held-out test sets,
# at T = 1.0 (the same episodes as `make run`'s own "before" and "after"),
# 0.7 and greedy, on the base model and, once `make run` has run, on the
# weights it ended on (the newest of runs/quickstart-checkpoints), paired by
# episode. The quickstart trains with no auxiliary loss term (entropy_weight
# 0, kl 0), so there is no run with advantages zeroed to make. Evaluation
# only, three temperatures a side: long, and not in CI.
run-controls: build
	mkdir -p runs
	rm -rf runs/quickstart-controls*
	sed -e 's/^name: quickstart$$/name: quickstart-controls/' \
	    -e 's|^store: runs/quickstart.db$$|store: runs/quickstart-controls.db|' \
	    -e 's|^training:$$|training:\n  eval_temperatures: [1.0, 0.7, 0]\n  checkpoint_dir: runs/quickstart-checkpoints|' \
	    configs/quickstart.yaml > runs/quickstart-controls.yaml
	./build/flashroll run runs/quickstart-controls.yaml --evaluate-only \
	  $(if $(wildcard runs/quickstart-checkpoints/v*),--weights $(lastword $(sort $(wildcard runs/quickstart-checkpoints/v*))))

# A test that fails is run once more (--repeat until-pass:2) and both runs
# are in the output: a broken check fails twice, a timing flake on this
# shared 2-core machine does not sink the run (docs/TESTING.md).
test: build
	ctest --test-dir build --output-on-failure --repeat until-pass:2 -j $(JOBS)

# The slow tests at full size (docs/TESTING.md): many-thousand-cycle leak
# runs, many-trial crash tests.
test-slow: build
	FLASHROLL_SLOW_TESTS=1 ctest --test-dir build --output-on-failure -j $(JOBS)

test-asan: deps
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFLASHROLL_SANITIZE=ON -DFLASHROLL_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir build-asan --output-on-failure --repeat until-pass:2 -j $(JOBS)

# Mutation testing (docs/TESTING.md): N compiled single-point mutants of the
# sources in PATHS (default: the validators and parsers), built and tested in a
# scratch copy of git HEAD under /tmp/flashroll-mutation. RESUME=1 extends the
# last record (.cache/mutation/record.json) instead of starting afresh.
PATHS ?=
N ?= 200
SEED ?= 1
mutation: deps
	/usr/bin/python3 scripts/mutate.py $(if $(PATHS),--paths "$(PATHS)") -n $(N) --seed $(SEED) $(if $(RESUME),--resume)

clean:
	rm -rf build build-asan
