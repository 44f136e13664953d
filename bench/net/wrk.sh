#!/usr/bin/env bash
# bench/net/wrk.sh - runs wrk once against an HTTP server and prints its
# figures as one key=value line for bench/run.sh:
#   name=http conns=50 threads=1 duration_s=3 rps=... p50_us=... p99_us=...
#
#   wrk.sh -c CONNS -d SECONDS -u URL [-t KEY=VALUE]...
#
# Keep-alive as wrk does by default, one wrk thread.  A run with non-2xx
# answers or socket errors fails (exit 1, no line): a server that answers
# wrong must not look fast.
set -u -o pipefail
conns=50 dur=3 url= tags=
while getopts c:d:u:t: o; do
    case $o in
    c) conns=$OPTARG ;;
    d) dur=$OPTARG ;;
    u) url=$OPTARG ;;
    t) tags="$tags $OPTARG" ;;
    *) echo "usage: wrk.sh -c CONNS -d SECONDS -u URL [-t KEY=VALUE]..." >&2; exit 2 ;;
    esac
done
[ -n "$url" ] || { echo "wrk.sh: -u URL is required" >&2; exit 2; }
command -v wrk >/dev/null 2>&1 || { echo "wrk.sh: wrk is not installed (Debian: wrk)" >&2; exit 1; }

out=$(wrk -t1 -c"$conns" -d"${dur}s" --latency "$url" 2>&1)
rc=$?
printf '%s\n' "$out" >&2 # the whole output goes to run.sh's log
[ $rc -eq 0 ] || { echo "wrk.sh: wrk failed (exit $rc)" >&2; exit 1; }

# wrk prints latencies as 812.00us, 1.23ms or 1.05s: to microseconds.
printf '%s\n' "$out" | awk -v conns="$conns" -v dur="$dur" -v tags="$tags" '
function us(v) {
    if (v ~ /us$/) return v + 0
    if (v ~ /ms$/) return v * 1000
    if (v ~ /s$/) return v * 1000000
    return -1
}
/^ +50% / { p50 = us($2) }
/^ +99% / { p99 = us($2) }
/^Requests\/sec:/ { rps = $2 }
/ requests in / { reqs = $1 }
/Non-2xx or 3xx responses:/ { non2xx = $NF }
/Socket errors:/ { gsub(",", ""); errs = $4 + $6 + $8 + $10 }
END {
    if (rps == "" || p99 == "") { print "wrk.sh: no figures in the output" > "/dev/stderr"; exit 1 }
    if (non2xx + 0 > 0 || errs + 0 > 0) {
        printf "wrk.sh: %d non-2xx answers, %d socket errors\n", non2xx, errs > "/dev/stderr"
        exit 1
    }
    printf "name=http conns=%s threads=1 duration_s=%s rps=%.0f p50_us=%.1f p99_us=%.1f requests=%s%s\n",
        conns, dur, rps, p50, p99, reqs, tags
}'
