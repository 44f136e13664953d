#!/usr/bin/env bash
# run_chan.sh - channel, select and mutex micro-benchmarks, mote beside Go.
#
#   bench/tasks/run_chan.sh [--quick|--full]
#
# Runs chan_pingpong, chan_buffered, chan_select4 and mutex_contended (which
# also prints mutex_handoff), C and Go, with 1 and 2 workers (MOTE_WORKERS /
# GOMAXPROCS), alternating mote and Go within each repetition so machine
# noise hits both.  Prints every measurement as
#   name=<bench> impl=<mote|go> workers=<n> ns_per_op=<float> ...
# and, when more than one repetition ran, '#'-prefixed medians and ratios.
#
# Environment: BENCH_BUILD_DIR (CMake build dir; default build-chan-bench,
# configured and built here if the programs are missing), BENCH_GO_BIN
# (where the Go programs are or go; default $BENCH_BUILD_DIR/go),
# BENCH_REPS (default 3), BENCH_MODE (quick|full; the flag wins).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODE=${BENCH_MODE:-quick}
for a in "$@"; do
    case $a in
    --quick) MODE=quick ;;
    --full) MODE=full ;;
    *) echo "usage: $0 [--quick|--full]" >&2; exit 2 ;;
    esac
done
BUILD=${BENCH_BUILD_DIR:-$ROOT/build-chan-bench}
GOBIN=${BENCH_GO_BIN:-$BUILD/go}
REPS=${BENCH_REPS:-3}
PROGS="chan_pingpong chan_buffered chan_select4 mutex_contended"

if [ "$MODE" = full ]; then
    declare -A N=([chan_pingpong]=5000000 [chan_buffered]=50000000
                  [chan_select4]=10000000 [mutex_contended]=5000000)
else
    declare -A N=([chan_pingpong]=1000000 [chan_buffered]=10000000
                  [chan_select4]=2000000 [mutex_contended]=1000000)
fi

need_c=0
for p in $PROGS; do [ -x "$BUILD/bench/tasks/$p" ] || need_c=1; done
if [ $need_c = 1 ]; then
    echo "# building the C programs in $BUILD" >&2
    { cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMOTE_BUILD_TESTS=OFF &&
      cmake --build "$BUILD" -j"$(nproc)"; } >&2 || { echo "# C build failed" >&2; exit 1; }
fi
if command -v go >/dev/null 2>&1; then
    mkdir -p "$GOBIN"
    for p in $PROGS; do
        if [ ! -x "$GOBIN/$p" ] || [ "$ROOT/bench/tasks/$p.go" -nt "$GOBIN/$p" ]; then
            (cd "$ROOT/bench/tasks" && go build -o "$GOBIN/$p" "$p.go") >&2 ||
                echo "# go build $p failed" >&2
        fi
    done
else
    echo "# go not found: Go side skipped" >&2
fi

OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for rep in $(seq 1 "$REPS"); do
    for w in 1 2; do
        for p in $PROGS; do
            MOTE_WORKERS=$w timeout 300 "$BUILD/bench/tasks/$p" "${N[$p]}" | tee -a "$OUT"
            if [ -x "$GOBIN/$p" ]; then
                GOMAXPROCS=$w timeout 300 "$GOBIN/$p" "${N[$p]}" | tee -a "$OUT"
            fi
        done
    done
done

if [ "$REPS" -gt 1 ]; then
    python3 - "$OUT" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    d = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
    if "name" in d and "ns_per_op" in d:
        runs.setdefault((d["name"], d["workers"]), {}).setdefault(d["impl"], []).append(float(d["ns_per_op"]))
print("# median ns_per_op over %d runs; ratio = mote / go (target <= 0.333)" %
      max(len(v) for r in runs.values() for v in r.values()))
for (name, w), r in sorted(runs.items()):
    m = statistics.median(r["mote"]) if "mote" in r else None
    g = statistics.median(r["go"]) if "go" in r else None
    ratio = "%.2f" % (m / g) if m and g else "-"
    print("# %-16s workers=%s  mote %8.2f ns  go %8s ns  ratio %s" % (
        name, w, m if m else float("nan"), "%.2f" % g if g else "-", ratio))
PY
fi
