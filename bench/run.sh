#!/usr/bin/env bash
# bench/run.sh - mote's benchmark suite in one command.
#
#   bench/run.sh --quick     ~4 minutes: small sizes, 3 alternating repetitions
#   bench/run.sh --full      <20 minutes: up to 1M tasks, 2 GiB heaps
#
# Options: --reps N (default 3), --only LIST (comma-separated sections: seed,
# micro,chan,malloc,idle,net,freeze), --no-install, --no-build, --build-dir
# DIR (default build-bench), --out DIR (default bench/results), --report-only
# (re-render REPORT.md from the raw files of the last run).  MALLOC_ONLY
# (environment) passes --only to bench/malloc/run.sh: the allocator cases to
# run in section malloc, e.g. MALLOC_ONLY=churn,larson.
#
# Section freeze (frozen stacks, MOTE_STACK_FREEZE): idle-mostly sleepers at
# thresholds off/4s/1s/250ms beside Go, channel ping-pong freeze off vs on,
# the seed's idle (and in --full 8 KiB) case freeze off vs on (~3 min --quick).
#
# It installs missing peers from Debian packages (golang-go and the peer
# allocators, only when root), builds libmote and the C programs with CMake
# and the Go programs with `go build`, runs every section with both sides in
# the same run (alternating which goes first), and writes
# <out>/REPORT.md, <out>/*.svg and the raw key=value lines under <out>/raw/.
# See docs/bench.md.
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=quick
REPS=3
ONLY=seed,micro,chan,malloc,idle,net,freeze
INSTALL=1
BUILD=1
REPORT_ONLY=0
BUILD_DIR=$ROOT/build-bench
OUT=$ROOT/bench/results

while [ $# -gt 0 ]; do
    case $1 in
    --quick) MODE=quick ;;
    --full) MODE=full ;;
    --reps) REPS=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --no-install) INSTALL=0 ;;
    --no-build) BUILD=0 ;;
    --build-dir) BUILD_DIR=$(realpath -m "$2"); shift ;;
    --out) OUT=$(realpath -m "$2"); shift ;;
    --report-only) REPORT_ONLY=1 ;;
    -h | --help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done
case $REPS in '' | *[!0-9]*) echo "run.sh: --reps needs a number" >&2; exit 2 ;; esac
[ "$REPS" -ge 1 ] || { echo "run.sh: --reps must be >= 1" >&2; exit 2; }

RAW=$OUT/raw
T_START=$(date +%s)

say() { printf '[%s %4ss] %s\n' "$MODE" "$(($(date +%s) - T_START))" "$*" >&2; }
want() { case ",$ONLY," in *",$1,"*) return 0 ;; esac; return 1; }

render() {
    say "writing $OUT/REPORT.md"
    python3 "$ROOT/bench/report/report.py" --raw "$RAW" --out "$OUT" --mode "$MODE"
}

if [ "$REPORT_ONLY" = 1 ]; then
    [ -f "$RAW/meta.txt" ] && MODE=$(sed -n 's/^mode=//p' "$RAW/meta.txt")
    render
    exit $?
fi

# ---- peers from Debian --------------------------------------------------
install_peers() {
    local missing=()
    command -v go >/dev/null 2>&1 || missing+=(golang-go)
    for p in libtcmalloc-minimal4 libjemalloc2 libmimalloc2.0; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    for t in cmake:cmake gcc:gcc python3:python3 make:make wrk:wrk; do
        command -v "${t%%:*}" >/dev/null 2>&1 || missing+=("${t#*:}")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        say "missing (not root or no apt-get, continuing without): ${missing[*]}"
        return 0
    fi
    say "installing from Debian: ${missing[*]}"
    if ! apt-get install -y -q "${missing[@]}" >/dev/null 2>&1; then
        apt-get update -q >/dev/null 2>&1
        apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 ||
            say "apt-get install failed for: ${missing[*]} (those sections will say so)"
    fi
}
[ "$INSTALL" = 1 ] && install_peers

# ---- build --------------------------------------------------------------
mkdir -p "$BUILD_DIR" "$RAW"
rm -f "$RAW"/*.txt "$RAW"/*.log
LOG=$RAW/run.log
: >"$LOG"
GOBIN_DIR=$BUILD_DIR/go
export GOFLAGS=${GOFLAGS:--buildvcs=false}
[ -n "${HOME:-}" ] || export GOCACHE=$BUILD_DIR/.gocache

if [ "$BUILD" = 1 ]; then
    say "building libmote and the C benchmarks (cmake, Release) in $BUILD_DIR"
    if ! { cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DMOTE_BUILD_TESTS=OFF &&
        cmake --build "$BUILD_DIR" -j"$(nproc)"; } >>"$LOG" 2>&1; then
        say "C build FAILED (see $LOG); continuing with whatever was built"
        echo "kind=fail section=build what=cmake" >>"$RAW/failures.txt"
    fi
    if command -v go >/dev/null 2>&1; then
        say "building the Go programs"
        mkdir -p "$GOBIN_DIR"
        for src in "$ROOT"/bench/seed/*.go "$ROOT"/bench/tasks/*.go "$ROOT"/bench/go/*.go "$ROOT"/bench/net/*.go; do
            [ -f "$src" ] || continue
            name=$(basename "$src" .go)
            if ! (cd "$(dirname "$src")" && go build -o "$GOBIN_DIR/$name" "$(basename "$src")") >>"$LOG" 2>&1; then
                say "go build $src FAILED (see $LOG)"
                echo "kind=fail section=build what=go:$name" >>"$RAW/failures.txt"
            fi
        done
    else
        echo "kind=fail section=build what=go-missing" >>"$RAW/failures.txt"
    fi
fi
CBIN=$BUILD_DIR/bench

# ---- memory guard ---------------------------------------------------------
# Never let one program grow past ~20 GiB, nor past what is available now
# minus 2 GiB: the machine is shared.
# Recomputed before every program: other engineers use the machine too.
guard_now() {
    local avail_kb g=$((20 << 30))
    avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
    [ -n "$avail_kb" ] && [ $(((avail_kb << 10) - (2 << 30))) -lt $g ] && g=$(((avail_kb << 10) - (2 << 30)))
    echo $g
}
GUARD=$(guard_now)
export BENCH_MEM_GUARD=$GUARD

{
    echo "mode=$MODE"
    echo "reps=$REPS"
    echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"
    echo "dirty=$(git -C "$ROOT" status --porcelain 2>/dev/null | grep -c '^ M')"
    echo "guard=$GUARD"
} >"$RAW/meta.txt"

# ---- running one program ------------------------------------------------
# run_one FILE TIMEOUT LABEL -- CMD...: runs CMD, appends its key=value lines
# tagged with rep=$REP to FILE, records a failure line if it fails.
REP=0
run_one() {
    local file=$1 tmo=$2 label=$3
    shift 4
    local t0 out err rc
    t0=$(date +%s.%N)
    BENCH_MEM_GUARD=$(guard_now)
    export BENCH_MEM_GUARD
    out=$(mktemp) err=$(mktemp)
    if [ "${STREAM_ERR:-0}" = 1 ]; then # show the program's own progress lines
        timeout --signal=KILL "$tmo" "$@" >"$out" 2> >(tee "$err" | sed -u 's/^/        /' >&2)
        rc=$?
        sleep 0.2
    else
        timeout --signal=KILL "$tmo" "$@" >"$out" 2>"$err"
        rc=$?
    fi
    grep '=' "$out" | grep -v '^#' | sed "/ rep=[0-9]/!s/\$/ rep=$REP/" |
        sed "s/\$/${RUN_TAG:+ $RUN_TAG}/" >>"$RAW/$file"
    {
        echo "## rc=$rc rep=$REP $label: $*"
        cat "$out" "$err"
    } >>"$LOG"
    if [ $rc -ne 0 ]; then
        echo "kind=fail section=${file%.txt} what=$(echo "$label" | tr ' ' '_') rc=$rc rep=$REP msg=$(tail -n 1 "$err" | tr ' =' '_:' | cut -c1-120)" >>"$RAW/failures.txt"
        say "  $label: FAILED rc=$rc ($(tail -n 1 "$err" | cut -c1-100))"
    else
        say "  $label: $(awk -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN{printf "%.1f s", t1-t0}')"
    fi
    rm -f "$out" "$err"
}

# The program of an "ENV=x /path/prog args" command string.
prog_of() {
    local w
    for w in $1; do
        case $w in *=*) ;; *) echo "$w"; return ;; esac
    done
}

# Two sides of one comparison, alternating which runs first by repetition.
# A side whose program was not built is skipped (and listed once).
pair() { # pair FILE TIMEOUT LABEL "ENV CMD mote" "ENV CMD go"
    local file=$1 tmo=$2 label=$3 a=$4 b=$5 side cmd p
    local order=("mote:$a" "go:$b")
    [ $((REP % 2)) -eq 0 ] && order=("go:$b" "mote:$a")
    for side in "${order[@]}"; do
        cmd=${side#*:}
        [ -n "$cmd" ] || continue
        p=$(prog_of "$cmd")
        if [ ! -x "$p" ]; then
            grep -qs "what=not-built:$p " "$RAW/failures.txt" ||
                echo "kind=fail section=${file%.txt} what=not-built:$p rc=0" >>"$RAW/failures.txt"
            continue
        fi
        run_one "$file" "$tmo" "$label ${side%%:*}" -- env $cmd
    done
}

have() { [ -x "$1" ]; }

# ---- section 1: the seed experiment --------------------------------------
# Go's measured cost per goroutine on this machine (brief): idle ~2.8 KB,
# 8 KiB once ~25 KB with GOGC=off (~16 KB with default GOGC), 64 KiB once
# ~80 KB.  A Go case whose prediction exceeds the guard is skipped (1M x
# 64 KiB would need ~80-128 GB); 1M x 8 KiB runs with default GOGC.
seed_section() {
    local ns="" settle case n mode gogc pred
    if [ "$MODE" = full ]; then
        ns="10000 100000 1000000"
        settle=1500
    else
        settle=1000
    fi
    local cases=()
    if [ "$MODE" = full ]; then
        for n in $ns; do
            for mode in idle 8k 64k; do cases+=("$n:$mode"); done
        done
    else
        cases=(100000:idle 100000:8k 10000:64k)
    fi
    for REP in $(seq 1 "$REPS"); do
        say "seed experiment, repetition $REP/$REPS"
        for case in "${cases[@]}"; do
            n=${case%%:*} mode=${case#*:}
            GUARD=$(guard_now)
            gogc=off
            case $mode in idle) pred=$((n * 2900)) ;; 8k) pred=$((n * 25000)) ;; 64k) pred=$((n * 82000)) ;; esac
            if [ "$mode" = 8k ] && [ "$pred" -gt "$GUARD" ]; then
                gogc=100
                pred=$((n * 16500))
            fi
            local mote_cmd="$CBIN/seed/seed $n $mode $settle"
            local go_cmd="GOGC=$gogc $GOBIN_DIR/seed $n $mode $settle"
            if [ "$pred" -gt "$GUARD" ]; then
                [ "$REP" = 1 ] && echo "kind=skip impl=go n=$n mode=$mode predicted=$pred guard=$GUARD" >>"$RAW/seed.txt"
                pair seed.txt 600 "seed $n $mode" "$mote_cmd" ""
                continue
            fi
            pair seed.txt 600 "seed $n $mode" "$mote_cmd" "$go_cmd"
        done
    done
}

# ---- section 2: yield and spawn+exit --------------------------------------
micro_section() {
    local yi sp w
    if [ "$MODE" = full ]; then yi=5000000 sp=1000000; else yi=1000000 sp=200000; fi
    for REP in $(seq 1 "$REPS"); do
        say "task micro-benchmarks, repetition $REP/$REPS"
        for w in 1 2; do
            pair micro.txt 120 "yield workers=$w" \
                "MOTE_WORKERS=$w $CBIN/tasks/yield $yi" "GOMAXPROCS=$w $GOBIN_DIR/yield $yi"
            pair micro.txt 120 "spawn workers=$w" \
                "MOTE_WORKERS=$w $CBIN/tasks/spawn $sp" "GOMAXPROCS=$w $GOBIN_DIR/spawn $sp"
        done
        for t in 1024 16384; do
            pair micro.txt 120 "spawn touch=$t batch=1024 workers=2" \
                "MOTE_WORKERS=2 $CBIN/tasks/spawn $sp $t 1024" "GOMAXPROCS=2 $GOBIN_DIR/spawn $sp $t 1024"
        done
    done
}

# ---- channel/select/mutex micro-benchmarks (bench/tasks/run_chan.sh) -------
# Contract: run_chan.sh prints `name=<bench> impl=<mote|go> workers=<n>
# ns_per_op=<float>` lines.  It gets BENCH_BUILD_DIR (the CMake build dir),
# BENCH_GO_BIN (where run.sh put the Go programs), BENCH_MODE (quick|full)
# and BENCH_REPS=1; run.sh calls it once per repetition and tags the lines.
chan_section() {
    local script=$ROOT/bench/tasks/run_chan.sh
    if [ ! -f "$script" ]; then
        say "no bench/tasks/run_chan.sh yet: channel section skipped"
        echo "kind=fail section=chan what=run_chan.sh-missing rc=0" >>"$RAW/failures.txt"
        return
    fi
    for REP in $(seq 1 "$REPS"); do
        say "channel/select/mutex micro-benchmarks (run_chan.sh), repetition $REP/$REPS"
        run_one chan.txt 600 "run_chan.sh" -- env BENCH_BUILD_DIR="$BUILD_DIR" \
            BENCH_GO_BIN="$GOBIN_DIR" BENCH_MODE="$MODE" BENCH_REPS=1 bash "$script" --"$MODE"
    done
}

# ---- section 3: allocators (bench/malloc/run.sh) ---------------------------
malloc_section() {
    local script=$ROOT/bench/malloc/run.sh
    if [ ! -f "$script" ]; then
        say "no bench/malloc/run.sh yet: allocator section skipped"
        echo "kind=fail section=malloc what=run.sh-missing rc=0" >>"$RAW/failures.txt"
        return
    fi
    REP=0
    say "allocators (bench/malloc/run.sh --$MODE, $REPS repetitions, alternating inside)"
    STREAM_ERR=1 run_one malloc.txt 2400 "malloc/run.sh" -- env BENCH_BUILD_DIR="$BUILD_DIR" \
        BENCH_MODE="$MODE" BENCH_REPS="$REPS" bash "$script" --"$MODE" \
        ${MALLOC_ONLY:+--only "$MALLOC_ONLY"}
}

# Go's free-then-idle (seed 003), for the RSS-after-free chart.
idle_section() {
    have "$GOBIN_DIR/bigfree" || return
    local total idle
    if [ "$MODE" = full ]; then total=$((2 << 30)) idle=3000; else total=$((512 << 20)) idle=1500; fi
    for REP in $(seq 1 "$REPS"); do
        say "Go free-then-idle (seed 003), repetition $REP/$REPS"
        run_one idle.txt 120 "go bigfree mixed" -- "$GOBIN_DIR/bigfree" mixed $total $idle
        [ "$MODE" = full ] && run_one idle.txt 120 "go bigfree big" -- "$GOBIN_DIR/bigfree" big $total $idle
    done
}

# ---- network servers against Go (bench/net) --------------------------------
# mote's examples/echo_server.c and examples/http_hello.c against
# bench/net/echo.go and bench/net/http.go.  bench/net/loadgen drives the echo
# servers (ping-pong at 1/50/1000 connections, streaming, idle connections),
# wrk the HTTP ones (bench/net/wrk.sh).  Every server is started on a free
# port for one session of clients and stopped after it; smoke.py checks it
# answers right first.  Two CPU layouts:
#   pinned  server on CPU 0 with one worker (MOTE_WORKERS=1 / GOMAXPROCS=1),
#           load generator / wrk on CPU 1;
#   shared  nothing pinned, two workers (MOTE_WORKERS=2 / GOMAXPROCS=2).
# Sides alternate which goes first by repetition, as pair() does.
NET_PID=
NET_PORT=
NET_TMP=

net_fail() { # net_fail WHAT MSG
    echo "kind=fail section=net what=$1 rc=1 rep=$REP msg=$(echo "$2" | tr ' =' '_:' | cut -c1-120)" >>"$RAW/failures.txt"
    say "  $1: FAILED ($2)"
}

net_alive() {
    [ -n "$NET_PID" ] && [ -r "/proc/$NET_PID/status" ] &&
        ! grep -q '^State:.*Z' "/proc/$NET_PID/status" 2>/dev/null
}

# net_start IMPL KIND CPU: starts the IMPL (mote|go) server of KIND
# (echo|http) with the CPU layout; sets NET_PID and NET_PORT, or returns 1.
net_start() {
    local impl=$1 kind=$2 cpu=$3 bin i
    case $impl:$kind in
    mote:echo) bin=$BUILD_DIR/mote_echo_server ;;
    mote:http) bin=$BUILD_DIR/mote_http_hello ;;
    go:*) bin=$GOBIN_DIR/$kind ;;
    esac
    if [ ! -x "$bin" ]; then
        grep -qs "what=not-built:$bin " "$RAW/failures.txt" ||
            echo "kind=fail section=net what=not-built:$bin rc=0" >>"$RAW/failures.txt"
        return 1
    fi
    local env=(MOTE_WORKERS=1 GOMAXPROCS=1) pin=(taskset -c 0)
    [ "$cpu" = shared ] && env=(MOTE_WORKERS=2 GOMAXPROCS=2) pin=()
    "${pin[@]}" env "${env[@]}" "$bin" 0 >"$NET_TMP/out" 2>"$NET_TMP/err" &
    NET_PID=$!
    NET_PORT=
    for i in $(seq 1 100); do
        NET_PORT=$(sed -n 's/^listening on .*:\([0-9][0-9]*\)$/\1/p' "$NET_TMP/out")
        [ -n "$NET_PORT" ] && break
        net_alive || break
        sleep 0.05
    done
    # The port is printed after listen(); also see one connection accepted.
    if [ -z "$NET_PORT" ] || ! (exec 3<>"/dev/tcp/127.0.0.1/$NET_PORT") 2>/dev/null; then
        net_fail "start:$impl-$kind-$cpu" "server did not come up: $(tail -n 1 "$NET_TMP/err")"
        net_stop
        return 1
    fi
    sleep 0.1 # let it close that probe before anyone counts its descriptors
    echo "## net: started $impl $kind ($cpu): ${pin[*]} ${env[*]} $bin 0, pid $NET_PID port $NET_PORT" >>"$LOG"
}

net_stop() {
    [ -n "$NET_PID" ] || return 0
    local i
    kill "$NET_PID" 2>/dev/null
    for i in $(seq 1 40); do
        net_alive || break
        sleep 0.05
    done
    kill -KILL "$NET_PID" 2>/dev/null
    wait "$NET_PID" 2>/dev/null
    { echo "## net: stopped pid $NET_PID; its stderr:"; tail -n 20 "$NET_TMP/err"; } >>"$LOG" 2>/dev/null
    NET_PID=
}

# After a client run: a server that died takes the rest of its session.
net_check_alive() { # LABEL
    net_alive && return 0
    net_fail "server-died:$1" "$(tail -n 1 "$NET_TMP/err")"
    wait "$NET_PID" 2>/dev/null
    NET_PID=
    return 1
}

net_smoke() { # IMPL KIND
    local strict=()
    [ "$1" = mote ] && strict=(--strict)
    if ! python3 "$ROOT/bench/net/smoke.py" "$2" "127.0.0.1:$NET_PORT" "${strict[@]}" >>"$LOG" 2>"$NET_TMP/smoke"; then
        cat "$NET_TMP/smoke" >>"$LOG"
        net_fail "smoke:$1-$2" "$(tail -n 1 "$NET_TMP/smoke")"
    fi
}

net_echo_session() { # IMPL CPU
    local impl=$1 cpu=$2 c pin=()
    [ "$cpu" = pinned ] && pin=(taskset -c 1)
    net_start "$impl" echo "$cpu" || return
    net_smoke "$impl" echo
    local tags=(-t "impl=$impl" -t "cpu=$cpu")
    for c in 1 50 1000; do
        run_one net.txt 60 "echo pingpong c=$c $cpu $impl" -- "${pin[@]}" "$NET_LG" pingpong \
            -a "127.0.0.1:$NET_PORT" -c $c -s 512 -d "$NET_DUR" -w "$NET_WARM" "${tags[@]}"
        net_check_alive "$impl-echo-$cpu" || return
    done
    run_one net.txt 60 "echo stream c=4 $cpu $impl" -- "${pin[@]}" "$NET_LG" stream \
        -a "127.0.0.1:$NET_PORT" -c 4 -s 512 -d "$NET_DUR" -w "$NET_WARM" "${tags[@]}"
    net_check_alive "$impl-echo-$cpu" || return
    net_stop
}

net_http_session() { # IMPL CPU
    local impl=$1 cpu=$2 c pin=()
    [ "$cpu" = pinned ] && pin=(taskset -c 1)
    net_start "$impl" http "$cpu" || return
    net_smoke "$impl" http
    for c in 50 400; do
        run_one net.txt 60 "http c=$c $cpu $impl" -- "${pin[@]}" bash "$ROOT/bench/net/wrk.sh" \
            -c $c -d "$NET_HTTP_DUR" -u "http://127.0.0.1:$NET_PORT/" -t "impl=$impl" -t "cpu=$cpu"
        net_check_alive "$impl-http-$cpu" || return
    done
    net_stop
}

net_idle() { # IMPL N
    local impl=$1 n=$2
    net_start "$impl" echo pinned || return
    run_one net.txt 300 "echo idle n=$n $impl" -- taskset -c 1 "$NET_LG" idle \
        -a "127.0.0.1:$NET_PORT" -c "$n" -p "$NET_PID" -t "impl=$impl" -t cpu=pinned
    net_check_alive "$impl-idle" || return
    net_stop
}

net_section() {
    NET_LG=$CBIN/net/loadgen
    local idle_ns shared_reps cfgs=(pinned shared) cfg reps kind impl order n
    if [ "$MODE" = full ]; then
        NET_DUR=2 NET_WARM=0.5 NET_HTTP_DUR=3 idle_ns="10000 100000" shared_reps=$REPS
    else
        NET_DUR=1 NET_WARM=0.3 NET_HTTP_DUR=2 idle_ns="10000" shared_reps=1
    fi
    if ! have "$NET_LG"; then
        say "no bench/net/loadgen: network section skipped"
        echo "kind=fail section=net what=not-built:$NET_LG rc=0" >>"$RAW/failures.txt"
        return
    fi
    # The mote servers are examples/ targets, left out of the default build
    # until libmote has the netpoller: build them by name, and let a failure
    # be "no data" for mote, not the end of the run (and never a stale
    # binary from an earlier build).
    if [ "$BUILD" = 1 ]; then
        local blog
        blog=$(mktemp)
        rm -f "$BUILD_DIR/mote_echo_server" "$BUILD_DIR/mote_http_hello"
        if ! cmake --build "$BUILD_DIR" -j"$(nproc)" --target mote_echo_server mote_http_hello >"$blog" 2>&1; then
            local why
            why=$(grep -m1 -oE "undefined reference to .[a-z_]+|error: .*" "$blog")
            REP=0 net_fail "build:mote_echo_server,mote_http_hello" "${why:-see run.log}"
        fi
        cat "$blog" >>"$LOG"
        rm -f "$blog"
    fi
    command -v wrk >/dev/null 2>&1 || REP=0 net_fail "wrk-missing" "install wrk (Debian package wrk)"
    if [ "$(nproc)" -lt 2 ] || ! command -v taskset >/dev/null 2>&1; then
        REP=0 net_fail "pinning" "needs 2 CPUs and taskset: shared layout only"
        cfgs=(shared)
    fi
    # Descriptors for the idle case (server and load generator alike; Go
    # raises its own soft limit to the hard one, mote's servers do not).
    local need=$(( $(echo "$idle_ns" | tr ' ' '\n' | sort -n | tail -n 1) + 4096 ))
    if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need" ]; then
        # Raising the hard limit needs root (up to fs.nr_open).
        [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -lt "$need" ] &&
            ulimit -Hn "$need" 2>/dev/null
        ulimit -n "$need" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
    fi
    echo "kind=limits nofile=$(ulimit -n) nofile_hard=$(ulimit -Hn) nr_open=$(cat /proc/sys/fs/nr_open) port_range=$(tr '\t' '-' </proc/sys/net/ipv4/ip_local_port_range) somaxconn=$(cat /proc/sys/net/core/somaxconn) tw_reuse=$(cat /proc/sys/net/ipv4/tcp_tw_reuse)" >>"$RAW/net.txt"
    NET_TMP=$(mktemp -d)
    trap 'net_stop; rm -rf "$NET_TMP"' EXIT
    trap 'net_stop; rm -rf "$NET_TMP"; exit 130' INT TERM

    for cfg in "${cfgs[@]}"; do
        reps=$REPS
        [ "$cfg" = shared ] && reps=$shared_reps
        for REP in $(seq 1 "$reps"); do
            say "network servers, $cfg CPUs, repetition $REP/$reps"
            order="mote go"
            [ $((REP % 2)) -eq 0 ] && order="go mote"
            for kind in echo http; do
                for impl in $order; do
                    "net_${kind}_session" "$impl" "$cfg"
                    net_stop
                done
            done
        done
    done
    for REP in $(seq 1 "$REPS"); do
        say "idle connections, repetition $REP/$REPS"
        order="mote go"
        [ $((REP % 2)) -eq 0 ] && order="go mote"
        for n in $idle_ns; do
            if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((n + 1024)) ]; then
                [ "$REP" = 1 ] && net_fail "idle-$n" "skipped: $n connections need RLIMIT_NOFILE >= $((n + 1024)), the hard limit is $(ulimit -Hn) and raising it needs CAP_SYS_RESOURCE"
                continue
            fi
            for impl in $order; do
                net_idle "$impl" "$n"
                net_stop
            done
        done
    done
    rm -rf "$NET_TMP"
    trap - EXIT INT TERM
}

# ---- frozen stacks (issue 14): the trade-off ------------------------------
# (a) bench/tasks/sleepers (N tasks sleeping exponentially with mean M ms for
#     S s) at MOTE_STACK_FREEZE=off, 4s, 1s, 250ms, and sleepers.go;
# (b) the unbuffered channel ping-pong (two tasks that never park past the
#     threshold) with MOTE_STACK_FREEZE=off against the default, 1 and 2
#     workers;
# (c) the seed program, idle (and 8 KiB in full), freeze off against the default: RSS
#     + page tables 2 s after the last park and once the frozen count is
#     stable (bounded wait), freeze CPU, and the release (thaw of every task).
# Every variant runs once per repetition; the order rotates by repetition
# (reversed on even ones) as pair() alternates.  Output: raw/freeze.txt.
freeze_each() { # freeze_each FILE TIMEOUT LABEL "tag|ENV CMD" ...: rotated order
    local file=$1 tmo=$2 label=$3 v cmd p
    shift 3
    local vs=("$@") i
    if [ $((REP % 2)) -eq 0 ]; then
        vs=()
        for ((i = $#; i >= 1; i--)); do vs+=("${!i}"); done
    fi
    for v in "${vs[@]}"; do
        cmd=${v#*|}
        p=$(prog_of "$cmd")
        if [ ! -x "$p" ]; then
            grep -qs "what=not-built:$p " "$RAW/failures.txt" ||
                echo "kind=fail section=${file%.txt} what=not-built:$p rc=0" >>"$RAW/failures.txt"
            continue
        fi
        RUN_TAG="fz=${v%%|*}" run_one "$file" "$tmo" "$label ${v%%|*}" -- env $cmd
    done
}

freeze_section() {
    local n mean secs pp sn sw settle=2000 mode fz w modes
    if [ "$MODE" = full ]; then
        n=100000 mean=1000 secs=10 pp=5000000 sn=1000000 sw=20000 modes="idle 8k"
        # mote off ~5 KiB and Go ~3 KiB per sleeper; halve N when tight.
        [ $((n * 8192)) -gt "$(guard_now)" ] && n=50000
    else
        n=20000 mean=1000 secs=6 pp=1000000 sn=100000 sw=8000 modes=idle
    fi
    local sl=$CBIN/tasks/sleepers
    local thresholds=(off 4s 1s 250ms)
    for REP in $(seq 1 "$REPS"); do
        say "frozen stacks: sleepers N=$n mean=${mean}ms ${secs}s, repetition $REP/$REPS"
        local vars=()
        for fz in "${thresholds[@]}"; do vars+=("$fz|MOTE_STACK_FREEZE=$fz $sl $n $mean $secs"); done
        vars+=("go|$GOBIN_DIR/sleepers $n $mean $secs")
        freeze_each freeze.txt $((secs + 120)) "sleepers" "${vars[@]}"
        say "frozen stacks: channel ping-pong, freeze off vs default, repetition $REP/$REPS"
        for w in 1 2; do
            freeze_each freeze.txt 120 "chan_pingpong workers=$w"                 "off|MOTE_WORKERS=$w MOTE_STACK_FREEZE=off $CBIN/tasks/chan_pingpong $pp"                 "default|MOTE_WORKERS=$w $CBIN/tasks/chan_pingpong $pp"
        done
        say "frozen stacks: seed $sn tasks, freeze off vs default, repetition $REP/$REPS"
        for mode in $modes; do
            freeze_each freeze.txt 600 "seed $sn $mode"                 "off|MOTE_STACK_FREEZE=off $CBIN/seed/seed $sn $mode $settle 0"                 "default|$CBIN/seed/seed $sn $mode $settle $sw"
        done
    done
}

# ---- section 4: the machine -------------------------------------------------
machine_section() {
    {
        echo "cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
        echo "cpus=$(nproc)"
        echo "mem=$(awk '/^MemTotal:/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
        echo "os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
        echo "kernel=$(uname -r)"
        echo "gcc=$(gcc --version 2>/dev/null | head -1)"
        echo "clang=$(clang --version 2>/dev/null | head -1)"
        echo "go=$(go version 2>/dev/null)"
        echo "cmake=$(cmake --version 2>/dev/null | head -1)"
        echo "python=$(python3 --version 2>&1)"
        for p in libc6 libtcmalloc-minimal4 libjemalloc2 libmimalloc2.0 golang-go; do
            echo "pkg_$p=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null)"
        done
        echo "thp=$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
        echo "max_map_count=$(cat /proc/sys/vm/max_map_count 2>/dev/null)"
        echo "loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg)"
    } >"$RAW/machine.txt"
}

machine_section
want seed && seed_section
want micro && micro_section
want chan && chan_section
want malloc && malloc_section
want idle && idle_section
want net && net_section
want freeze && freeze_section
echo "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW/machine.txt"
echo "elapsed_s=$(($(date +%s) - T_START))" >>"$RAW/meta.txt"
render
rc=$?
say "done in $(($(date +%s) - T_START)) s: $OUT/REPORT.md"
exit $rc
