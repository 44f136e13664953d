#!/usr/bin/env python3
"""report.py - turns the raw key=value lines of bench/run.sh into REPORT.md
and SVG charts (hand-written SVG: standard library only).

Inputs (all under --raw, every line `key=value key=value ...`):
  meta.txt, machine.txt  one `key=value` per line (values may have spaces)
  seed.txt      kind=seed|seedt|skip lines of bench/seed/seed{.c,.go}
  micro.txt     name=... impl=... workers=... ns_per_op=... (yield, spawn)
  chan.txt      the same format, from bench/tasks/run_chan.sh
  malloc.txt    bench/malloc/run.sh output (parsed leniently, see malloc_*)
  idle.txt      kind=idle lines of bench/go/bigfree.go
  net.txt       name=echo_pingpong|echo_stream|echo_idle|http lines of
                bench/net/loadgen and bench/net/wrk.sh, plus kind=limits
  freeze.txt    frozen stacks: kind=sleepers, name=chan_pingpong and
                kind=seed|seedt lines, each tagged fz=<threshold>|go by run.sh
  failures.txt  kind=fail lines written by run.sh
Every comparison reports the median over repetitions with min and max.
"""
import argparse
import math
import os
import re
import statistics
import sys

GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10


# ---------------------------------------------------------------- parsing
def parse_kv_line(line):
    d = {}
    for tok in line.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            d[k] = v
    return d


def read_lines(path):
    if not os.path.exists(path):
        return []
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if "=" in line and not line.startswith("#"):
                d = parse_kv_line(line)
                if d:
                    out.append(d)
    return out


def read_props(path):
    d = {}
    if os.path.exists(path):
        with open(path, errors="replace") as f:
            for line in f:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    d[k.strip()] = v.strip()
    return d


def num(d, *keys, default=None):
    """First key of d that parses as a number."""
    for k in keys:
        if k in d:
            try:
                return float(d[k])
            except ValueError:
                pass
    return default


# ---------------------------------------------------------------- stats
class Stat:
    def __init__(self, values):
        self.values = [v for v in values if v is not None and not math.isnan(v)]

    def __bool__(self):
        return bool(self.values)

    @property
    def med(self):
        return statistics.median(self.values) if self.values else None

    @property
    def lo(self):
        return min(self.values) if self.values else None

    @property
    def hi(self):
        return max(self.values) if self.values else None

    @property
    def n(self):
        return len(self.values)


def fmt_bytes(b):
    if b is None:
        return "—"
    a = abs(b)
    if a >= GiB:
        return "%.2f GiB" % (b / GiB)
    if a >= MiB:
        return "%.1f MiB" % (b / MiB)
    if a >= KiB:
        return "%.1f KiB" % (b / KiB)
    return "%d B" % b


def fmt_ns(v):
    if v is None:
        return "—"
    if v >= 1e6:
        return "%.2f ms" % (v / 1e6)
    if v >= 1e3:
        return "%.2f µs" % (v / 1e3)
    if v >= 100:
        return "%.0f ns" % v
    return "%.1f ns" % v


def fmt_ms(v):
    if v is None:
        return "—"
    if v >= 1000:
        return "%.2f s" % (v / 1000)
    return "%.0f ms" % v if v >= 10 else "%.1f ms" % v


def fmt_num(v, digits=1):
    return "—" if v is None else ("%." + str(digits) + "f") % v


def fmt_stat(st, f):
    """median (min–max) with the formatter f; just the median if 1 value."""
    if not st:
        return "—"
    lo, hi = f(st.lo), f(st.hi)
    if st.n == 1 or lo == hi:
        return f(st.med)
    return "%s <sub>(%s–%s)</sub>" % (f(st.med), lo, hi)


def ratio_text(mote, peer, lower_is_better=True, what=("faster", "slower")):
    """'3.2× faster' style: how mote compares with peer."""
    if mote is None or peer is None or mote <= 0 or peer <= 0:
        return "—"
    r = peer / mote if lower_is_better else mote / peer
    if r >= 1:
        return "%.2f× %s" % (r, what[0])
    return "%.2f× %s" % (1 / r, what[1])


def case_label(n, mode):
    n = int(n)
    nl = "%dM" % (n // 1000000) if n >= 1000000 and n % 1000000 == 0 else (
        "%dk" % (n // 1000) if n % 1000 == 0 else str(n))
    ml = {"idle": "idle", "8k": "8 KiB once", "64k": "64 KiB once"}.get(mode, mode)
    return "%s × %s" % (nl, ml)


# ---------------------------------------------------------------- SVG charts
ALLOC_ORDER = ["mote", "glibc", "tcmalloc", "jemalloc", "mimalloc", "go"]
ALLOC_COLORS = {"mote": "#1f77b4", "glibc": "#7f7f7f", "tcmalloc": "#ff7f0e", "jemalloc": "#2ca02c",
                "mimalloc": "#9467bd", "go": "#d62728"}
# bench/malloc/run.sh's round-two programs: their own section, not the
# generic throughput and free-then-idle tables.
ROUND2_BENCHES = {"large", "survivors", "larson", "threadreq", "replace", "prodcons", "prodcons-fill", "churn", "bigset", "mixsizes",
                  "largerand",
                  "colour", "xtstab", "xtstab-pool", "profile-on", "profile-off", "profile-file"}
PALETTE = ["#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
           "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"]


def nice_ticks(lo, hi, n=6):
    if hi <= lo:
        hi = lo + 1
    span = hi - lo
    step = 10 ** math.floor(math.log10(span / n))
    for m in (1, 2, 2.5, 5, 10):
        if span / (step * m) <= n:
            step *= m
            break
    start = math.floor(lo / step) * step
    ticks = []
    t = start
    while t <= hi + step * 1e-9:
        if t >= lo - step * 1e-9:
            ticks.append(round(t, 12))
        t += step
    return ticks, step


def log_ticks(lo, hi):
    ticks = []
    e0, e1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for e in range(e0, e1 + 1):
        for m in (1, 2, 5):
            v = m * 10 ** e
            if lo * 0.999 <= v <= hi * 1.001:
                ticks.append(v)
    if len(ticks) > 10:
        ticks = [t for t in ticks if str(t).lstrip("0.").startswith("1")]
    return ticks


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def line_chart(path, title, xlabel, ylabel, series, logx=False, logy=False,
               xfmt=str, yfmt=None, note=None, ymin0=True, hline=None, yunit=1):
    """series: [{'name', 'points': [(x, y)], 'dash': bool, 'color'}]; y
    values are divided by yunit (e.g. GiB) before plotting."""
    yfmt = yfmt or (lambda v: "%g" % v)
    series = [dict(s, points=[(x, y / yunit) for x, y in s["points"] if y is not None])
              for s in series if s["points"]]
    if hline is not None:
        hline = (hline[0] / yunit, hline[1])
    W, H = 760, 440
    L, R, T, B = 80, 200, 44, 56
    pw, ph = W - L - R, H - T - B
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">' % (W, H, W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="20" font-size="15" font-weight="bold">%s</text>' % (L, esc(title))]
    if not series:
        out.append('<text x="%d" y="%d">no data</text>' % (L + 20, T + 40))
        out.append("</svg>")
        with open(path, "w") as f:
            f.write("\n".join(out))
        return
    xs = [p[0] for s in series for p in s["points"]]
    ys = [p[1] for s in series for p in s["points"]]
    if hline is not None:
        ys.append(hline[0])
    if logx:
        xs = [x for x in xs if x > 0]
        xlo, xhi = min(xs) / 1.3, max(xs) * 1.3
    else:
        xlo, xhi = min(xs), max(xs)
        if xlo == xhi:
            xlo, xhi = xlo - 1, xhi + 1
    if logy:
        ys = [y for y in ys if y > 0]
        ylo, yhi = min(ys) / 1.5, max(ys) * 1.5
    else:
        ylo, yhi = (0 if ymin0 else min(ys)), max(ys) * 1.08
        if yhi <= ylo:
            yhi = ylo + 1

    def X(x):
        if logx:
            return L + pw * (math.log10(max(x, 1e-300)) - math.log10(xlo)) / (math.log10(xhi) - math.log10(xlo))
        return L + pw * (x - xlo) / (xhi - xlo)

    def Y(y):
        if logy:
            return T + ph - ph * (math.log10(max(y, 1e-300)) - math.log10(ylo)) / (math.log10(yhi) - math.log10(ylo))
        return T + ph - ph * (y - ylo) / (yhi - ylo)

    xt = log_ticks(xlo, xhi) if logx else nice_ticks(xlo, xhi)[0]
    yt = log_ticks(ylo, yhi) if logy else nice_ticks(ylo, yhi)[0]
    for t in yt:
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e5e5e5"/>' % (L, L + pw, Y(t), Y(t)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (L - 6, Y(t) + 4, esc(yfmt(t))))
    for t in xt:
        out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#eeeeee"/>' % (X(t), X(t), T, T + ph))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (X(t), T + ph + 18, esc(xfmt(t))))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>' % (L, T, pw, ph))
    out.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % (L + pw / 2, H - 14, esc(xlabel)))
    out.append('<text transform="translate(18,%d) rotate(-90)" text-anchor="middle">%s</text>' % (T + ph / 2, esc(ylabel)))
    if hline is not None:
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="2,3"/>' % (L, L + pw, Y(hline[0]), Y(hline[0])))
        out.append('<text x="%d" y="%.1f" fill="#555" text-anchor="end">%s</text>' % (L + pw - 4, Y(hline[0]) - 4, esc(hline[1])))
    for i, s in enumerate(series):
        c = s.get("color") or PALETTE[i % len(PALETTE)]
        pts = sorted(s["points"])
        pts = [p for p in pts if (p[0] > 0 or not logx) and (p[1] > 0 or not logy)]
        d = " ".join("%s%.1f,%.1f" % ("M" if j == 0 else "L", X(x), Y(y)) for j, (x, y) in enumerate(pts))
        dash = ' stroke-dasharray="6,4"' if s.get("dash") else ""
        width = 3 if s["name"].startswith("mote") else 2
        out.append('<path d="%s" fill="none" stroke="%s" stroke-width="%d"%s/>' % (d, c, width, dash))
        if len(pts) <= 40:
            for x, y in pts:
                if s.get("dash"):  # hollow markers for the dashed (peer) series
                    out.append('<rect x="%.1f" y="%.1f" width="7" height="7" fill="white" stroke="%s" stroke-width="1.5"/>' % (X(x) - 3.5, Y(y) - 3.5, c))
                else:
                    out.append('<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>' % (X(x), Y(y), c))
        ly = T + 14 + 18 * i
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/>' % (L + pw + 12, L + pw + 36, ly - 4, ly - 4, c, dash))
        out.append('<text x="%d" y="%d">%s</text>' % (L + pw + 42, ly, esc(s["name"])))
    if note:
        out.append('<text x="%d" y="%d" font-size="11" fill="#555">%s</text>' % (L, T - 8, esc(note)))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def bar_chart(path, title, rows, xlabel):
    """Horizontal bars of mote's speed-up over Go (log scale, 1 = parity).
    rows: [(label, ratio)] with ratio = go_time / mote_time."""
    rows = [r for r in rows if r[1] and r[1] > 0]
    W = 760
    L, R, T, B = 230, 60, 44, 50
    bh = 22
    H = T + B + bh * max(1, len(rows))
    pw = W - L - R
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="sans-serif" font-size="12">' % (W, H, W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="10" y="24" font-size="15" font-weight="bold">%s</text>' % esc(title)]
    if rows:
        lo = min(0.25, min(r[1] for r in rows) / 1.5)
        hi = max(4, max(r[1] for r in rows) * 1.5)

        def X(v):
            return L + pw * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
        for t in log_ticks(lo, hi):
            out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#eee"/>' % (X(t), X(t), T, H - B))
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%g×</text>' % (X(t), H - B + 16, t))
        for i, (label, r) in enumerate(rows):
            y = T + i * bh
            x0, x1 = X(1), X(r)
            c = "#2ca02c" if r >= 1 else "#d62728"
            out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>' % (min(x0, x1), y + 3, abs(x1 - x0), bh - 6, c))
            out.append('<text x="%d" y="%d" text-anchor="end">%s</text>' % (L - 6, y + bh - 7, esc(label)))
            out.append('<text x="%.1f" y="%d" %s>%.2f×</text>' % (x1 + (4 if r >= 1 else -4), y + bh - 7,
                                                                   'text-anchor="start"' if r >= 1 else 'text-anchor="end"', r))
        out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#333"/>' % (X(1), X(1), T, H - B))
    out.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % (L + pw / 2, H - 12, esc(xlabel)))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def count_fmt(v):
    if v >= 1e6:
        return "%gM" % (v / 1e6)
    if v >= 1e3:
        return "%gk" % (v / 1e3)
    return "%g" % v


# ---------------------------------------------------------------- sections
class Report:
    def __init__(self, raw, out, mode):
        self.raw, self.out, self.mode = raw, out, mode
        self.meta = read_props(os.path.join(raw, "meta.txt"))
        self.machine = read_props(os.path.join(raw, "machine.txt"))
        self.seed = read_lines(os.path.join(raw, "seed.txt"))
        self.micro = read_lines(os.path.join(raw, "micro.txt")) + read_lines(os.path.join(raw, "chan.txt"))
        self.malloc = read_lines(os.path.join(raw, "malloc.txt"))
        self.idle = read_lines(os.path.join(raw, "idle.txt"))
        self.net = read_lines(os.path.join(raw, "net.txt"))
        self.failures = read_lines(os.path.join(raw, "failures.txt"))
        self.freeze = read_lines(os.path.join(raw, "freeze.txt"))
        self.summary = []  # (area, target, measured, verdict)
        self.wins = []     # (how much better mote is: >1 better, text)
        self.md = []
        self.charts = []

    def compare(self, what, mote, peer, lower_is_better=True, words=("faster", "slower"), peer_name="Go"):
        """Records one head-to-head comparison for the highlights."""
        if mote and peer and mote > 0 and peer > 0:
            r = peer / mote if lower_is_better else mote / peer
            self.wins.append((r, "%s: %s vs %s" % (what, ratio_text(mote, peer, lower_is_better, words), peer_name)))

    def verdict(self, ok):
        if ok is None:
            return "— no data"
        return "✅ met" if ok else "❌ not yet"

    def add_summary(self, area, target, measured, ok):
        self.summary.append((area, target, measured, self.verdict(ok)))

    # ---------------------------------------------------------- seed
    def seed_runs(self):
        """{(impl, n, mode): [run dict per rep]} with phases and samples merged."""
        runs = {}
        for d in self.seed:
            if d.get("kind") not in ("seed", "seedt"):
                continue
            key = (d.get("impl"), int(d.get("n", 0)), d.get("mode"))
            rep = d.get("rep", "0")
            r = runs.setdefault(key, {}).setdefault(rep, {"samples": [], "gcs": []})
            if d["kind"] == "seed":
                r[d.get("phase", "?")] = d
            elif d.get("event", "").startswith("gc"):
                r["gcs"].append(d)
            else:
                r["samples"].append(d)
        return {k: list(v.values()) for k, v in runs.items()}

    @staticmethod
    def sample_at(run, t_ms):
        """The last sample taken at or before t_ms (+50 ms slack)."""
        best = None
        for s in run["samples"]:
            t = num(s, "t_ms")
            if t is not None and t <= t_ms + 50:
                if best is None or t > num(best, "t_ms"):
                    best = s
        return best

    def seed_metrics(self, impl, n, mode, runs):
        rs = runs.get((impl, n, mode), [])
        m = {}

        def col(f):
            vals = []
            for r in rs:
                try:
                    vals.append(f(r))
                except (KeyError, TypeError, ZeroDivisionError):
                    pass
            return Stat(vals)
        spawned = lambda r: num(r["parked"], "spawned")
        m["spawn_ms"] = col(lambda r: num(r["parked"], "spawn_ms"))
        m["guard"] = any(r.get("parked", {}).get("guard") == "hit" for r in rs)
        m["spawned"] = col(spawned)
        m["stack_parked"] = col(lambda r: num(r["parked"], "stack_inuse") / spawned(r) if num(r["parked"], "stack_inuse", default=-1) >= 0 else None)
        m["rss_parked"] = col(lambda r: num(r["parked"], "rss"))
        m["pte_parked"] = col(lambda r: num(r["parked"], "pte"))
        m["hwm"] = col(lambda r: num(r["parked"], "hwm"))
        m["minflt_per_task"] = col(lambda r: num(r["parked"], "minflt") / spawned(r))
        # Kernel-measured cost of one parked task: (RSS + page tables) at
        # park, less what the process holds once every task is gone.
        after = "exited" if impl == "mote" else "released"
        m["total_per_task"] = col(lambda r: (num(r["parked"], "rss") + num(r["parked"], "pte")
                                             - min(num(r[after], "rss") + num(r[after], "pte"),
                                                   num(r["parked"], "rss") + num(r["parked"], "pte"))) / spawned(r))
        if impl == "mote":
            m["peak"] = col(lambda r: num(r["exited"], "maxrss"))
            s1 = lambda r: self.sample_at(r, 1000)
            m["total_1s"] = col(lambda r: num(s1(r), "rss") + num(s1(r), "pte"))
            m["rss_1s"] = col(lambda r: num(s1(r), "rss"))
            m["stack_settled"] = col(lambda r: num(r["settled"], "stack_inuse") / spawned(r) if num(r["settled"], "stack_inuse", default=-1) >= 0 else None)
            m["rss_settled"] = col(lambda r: num(r["settled"], "rss"))
            m["total_settled"] = col(lambda r: num(r["settled"], "rss") + num(r["settled"], "pte"))
            m["release_ms"] = col(lambda r: num(r["released"], "release_ms"))
            m["exit_ms"] = col(lambda r: num(r["exited"], "exit_ms"))
        else:
            m["peak"] = col(lambda r: num(r["released"], "maxrss"))
            last = lambda r: r["samples"][-1]
            m["total_1s"] = col(lambda r: num(self.sample_at(r, 1000), "rss") + num(self.sample_at(r, 1000), "pte"))
            m["rss_nogc"] = col(lambda r: num(last(r), "rss"))
            m["stack_settled"] = col(lambda r: num(r["settled"], "stack_inuse") / spawned(r))
            m["rss_settled"] = col(lambda r: num(r["settled"], "rss"))
            m["total_settled"] = col(lambda r: num(r["settled"], "rss") + num(r["settled"], "pte"))
            m["release_ms"] = col(lambda r: num(r["released"], "release_ms"))
            m["gogc"] = rs[0].get("parked", {}).get("gogc") if rs else None
            m["gc_ms"] = col(lambda r: sum(num(g, "gc_ms", default=0) for g in r["gcs"]))
        m["reps"] = len(rs)
        m["runs"] = rs
        return m

    def section_seed(self):
        md = self.md
        runs = self.seed_runs()
        skips = {(int(d["n"]), d["mode"]): d for d in self.seed if d.get("kind") == "skip"}
        cases = sorted({(k[1], k[2]) for k in runs} | set(skips),
                       key=lambda c: (["idle", "8k", "64k"].index(c[1]) if c[1] in ("idle", "8k", "64k") else 9, c[0]))
        md.append("## 1. Tasks: the seed experiment (seeds 000 and 002)\n")
        md.append("N tasks (goroutines) each optionally call a function with an 8 KiB or 64 KiB local once "
                  "(every byte written), then park on a channel. *Spawn* runs until every task has parked. "
                  "mote: `bench/seed/seed.c`; Go: `bench/seed/seed.go` (GOGC=off as in the seed, except where "
                  "marked: 1M × 8 KiB with GOGC=off would need ~24 GB). *Stack/task* is mote's "
                  "`/stacks/resident:bytes` (measured from the kernel) or Go's `StackInuse`, divided by N. "
                  "*Peak* is the kernel's max RSS (getrusage). *Settled* is RSS + page tables (VmPTE) "
                  "1 s after the last park with no action by the program for mote; for Go, after 6 forced GCs "
                  "(Go shrinks stacks only in a GC, and without GCs its RSS does not fall at all: column "
                  "*Go no GC*).\n")
        if not cases:
            md.append("_No data: the seed experiment did not run (see Failures)._\n")
            return
        md.append("| case | mote spawn | Go spawn | mote vs Go |")
        md.append("|---|---|---|---|")
        for n, mode in cases:
            a = self.seed_metrics("mote", n, mode, runs)
            g = self.seed_metrics("go", n, mode, runs)
            gl = case_label(n, mode)
            gnote = ""
            if (n, mode) in skips:
                gnote = " (skipped: would need ~%s)" % fmt_bytes(float(skips[(n, mode)]["predicted"]))
            elif g.get("gogc") and g["gogc"] != "off":
                gnote = " (GOGC=%s)" % g["gogc"]
            guard = " ⚠ memory guard stopped spawning at %d" % a["spawned"].med if a["guard"] and a["spawned"] else ""
            self.compare("spawn-and-park " + gl, a["spawn_ms"].med, g["spawn_ms"].med)
            md.append("| %s | %s%s | %s%s | %s |" % (gl, fmt_stat(a["spawn_ms"], fmt_ms), guard,
                                                    fmt_stat(g["spawn_ms"], fmt_ms), gnote,
                                                    ratio_text(a["spawn_ms"].med, g["spawn_ms"].med)))
        md.append("")
        md.append("| case | mote stack/task parked → settled | Go StackInuse/task before → after 6 GCs "
                  "| mote peak RSS | Go peak RSS | mote RSS+PTE 1 s after | Go RSS+PTE 1 s after (no GC) | Go RSS+PTE after 6 GCs | mote vs best Go |")
        md.append("|---|---|---|---|---|---|---|---|---|")
        for n, mode in cases:
            a = self.seed_metrics("mote", n, mode, runs)
            g = self.seed_metrics("go", n, mode, runs)
            gbest = None
            if g["total_settled"] and g["total_1s"]:
                gbest = min(g["total_settled"].med, g["total_1s"].med)
            self.compare("memory of %s parked (RSS+PTE, settled)" % case_label(n, mode), a["total_1s"].med, gbest,
                         words=("less", "more"))
            self.compare("peak RSS of %s" % case_label(n, mode), a["peak"].med, g["peak"].med, words=("less", "more"))
            md.append("| %s | %s → %s | %s → %s | %s | %s | %s | %s | %s | %s |" % (
                case_label(n, mode),
                fmt_stat(a["stack_parked"], fmt_bytes), fmt_stat(a["stack_settled"], fmt_bytes),
                fmt_stat(g["stack_parked"], fmt_bytes), fmt_stat(g["stack_settled"], fmt_bytes),
                fmt_stat(a["peak"], fmt_bytes), fmt_stat(g["peak"], fmt_bytes),
                fmt_stat(a["total_1s"], fmt_bytes), fmt_stat(g["total_1s"], fmt_bytes),
                fmt_stat(g["total_settled"], fmt_bytes),
                ratio_text(a["total_1s"].med, gbest, what=("less memory", "more memory"))))
        md.append("")
        md.append("*Per task* below is (RSS + page tables at park − the same after every task is gone) ÷ N: "
                  "what one parked task costs, measured by the kernel.\n")
        md.append("| case | mote per task | Go per task | mote page tables parked | Go page tables parked | mote faults/task | Go faults/task "
                  "| mote release all | Go release all | Go 6 GCs took |")
        md.append("|---|---|---|---|---|---|---|---|---|---|")
        for n, mode in cases:
            a = self.seed_metrics("mote", n, mode, runs)
            g = self.seed_metrics("go", n, mode, runs)
            md.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                case_label(n, mode), fmt_stat(a["total_per_task"], fmt_bytes), fmt_stat(g["total_per_task"], fmt_bytes),
                fmt_stat(a["pte_parked"], fmt_bytes), fmt_stat(g["pte_parked"], fmt_bytes),
                fmt_stat(a["minflt_per_task"], lambda v: "%.2f" % v), fmt_stat(g["minflt_per_task"], lambda v: "%.2f" % v),
                fmt_stat(a["release_ms"], fmt_ms), fmt_stat(g["release_ms"], fmt_ms), fmt_stat(g["gc_ms"], fmt_ms)))
        md.append("")
        for n, mode in cases:
            a = self.seed_metrics("mote", n, mode, runs)
            want = {"8k": 8 * KiB, "64k": 64 * KiB}.get(mode)
            if want and a["stack_parked"] and a["total_per_task"] and \
                    a["stack_parked"].med < want / 2 and a["total_per_task"].med > want:
                md.append("> ⚠ %s: `/stacks/resident:bytes` says %s per task while the kernel's per-task cost is %s "
                          "(each task wrote %s of stack): the metric undercounts.\n" % (
                              case_label(n, mode), fmt_bytes(a["stack_parked"].med),
                              fmt_bytes(a["total_per_task"].med), fmt_bytes(want)))

        # Charts: peak and settled RSS against task count.
        for what, key_m, key_g, fname, title in (
                ("peak", "peak", "peak", "seed_rss_peak.svg", "Peak RSS against task count (log-log)"),
                ("settled", "total_1s", "total_settled", "seed_rss_settled.svg",
                 "Settled RSS + page tables against task count (log-log)")):
            series = []
            for i, mode in enumerate(("idle", "8k", "64k")):
                for impl, key, dash in (("mote", key_m, False), ("go", key_g, True)):
                    pts = []
                    for n, md_ in cases:
                        if md_ != mode:
                            continue
                        st = self.seed_metrics(impl, n, mode, runs)[key]
                        if st:
                            pts.append((n, st.med))
                    series.append({"name": "%s %s" % (impl, mode), "points": pts, "dash": dash,
                                   "color": ["#1f77b4", "#2ca02c", "#d62728"][i]})
            line_chart(os.path.join(self.out, fname), title, "tasks", "GiB", series, logx=True, logy=True,
                       xfmt=count_fmt, yunit=GiB,
                       note="solid: mote; dashed: Go" + ("" if what == "peak" else " (mote 1 s after parking; Go after 6 forced GCs)"))
            self.charts.append(fname)
        md.append("![peak RSS](seed_rss_peak.svg)\n")
        md.append("![settled RSS](seed_rss_settled.svg)\n")

        # Settling timelines for the heaviest 8k and 64k cases.
        for mode in ("8k", "64k"):
            ns = [n for n, m in cases if m == mode and (("mote", n, mode) in runs or ("go", n, mode) in runs)]
            if not ns:
                continue
            n = max(ns)
            series = []
            for impl, color in (("mote", "#1f77b4"), ("go", "#d62728")):
                rs = runs.get((impl, n, mode), [])
                if not rs:
                    continue
                r = rs[0]
                pts = [(0.0, num(r.get("parked", {}), "rss", default=0))]
                pts += [(num(s, "t_ms") / 1000, num(s, "rss")) for s in r["samples"]]
                pts += [(num(s, "t_ms") / 1000, num(s, "rss")) for s in r["gcs"]]
                series.append({"name": impl + " RSS", "points": pts, "color": color})
                spts = [(num(s, "t_ms") / 1000, num(s, "stack")) for s in r["samples"] + r["gcs"] if "stack" in s]
                if num(r.get("parked", {}), "stack_inuse", default=-1) >= 0:
                    spts.insert(0, (0.0, num(r["parked"], "stack_inuse")))
                if spts:
                    series.append({"name": impl + (" stack resident" if impl == "mote" else " StackInuse"),
                                   "points": spts, "color": color, "dash": True})
            fname = "seed_settle_%s_%s.svg" % (n, mode)
            line_chart(os.path.join(self.out, fname),
                       "After the last park: %s (first repetition)" % case_label(n, mode),
                       "seconds since every task parked", "GiB", series, xfmt=lambda v: "%g" % v,
                       yunit=GiB, note="Go points after the no-GC samples are its 6 forced GCs")
            self.charts.append(fname)
            md.append("![settling %s](%s)\n" % (case_label(n, mode), fname))

        # Summary rows (issue 2 and issue 6 targets).
        idle_ns = [n for n, m in cases if m == "idle"]
        if idle_ns:
            n = max(idle_ns)
            a = self.seed_metrics("mote", n, "idle", runs)["spawn_ms"]
            g = self.seed_metrics("go", n, "idle", runs)["spawn_ms"]
            ok = None if not (a and g) else g.med / a.med >= 3
            self.add_summary("tasks (#2)", "%s spawn-and-park ≥ 3× faster than Go in the same run (brief's Go anchor: 11.9 s for 1M)" % case_label(n, "idle") +
                             ("" if n >= 1000000 else " (target is for 1M; quick run)"),
                             "mote %s, Go %s: %s" % (fmt_ms(a.med), fmt_ms(g.med), ratio_text(a.med, g.med)), ok)
        for mode, base_n, base_total, peak_total in (("8k", 1000000, 5.0 * GiB, 8 * GiB), ("64k", 100000, 0.5 * GiB, None)):
            ns = [n for n, m in cases if m == mode]
            if not ns:
                continue
            n = base_n if base_n in ns else max(ns)
            a = self.seed_metrics("mote", n, mode, runs)
            g = self.seed_metrics("go", n, mode, runs)
            tgt = base_total * n / base_n
            scaled = "" if n == base_n else " (scaled from %s per %s)" % (fmt_bytes(base_total), count_fmt(base_n))
            if a["total_1s"]:
                ok = a["total_1s"].med <= tgt and not a["guard"]
                gtxt = ""
                if g["peak"]:
                    gtxt = "; Go peak %s, after 6 GCs %s" % (fmt_bytes(g["peak"].med), fmt_bytes(g["total_settled"].med))
                self.add_summary("stacks (#6)", "%s: settled RSS+PTE ≤ %s within 1 s%s" % (case_label(n, mode), fmt_bytes(tgt), scaled),
                                 "mote %s%s" % (fmt_bytes(a["total_1s"].med), gtxt), ok)
            else:
                self.add_summary("stacks (#6)", "%s: settled RSS+PTE ≤ %s within 1 s%s" % (case_label(n, mode), fmt_bytes(tgt), scaled), "no mote data", None)
            if peak_total:
                ptgt = peak_total * n / base_n
                if a["peak"]:
                    self.add_summary("stacks (#6)", "%s: peak RSS ≤ %s%s" % (case_label(n, mode), fmt_bytes(ptgt), scaled),
                                     "mote %s (Go %s)" % (fmt_bytes(a["peak"].med), fmt_bytes(g["peak"].med) if g["peak"] else "—"),
                                     a["peak"].med <= ptgt and not a["guard"])

    # ---------------------------------------------------------- micro
    def micro_table(self):
        """{(name, workers): {impl: Stat(ns_per_op)}} and extras."""
        t = {}
        extra = {}
        for d in self.micro:
            if "name" not in d or "impl" not in d:
                continue
            v = num(d, "ns_per_op")
            if v is None:
                continue
            key = (d["name"], d.get("workers", "?"))
            t.setdefault(key, {}).setdefault(d["impl"], []).append(v)
            f = num(d, "minflt_per_op")
            if f is not None:
                extra.setdefault(key, {}).setdefault(d["impl"], []).append(f)
        return ({k: {i: Stat(v) for i, v in imp.items()} for k, imp in t.items()},
                {k: {i: Stat(v) for i, v in imp.items()} for k, imp in extra.items()})

    def section_micro(self):
        md = self.md
        md.append("## 2. Task micro-benchmarks against Go\n")
        md.append("Time per operation (lower is better), median of the repetitions with min–max; both sides "
                  "run in the same run, alternating. *workers* is MOTE_WORKERS for mote and GOMAXPROCS for Go. "
                  "yield: two tasks call `mote_yield` / `runtime.Gosched` in a loop (time per call). "
                  "spawn: spawn N tasks that signal a wait group and exit, then wait (time per task); "
                  "spawn_1k / spawn_16k: each task first uses 1 / 16 KiB of stack, spawned in batches of 1024 (steady state: at most 1024 live). "
                  "Channel, select and mutex rows come from `bench/tasks/run_chan.sh`.\n")
        t, extra = self.micro_table()
        if not t:
            md.append("_No data (see Failures)._\n")
            return t
        order = ["yield", "spawn", "spawn_1k", "spawn_16k"]
        keys = sorted(t, key=lambda k: (order.index(k[0]) if k[0] in order else 50, k[0], k[1]))
        md.append("| benchmark | workers | mote | Go | mote vs Go | faults/op mote / Go |")
        md.append("|---|---|---|---|---|---|")
        bars = []
        for k in keys:
            a, g = t[k].get("mote", Stat([])), t[k].get("go", Stat([]))
            fl = extra.get(k, {})
            ftxt = ""
            if fl:
                ftxt = "%s / %s" % (fmt_num(fl.get("mote", Stat([])).med, 3), fmt_num(fl.get("go", Stat([])).med, 3))
            md.append("| %s | %s | %s | %s | %s | %s |" % (k[0], k[1], fmt_stat(a, fmt_ns), fmt_stat(g, fmt_ns),
                                                         ratio_text(a.med, g.med), ftxt))
            if a and g:
                bars.append(("%s (%s)" % (k[0], k[1]), g.med / a.med))
                self.compare("%s, %s worker%s" % (k[0], k[1], "" if k[1] == "1" else "s"), a.med, g.med)
        md.append("")
        bar_chart(os.path.join(self.out, "micro_vs_go.svg"), "mote's speed-up over Go (>1: mote faster)", bars,
                  "Go time / mote time (log scale)")
        self.charts.append("micro_vs_go.svg")
        md.append("![micro-benchmarks](micro_vs_go.svg)\n")

        def row(name, w, target_ns, target_txt, go_ref):
            s = t.get((name, str(w)), {})
            a, g = s.get("mote"), s.get("go")
            if not a:
                self.add_summary("tasks (#2)", target_txt, "no mote data", None)
                return
            ok = a.med <= target_ns
            self.add_summary("tasks (#2)", target_txt, "mote %s, Go %s: %s" % (
                fmt_ns(a.med), fmt_ns(g.med) if g else "—", ratio_text(a.med, g.med if g else None)), ok)
        row("yield", 1, 15, "yield, 2 tasks on 1 worker ≤ 15 ns (Go ~49 ns)", None)
        row("spawn", 2, 100, "spawn+exit, 2 workers ≤ 100 ns (Go ~338 ns)", None)
        s16, s1 = t.get(("spawn_16k", "2"), {}).get("mote"), t.get(("spawn_1k", "2"), {}).get("mote")
        f16 = extra.get(("spawn_16k", "2"), {}).get("mote")
        if s16 and s1 and f16:
            ok = f16.med < 0.01 and s16.med <= s1.med * 1.10
            self.add_summary("stacks (#6)", "spawn+exit using 16 KiB: ~0 page faults per spawn, no slower than 1 KiB (±10%)",
                             "%s faults/spawn; 16 KiB %s vs 1 KiB %s" % (fmt_num(f16.med, 3), fmt_ns(s16.med), fmt_ns(s1.med)), ok)
        else:
            self.add_summary("stacks (#6)", "spawn+exit using 16 KiB: ~0 page faults per spawn, no slower than 1 KiB", "no data", None)
        for k in keys:
            if k[0] in order:
                continue
            a, g = t[k].get("mote"), t[k].get("go")
            if a and g:
                self.add_summary("channels (#3)", "%s (%s worker%s) ≤ ⅓ of Go's time (≤ %s)" % (k[0], k[1], "" if k[1] == "1" else "s", fmt_ns(g.med / 3)),
                                 "mote %s, Go %s: %s" % (fmt_ns(a.med), fmt_ns(g.med), ratio_text(a.med, g.med)),
                                 a.med <= g.med / 3)
        return t

    # ---------------------------------------------------------- allocators
    @staticmethod
    def alloc_name(d):
        for k in ("alloc", "allocator", "impl", "lib", "malloc"):
            if k in d:
                return d[k]
        return None

    @staticmethod
    def bench_name(d):
        for k in ("bench", "name", "kind", "test"):
            if k in d:
                return d[k]
        return "?"

    def section_malloc(self):
        md = self.md
        md.append("## 3. Allocators\n")
        md.append("From `bench/malloc/run.sh` (every allocator through LD_PRELOAD in the same run, alternating) "
                  "and, for Go, `bench/go/bigfree.go`. Throughput in Mops/s (higher is better) with the kernel's "
                  "peak RSS.\n")
        thr, idle, idle_peak = {}, {}, {}
        for d in self.malloc:
            a = self.alloc_name(d)
            if not a:
                continue
            b = self.bench_name(d)
            if b in ROUND2_BENCHES:
                continue  # section_malloc2
            if "t_ms" in d and num(d, "rss", "rss_bytes") is not None:
                idle.setdefault((b, a), {}).setdefault(d.get("rep", "0"), []).append((num(d, "t_ms") / 1000, num(d, "rss", "rss_bytes")))
                continue
            if "rss_before" in d or ("peak" in d and "mops" not in d):
                e = idle_peak.setdefault((b, a), {"peak": [], "before": []})
                e["peak"].append(num(d, "peak"))
                e["before"].append(num(d, "rss_before"))
                continue
            mops = num(d, "mops", "mops_s", "mops_per_s", "Mops")
            if mops is None and num(d, "ops_per_s") is not None:
                mops = num(d, "ops_per_s") / 1e6
            if mops is None:
                continue
            th = int(num(d, "threads", default=0))
            peak = num(d, "peak_rss", "maxrss", "rss_peak", "peak", "max_rss")
            e = thr.setdefault((b, th), {}).setdefault(a, {"mops": [], "peak": []})
            e["mops"].append(mops)
            if peak is not None:
                e["peak"].append(peak if peak > 1e5 else peak * KiB)  # KiB if small
        for d in self.idle:
            key = ("go-" + d.get("scenario", "?"), "go")
            idle.setdefault(key, {}).setdefault(d.get("rep", "0"), []).append((num(d, "t_ms") / 1000, num(d, "rss")))
            if "peak" in d:
                e = idle_peak.setdefault(key, {"peak": [], "before": []})
                e["peak"].append(num(d, "peak"))
                e["before"].append(num(d, "rss"))
        if not thr and not idle:
            md.append("_No data (see Failures)._\n")
        peers = ["glibc", "tcmalloc", "jemalloc", "mimalloc"]
        benches = sorted({b for b, _ in thr}, key=lambda b: (0 if "mallocbench" in b else 1, b))
        for b in benches:
            ths = sorted(th for bb, th in thr if bb == b)
            allocs = sorted({a for th in ths for a in thr[(b, th)]},
                            key=lambda a: (0 if a == "mote" else 1 + (peers.index(a) if a in peers else 9), a))
            md.append("**%s**\n" % b)
            md.append("| threads | " + " | ".join(allocs) + " | mote vs best peer |")
            md.append("|---|" + "---|" * (len(allocs) + 1))
            for th in ths:
                cells = []
                for a in allocs:
                    e = thr[(b, th)].get(a)
                    if not e:
                        cells.append("—")
                        continue
                    s = fmt_stat(Stat(e["mops"]), lambda v: "%.1f" % v)
                    if e["peak"]:
                        s += " (%s)" % fmt_bytes(Stat(e["peak"]).med)
                    cells.append(s)
                mote = thr[(b, th)].get("mote")
                pe = {a: Stat(e["mops"]).med for a, e in thr[(b, th)].items() if a != "mote"}
                rt = "—"
                if mote and pe:
                    best = max(pe, key=pe.get)
                    rt = "%s (best: %s)" % (ratio_text(Stat(mote["mops"]).med, pe[best], lower_is_better=False), best)
                    self.compare("%s, %d threads" % (b, th), Stat(mote["mops"]).med, pe[best], lower_is_better=False,
                                 peer_name=best)
                md.append("| %d | %s | %s |" % (th, " | ".join(cells), rt))
                if mote and "tcmalloc" in thr[(b, th)] and "mallocbench" in b:
                    tc = thr[(b, th)]["tcmalloc"]
                    mi = thr[(b, th)].get("mimalloc")
                    mm, tm = Stat(mote["mops"]).med, Stat(tc["mops"]).med
                    ok = mm >= tm
                    txt = "mote %.1f Mops/s vs tcmalloc %.1f" % (mm, tm)
                    if mi and mote["peak"] and mi["peak"]:
                        mp, ip = Stat(mote["peak"]).med, Stat(mi["peak"]).med
                        ok = ok and mp <= ip
                        txt += "; peak %s vs mimalloc %s" % (fmt_bytes(mp), fmt_bytes(ip))
                    self.add_summary("allocator (#4)", "%s, %d thread(s): ≥ tcmalloc's Mops/s, peak RSS ≤ mimalloc's" % (b, th), txt, ok)
            md.append("")
            if len(ths) > 1:
                series = [{"name": a, "points": [(th, Stat(thr[(b, th)][a]["mops"]).med) for th in ths if a in thr[(b, th)]],
                           "color": ALLOC_COLORS.get(a)} for a in allocs]
                fname = "malloc_%s_threads.svg" % re.sub(r"[^A-Za-z0-9_-]", "_", b)
                line_chart(os.path.join(self.out, fname), "%s: Mops/s against threads" % b, "threads", "Mops/s",
                           series, xfmt=lambda v: "%g" % v, yfmt=lambda v: "%g" % v)
                self.charts.append(fname)
                md.append("![%s](%s)\n" % (b, fname))
        if idle:
            md.append("**Free-then-idle (seed 003)**: RSS after everything was freed, with no further call "
                      "from the program (first repetition; table: median over repetitions).\n")
            md.append("| scenario | allocator | RSS with all allocated | right after the free | 1 s after | last sample |")
            md.append("|---|---|---|---|---|---|")
            series = []
            scen = {"free-idle": "C: 4 threads, mixed sizes, freed (bench/malloc/freeidle.c)",
                    "go-mixed": "Go: 4 goroutines, mixed sizes, dropped + 1 GC",
                    "go-big": "Go: seed 003's big arrays, dropped + 1 GC"}
            for (b, a), reps in sorted(idle.items(), key=lambda kv: (kv[0][1] == "go", kv[0][1] != "mote",
                                                                     ALLOC_ORDER.index(kv[0][1]) if kv[0][1] in ALLOC_ORDER else 9, kv[0])):
                def at(pts, t):
                    c = [p for p in pts if p[0] <= t + 0.05]
                    return c[-1][1] if c else None
                pts_all = [sorted(p) for p in reps.values()]
                pk = idle_peak.get((b, a), {"peak": [], "before": []})
                md.append("| %s | %s | %s | %s | %s | %s |" % (
                    scen.get(b, b), a, fmt_stat(Stat(pk["peak"]), fmt_bytes), fmt_stat(Stat(pk["before"]), fmt_bytes),
                    fmt_stat(Stat([at(p, 1.0) for p in pts_all]), fmt_bytes),
                    fmt_stat(Stat([p[-1][1] for p in pts_all]), fmt_bytes)))
                series.append({"name": a if a != "go" else ("Go, seed 003 arrays" if b.endswith("big") else "Go, mixed sizes"),
                               "points": pts_all[0],
                               "color": ALLOC_COLORS.get(a),
                               "dash": a == "go" and b.endswith("big")})
                if a == "mote":
                    r1 = Stat([at(p, 1.0) for p in pts_all])
                    if r1:
                        self.add_summary("allocator (#4)", "free-then-idle (%s): RSS ≤ 32 MiB within 1 s, no call" % b,
                                         "mote %s at 1 s" % fmt_bytes(r1.med), r1.med <= 32 * MiB)
            at1 = {}
            for (b, a), reps in idle.items():
                v = Stat([next((y for t, y in reversed(sorted(p)) if t <= 1.05), None) for p in reps.values()])
                if v:
                    at1[a] = min(at1.get(a, v.med), v.med)
            if "mote" in at1:
                others = {a: v for a, v in at1.items() if a != "mote"}
                if others:
                    best = min(others, key=others.get)
                    self.compare("RSS 1 s after a big free", at1["mote"], others[best], words=("less", "more"),
                                 peer_name=best)
            md.append("")
            line_chart(os.path.join(self.out, "free_idle_rss.svg"), "RSS against time after a big free (log y)",
                       "seconds after the free", "MiB", series, logy=True, xfmt=lambda v: "%g" % v,
                       yunit=MiB, hline=(32 * MiB, "32 MiB target"))
            self.charts.append("free_idle_rss.svg")
            md.append("![free then idle](free_idle_rss.svg)\n")

    # ---------------------------------------------------------- allocators, round two
    def malloc2_rows(self, bench):
        """alloc -> list of dicts for one bench of bench/malloc/run.sh."""
        res = {}
        for d in self.malloc:
            if self.bench_name(d) == bench and self.alloc_name(d):
                res.setdefault(self.alloc_name(d), []).append(d)
        return res

    @staticmethod
    def alloc_sorted(allocs):
        return sorted(allocs, key=lambda a: (ALLOC_ORDER.index(a) if a in ALLOC_ORDER else 9, a))

    def best_peer(self, per, f, lower=True):
        """(name, median) of the best peer by f(list of dicts) -> Stat."""
        pv = {a: f(v).med for a, v in per.items() if a != "mote" and f(v)}
        if not pv:
            return None, None
        b = (min if lower else max)(pv, key=pv.get)
        return b, pv[b]

    def churn_table(self, bench, title, what, key, labelf, timef, timefmt, area_note, target=True):
        """Time and peak RSS beside every peer; summary: peak <= 1.1x the
        leanest peer, time <= 1.1x the fastest peer (the noise band).
        target=False: a workload with no target of its own (the table and
        the wins/losses lists only)."""
        md = self.md
        rows = {}
        for a, L in self.malloc2_rows(bench).items():
            for d in L:
                rows.setdefault(labelf(d), {}).setdefault(a, []).append(d)
        if not rows:
            return
        md.append("**%s** — %s\n" % (title, what))
        allocs = self.alloc_sorted({a for r in rows.values() for a in r})
        md.append("| case | " + " | ".join(allocs) + " | mote: time vs fastest peer | mote: peak RSS vs leanest peer |")
        md.append("|---|" + "---|" * (len(allocs) + 2))
        tf = lambda L: Stat([timef(d) for d in L])
        pf = lambda L: Stat([num(d, "peak_rss") for d in L])
        for label in sorted(rows, key=lambda x: (len(x), x)):
            per = rows[label]
            cells = []
            for a in allocs:
                if a not in per:
                    cells.append("—")
                    continue
                cells.append("%s, %s" % (fmt_stat(tf(per[a]), timefmt), fmt_bytes(pf(per[a]).med)))
            mt, mp = (tf(per["mote"]).med, pf(per["mote"]).med) if "mote" in per else (None, None)
            bt, btv = self.best_peer(per, tf)
            bp, bpv = self.best_peer(per, pf)
            rt = "%.2f× (%s)" % (mt / btv, bt) if mt and btv else "—"
            rp = "%.2f× (%s)" % (mp / bpv, bp) if mp and bpv else "—"
            md.append("| %s | %s | %s | %s |" % (label, " | ".join(cells), rt, rp))
            if mt and btv and mp and bpv:
                self.compare("%s %s, time" % (key, label), mt, btv, peer_name=bt)
                self.compare("%s %s, peak RSS" % (key, label), mp, bpv, words=("less memory", "more memory"),
                             peer_name=bp)
            if not target:
                continue
            ok = (mp <= 1.1 * bpv and mt <= 1.1 * btv) if (mt and btv and mp and bpv) else None
            self.add_summary("allocator round 2", "%s (%s): peak RSS ≤ 1.1× leanest peer, time ≤ 1.1× fastest peer%s"
                             % (key, label, area_note),
                             "peak %s = %s; time %s = %s" % (fmt_bytes(mp), rp, timefmt(mt) if mt else "—", rt), ok)
        md.append("")
        # Where the program reports its live set (prodcons: it moves with
        # the ring's occupancy, so with the threads' relative speed), peak
        # RSS over it tells an allocator's overhead from a fuller ring.
        over = {}
        for per in rows.values():
            for a, L in per.items():
                for d in L:
                    live = num(d, "live_peak")
                    if live:
                        over.setdefault(a, []).append(num(d, "peak_rss") / live)
        if over:
            md.append("Peak RSS ÷ the program's own live peak (median <sub>(min–max)</sub> over repetitions): "
                      + "; ".join("%s %s" % (a, fmt_stat(Stat(over[a]), lambda v: "%.2f" % v))
                                  for a in self.alloc_sorted(over)) + ".\n")

    def malloc2_size_table(self, bench, intro, timef, cellf, compare_label):
        """A round-two table with a row per block size: each allocator's cell
        (cellf of its runs) and mote's timef against the fastest peer's.
        Returns {size: (runs per allocator, mote's median, best peer, its median)}."""
        per_size = self.malloc2_by_size(bench)
        if not per_size:
            return {}
        md = self.md
        allocs = self.alloc_sorted({a for r in per_size.values() for a in r})
        md.append(intro)
        md.append("| block | " + " | ".join(allocs) + " | mote vs fastest peer |")
        md.append("|---|" + "---|" * (len(allocs) + 1))
        rows = {}
        for size in sorted(per_size):
            per = per_size[size]
            cells = [cellf(per[a]) if a in per else "—" for a in allocs]
            b, bv = self.best_peer(per, timef)
            mt = timef(per["mote"]).med if "mote" in per else None
            md.append("| %s | %s | %s |" % (fmt_bytes(size), " | ".join(cells),
                                            "%s (%s)" % (ratio_text(mt, bv), b) if mt and bv else "—"))
            if mt and bv:
                self.compare(compare_label % fmt_bytes(size), mt, bv, peer_name=b)
            rows[size] = (per, mt, b, bv)
        md.append("")
        return rows

    def malloc2_by_size(self, bench):
        """{block size: {alloc: [runs]}} of a round-two program with size=."""
        per_size = {}
        for a, L in self.malloc2_rows(bench).items():
            for d in L:
                per_size.setdefault(int(num(d, "size", default=0)), {}).setdefault(a, []).append(d)
        return per_size

    def section_malloc2(self):
        md = self.md
        if not any(self.bench_name(d) in ROUND2_BENCHES for d in self.malloc):
            return
        md.append("## 3b. Allocators, round two\n")
        md.append("Workloads mote was not tuned for (bench/malloc/{largeloop,survivors,larson,threadreq,replace,prodcons,churn,bigset,mixsizes,largerand,colour}.c, "
                  "xthread run five times in a row), every allocator through LD_PRELOAD in the same run. Cells: "
                  "median <sub>(min–max)</sub> over repetitions; ratios are mote ÷ the best peer for that column "
                  "(below 1 is better). Plan: docs/heap-round2-plan.md.\n")
        # large blocks
        tf = lambda L: Stat([num(d, "ns_per_op") for d in L])
        ff = lambda L: Stat([num(d, "faults_per_op") for d in L])
        rows = self.malloc2_size_table(
            "large", "**Large blocks in a loop** — malloc, write one byte per 4 KiB page, free, again "
            "(bench/malloc/largeloop.c). Time per op, page faults per op after the first pass.\n", tf,
            lambda L: "%s, %s flt" % (fmt_stat(tf(L), fmt_ns), fmt_num(ff(L).med, 1)), "large %s loop")
        if 4 * MiB in rows:
            per, mt, b, bv = rows[4 * MiB]
            mf = ff(per["mote"]).med if "mote" in per else None
            ok = (mt <= 1.1 * bv and mf is not None and mf < 0.5) if (mt and bv) else None
            self.add_summary("allocator round 2", "alloc/free 4 MiB in a loop: ≤ 1.1× best peer's time, "
                             "no page faults after the first pass",
                             "mote %s/op, %s faults/op; best peer %s %s: %.3g×" % (
                                 fmt_ns(mt), fmt_num(mf, 1), b, fmt_ns(bv), mt / bv) if mt and bv else "—", ok)
        # survivors
        sv = self.malloc2_rows("survivors")
        if sv:
            md.append("**Heap with survivors** — 2 threads allocate 1 GiB in mixed sizes (70% 16 B–1 KiB, 25% 1–64 KiB, "
                      "5% 64 KiB–1 MiB, every byte written), free 63 of every 64 blocks and stay idle; RSS sampled "
                      "every 100 ms with no allocator call (bench/malloc/survivors.c).\n")
            md.append("| allocator | RSS all allocated | right after the frees | 0.5 s | 1 s | 2 s | live bytes |")
            md.append("|---|---|---|---|---|---|---|")
            series = []
            at1 = {}
            for a in self.alloc_sorted(sv):
                L = sv[a]
                summ = [d for d in L if "rss_1s" in d]
                reps = {}
                for d in L:
                    if "t_ms" in d:
                        reps.setdefault(d.get("rep", "0"), []).append((num(d, "t_ms") / 1000, num(d, "rss")))
                def at(pts, t):
                    c = [p for p in sorted(pts) if p[0] <= t + 0.05]
                    return c[-1][1] if c else None
                pts = [sorted(p) for p in reps.values()]
                s1 = Stat([num(d, "rss_1s") for d in summ])
                at1[a] = s1.med
                md.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                    a, fmt_stat(Stat([num(d, "peak") for d in summ]), fmt_bytes),
                    fmt_stat(Stat([num(d, "rss_before") for d in summ]), fmt_bytes),
                    fmt_stat(Stat([at(p, 0.5) for p in pts]), fmt_bytes), fmt_stat(s1, fmt_bytes),
                    fmt_stat(Stat([at(p, 2.0) for p in pts]), fmt_bytes),
                    fmt_bytes(Stat([num(d, "live") for d in summ]).med)))
                if pts:
                    series.append({"name": a, "points": pts[0], "color": ALLOC_COLORS.get(a)})
            md.append("")
            peers1 = {a: v for a, v in at1.items() if a != "mote" and v}
            if at1.get("mote"):
                b = min(peers1, key=peers1.get) if peers1 else None
                if b:
                    self.compare("survivors: RSS 1 s after freeing 63/64", at1["mote"], peers1[b],
                                 words=("less memory", "more memory"), peer_name=b)
                self.add_summary("allocator round 2", "survivors (2 threads, 1 GiB, 63/64 freed): RSS ≤ 40 MiB at 1 s, "
                                 "no call", "mote %s%s" % (fmt_bytes(at1["mote"]), "; best peer %s %s" % (
                                     b, fmt_bytes(peers1[b])) if b else ""), at1["mote"] <= 40 * MiB)
            if series:
                line_chart(os.path.join(self.out, "survivors_rss.svg"),
                           "RSS after freeing 63 of 64 blocks of 1 GiB (log y)", "seconds after the frees", "MiB",
                           series, logy=True, xfmt=lambda v: "%g" % v, yunit=MiB, hline=(40 * MiB, "40 MiB target"))
                self.charts.append("survivors_rss.svg")
                md.append("![survivors](survivors_rss.svg)\n")
        secs = lambda d: num(d, "secs")
        self.churn_table("larson", "Server churn (larson-like)", "threads swap blocks into each other's slots while "
                         "allocating (1 in 8 foreign), exit after a round and hand their blocks to a successor; "
                         "10 generations (bench/malloc/larson.c); two runs per repetition (the 8-thread churn "
                         "too), as a fraction of a second is short for this machine's phases. Cells: seconds, "
                         "peak RSS.", "larson",
                         lambda d: "%s threads" % d.get("threads", "?"), secs, lambda v: "%.3f s" % v, "")
        self.churn_table("threadreq", "Thread per request", "each request is a new thread that allocates 200 "
                         "blocks of 16 B–2 KiB, frees all but one 64 B object kept in a global list, and exits; 2 at "
                         "a time (bench/malloc/threadreq.c). Cells: µs per request, peak RSS.", "thread per request",
                         lambda d: "%s at a time" % d.get("threads", "?"), lambda d: num(d, "us_per_req"),
                         lambda v: "%.0f µs" % v, "")
        self.churn_table("replace", "Workers replaced while their work goes on", "each worker keeps 4096 "
                         "blocks of 16 B–8 KiB (most small) and replaces a random one at each step, handing 1 in 5 "
                         "of the freed blocks to the next worker to free; after 200,000 steps a worker's thread "
                         "starts its successor, which inherits its blocks, and ends, after rpmalloc's rptest "
                         "(bench/malloc/replace.c). Cells: seconds, peak RSS.", "workers replaced",
                         lambda d: "%s workers" % d.get("threads", "?"), secs, lambda v: "%.2f s" % v, "")
        self.churn_table("prodcons", "Long producer/consumer churn", "2 pairs; the size range shifts every 250k "
                         "messages; each consumer keeps its last 2000 messages and frees the oldest "
                         "(bench/malloc/prodcons.c). Cells: seconds, peak RSS.", "producer/consumer",
                         lambda d: "%s threads" % d.get("threads", "?"), secs, lambda v: "%.2f s" % v, "")
        self.churn_table("prodcons-fill", "The same, every message written whole", "prodcons with FILL=1: the "
                         "program writes each block it sends, so no allocator is spared the pages of a big block's "
                         "middle, which the run above writes only where an earlier block did. Information only: the "
                         "target is the row above. Cells: seconds, peak RSS.", "producer/consumer, written whole",
                         lambda d: "%s threads" % d.get("threads", "?"), secs, lambda v: "%.2f s" % v, "",
                         target=False)
        self.churn_table("churn", "Short-lived threads churning mixed and big blocks", "rounds of new threads "
                         "allocate 8 B–2 KiB objects, 1 in 100 up to 200 KiB, 1 in 1000 up to 2 MiB (with 32 threads "
                         "1 in 10,000 up to 20 MiB), free most at random and swap some through a shared array for "
                         "other threads and later rounds to free, after mimalloc-bench's mstress "
                         "(bench/malloc/churn.c). Cells: seconds, peak RSS.", "churn",
                         lambda d: "%s threads" % d.get("threads", "?"), secs, lambda v: "%.2f s" % v, "")
        self.churn_table("bigset", "Random replacement in a big live set", "each thread fills 100,000 slots with "
                         "blocks of 16 B–1 KiB, then frees the block of a random slot (reading its first byte) and "
                         "puts a new one there; the live set (~50 MiB per thread) is bigger than the CPU caches, so "
                         "every freed block is cold (bench/malloc/bigset.c). No target: it shows what a free of a "
                         "cold block costs. Cells: ns per free+malloc, peak RSS.", "bigset",
                         lambda d: "%s threads" % d.get("threads", "?"), lambda d: num(d, "ns_per_op"),
                         lambda v: "%.0f ns" % v, "", target=False)
        self.churn_table("mixsizes", "Blocks of every size replaced at random", "each thread keeps 1024 slots "
                         "and replaces the block of a random one with a new block of a log-uniform size, writing "
                         "its ends, after glibc's benchtests/bench-malloc-thread: the whole 8 B–64 KiB mix, and "
                         "8–32 KiB and 32–64 KiB alone; and 32–64 KiB with a byte written in every 4 KiB page, "
                         "a buffer used in part, as rpmalloc's rptest stamps its blocks "
                         "(bench/malloc/mixsizes.c). No target. Cells: ns per free+malloc, peak RSS.", "mixsizes",
                         lambda d: "%s threads, %s B%s" % (d.get("threads", "?"), d.get("sizes", "?"),
                                                           ", every page" if d.get("pages") == "1" else ""),
                         lambda d: num(d, "ns_per_op"), lambda v: "%.0f ns" % v, "", target=False)
        self.churn_table("largerand", "Big blocks of random sizes replaced at random", "20 slots hold blocks of "
                         "5–25 MiB; each step frees a random slot's block and puts a new one of a random size there, "
                         "zero-filled as C++'s `new char[n]()` does, after mimalloc-bench's malloc-large "
                         "(bench/malloc/largerand.c). No target: it shows how big blocks of changing sizes reuse "
                         "pages. Cells: ms per step, peak RSS.", "largerand",
                         lambda d: "%s slots" % d.get("slots", "?"), lambda d: num(d, "ms_per_step"),
                         lambda v: "%.1f ms" % v, "", target=False)
        # cache colour of big blocks
        rf = lambda L: Stat([num(d, "ns_per_read") for d in L])
        lf = lambda L: Stat([num(d, "lines") for d in L])
        self.malloc2_size_table(
            "colour", "**The first bytes of many big blocks** — 64 blocks of one size, then 8-byte reads of "
            "each block's first line in turn (bench/malloc/colour.c). Where every block starts on a "
            "page or a 64 KiB boundary, those lines share one L1 set and most reads miss. No target. "
            "Cells: ns per read, and on how many of a page's 64 lines the blocks start.\n", rf,
            lambda L: "%s, %s of 64 lines" % (fmt_stat(rf(L), lambda v: "%.2f ns" % v), fmt_num(lf(L).med, 0)),
            "first line of 64 %s blocks")
        # xthread stability
        xs = self.malloc2_rows("xtstab")
        if xs:
            pinned = all(d.get("pinned") == "1" for v in xs.values() for d in v)
            md.append("**xthread stability** — `xthread 1` (one producer/consumer pair) run 5 times in a row as fresh "
                      "processes, per repetition; slowest ÷ fastest of the 5 (target for mote ≤ 1.3). %s\n" % (
                          "Its two threads are pinned to two CPUs (`XT_PIN=1`): unpinned, the run time depended on "
                          "whether the scheduler put the pair on one CPU for part of a run (bench/malloc/xthread.c "
                          "has the figures)." if pinned else
                          "Its threads are not pinned."))
            md.append("| allocator | slowest/fastest (median over repetitions) | worst repetition | run time, all runs |")
            md.append("|---|---|---|---|")

            def spread(rows):
                per = {}
                for d in rows:
                    per.setdefault(d.get("rep", "0"), []).append(num(d, "secs"))
                return Stat([max(v) / min(v) for v in per.values() if v and min(v) > 0])

            def row(name, rows, r):
                md.append("| %s | %s | %s | %s |" % (name, fmt_stat(r, lambda v: "%.2f" % v), fmt_num(r.hi, 2),
                                                     fmt_stat(Stat([num(d, "secs") for d in rows]),
                                                              lambda v: "%.3f s" % v)))
            # the same program with no allocator in its loop (xthread.c,
            # XT_POOL): the spread this machine gives by itself
            pool = [d for v in self.malloc2_rows("xtstab-pool").values() for d in v]
            rp = spread(pool) if pool else None
            for a in self.alloc_sorted(xs):
                r = spread(xs[a])
                row(a, xs[a], r)
                if a == "mote" and r:
                    self.add_summary("allocator round 2", "xthread: slowest of 5 runs ≤ 1.3× the fastest (every repetition)",
                                     "mote %.2f (median), %.2f (worst repetition)%s" % (
                                         r.med, r.hi, "; no allocator in the loop: %.2f, %.2f" % (rp.med, rp.hi)
                                         if rp else ""), r.hi <= 1.3)
            if rp:
                row("no allocator in the loop (`XT_POOL=1`)", pool, rp)
            md.append("")
        # profiler: pairs run back to back (run.sh); the verdict is the
        # median of their ratios
        on, off = self.malloc2_rows("profile-on").get("mote"), self.malloc2_rows("profile-off").get("mote")
        if on and off:
            written = [d.get("written") for d in self.malloc2_rows("profile-file").get("mote", [])]
            son = Stat([num(d, "mops") for d in on])
            soff = Stat([num(d, "mops") for d in off])
            offs = {(d.get("rep"), d.get("pair")): num(d, "mops") for d in off}
            ratios = [num(d, "mops") / offs[(d.get("rep"), d.get("pair"))] for d in on
                      if num(d, "mops") and offs.get((d.get("rep"), d.get("pair")))]
            ratio = Stat(ratios) if ratios else None
            r = ratio.med if ratio else son.med / soff.med
            active = bool(written) and all(w == "1" for w in written)
            spread = " (pairs %.3f-%.3f)" % (min(ratios), max(ratios)) if ratios else ""
            md.append("**Heap profiler cost** — mallocbench, 2 threads, mote with `MOTE_HEAPPROFILE` set and not, "
                      "in pairs run back to back (runs of %.2f s): %s vs %s Mops/s; median of %d pairs' "
                      "ratios %.3f×%s; profile written: %s.\n" % (
                          Stat([num(d, "secs") for d in off]).med or 0.0,
                          fmt_stat(son, lambda v: "%.1f" % v), fmt_stat(soff, lambda v: "%.1f" % v),
                          len(ratios), r, spread, "yes" if active else "no (no profiler yet: the ratio is noise)"))
            self.add_summary("allocator round 2", "mallocbench with the sampling heap profiler on ≥ 0.95× off",
                             "%.3f× (%s)" % (r, "median of %d pairs" % len(ratios) if active else "profiler not built yet"),
                             (r >= 0.95) if active else None)

    # ---------------------------------------------------------- network
    NET_ROWS = [  # (name, conns, label, value key, unit)
        ("echo_pingpong", "1", "echo ping-pong 512 B, 1 connection", "rps", "round trips/s"),
        ("echo_pingpong", "50", "echo ping-pong 512 B, 50 connections", "rps", "round trips/s"),
        ("echo_pingpong", "1000", "echo ping-pong 512 B, 1000 connections", "rps", "round trips/s"),
        ("echo_stream", "4", "echo streaming 512 B, 4 connections", "msgs_per_s", "messages/s"),
        ("http", "50", "HTTP hello, wrk -t1 -c50", "rps", "requests/s"),
        ("http", "400", "HTTP hello, wrk -t1 -c400", "rps", "requests/s"),
    ]

    def net_stats(self):
        """{(name, conns, cpu, impl): {key: Stat}} over repetitions."""
        t = {}
        for d in self.net:
            if "name" not in d or "impl" not in d:
                continue
            key = (d["name"], d.get("conns", "?"), d.get("cpu", "?"), d["impl"])
            e = t.setdefault(key, {})
            for k in ("rps", "msgs_per_s", "p50_us", "p99_us", "bytes_per_conn", "bytes_per_conn_3s", "held",
                      "open_s"):
                v = num(d, k)
                if v is not None:
                    e.setdefault(k, []).append(v)
        return {k: {kk: Stat(v) for kk, v in e.items()} for k, e in t.items()}

    def section_net(self):
        md = self.md
        md.append("## 4. Network servers against Go\n")
        md.append("mote's example servers (`examples/echo_server.c`, `examples/http_hello.c`: one task per "
                  "connection on the netpoller) against Go 1.19's `net` and `net/http` (`bench/net/echo.go`, "
                  "`bench/net/http.go`: one goroutine per connection), each checked by `bench/net/smoke.py` before "
                  "it is measured. Echo load: `bench/net/loadgen` (epoll, one thread, connections opened before "
                  "timing, every echoed byte checked); HTTP load: `wrk -t1 --latency` with keep-alive. "
                  "*pinned*: server on CPU 0 with one worker (MOTE_WORKERS=1 / GOMAXPROCS=1), load generator on "
                  "CPU 1; *shared*: nothing pinned, two workers. Throughput is higher-is-better; latency is the "
                  "round trip (p50 / p99).\n")
        if not self.net:  # not part of this run (--only)
            md.append("_Not run._\n")
            return
        t = self.net_stats()
        if not t:
            md.append("_No data: the network section did not run (see Failures)._\n")
        else:
            md.append("| benchmark | CPUs | mote | Go | mote vs Go | mote p50 / p99 | Go p50 / p99 |")
            md.append("|---|---|---|---|---|---|---|")
            bars = []
            for cpu in ("pinned", "shared"):
                for name, conns, label, key, unit in self.NET_ROWS:
                    a = t.get((name, conns, cpu, "mote"), {})
                    g = t.get((name, conns, cpu, "go"), {})
                    if not a and not g:
                        continue
                    av, gv = a.get(key, Stat([])), g.get(key, Stat([]))

                    def lat(e):
                        if not e.get("p50_us") or not e.get("p99_us"):
                            return "—"
                        return "%s / %s" % (fmt_ns(e["p50_us"].med * 1e3), fmt_ns(e["p99_us"].med * 1e3))
                    md.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                        label + " (%s)" % unit, cpu, fmt_stat(av, lambda v: "%.0f" % v), fmt_stat(gv, lambda v: "%.0f" % v),
                        ratio_text(av.med, gv.med, lower_is_better=False), lat(a), lat(g)))
                    if av and gv:
                        self.compare("%s (%s)" % (label, cpu), av.med, gv.med, lower_is_better=False)
                        if cpu == "pinned":
                            bars.append((label.replace("512 B, ", "").replace(" connections", " conns"), av.med / gv.med))
            md.append("")
            if bars:
                bar_chart(os.path.join(self.out, "net_vs_go.svg"), "mote's throughput over Go's, pinned (>1: mote faster)",
                          bars, "mote / Go throughput (log scale)")
                self.charts.append("net_vs_go.svg")
                md.append("![network vs Go](net_vs_go.svg)\n")

            idle = sorted({int(k[1]) for k in t if k[0] == "echo_idle"})
            if idle:
                md.append("**Idle connections**: the echo server holding N connections that never send, "
                          "(VmRSS + VmPTE 1 s after the server accepted the last one − the same before the first) ÷ N, "
                          "read from `/proc/<pid>/status` by the load generator; *at 3 s*: the same 2 s later, once "
                          "mote's default freeze threshold (1 s) has passed for every connection.\n")
                md.append("| connections | mote per connection | Go per connection | mote vs Go | mote / Go at 3 s | held mote / Go | time to open mote / Go |")
                md.append("|---|---|---|---|---|---|---|")
                for n in idle:
                    a = t.get(("echo_idle", str(n), "pinned", "mote"), {})
                    g = t.get(("echo_idle", str(n), "pinned", "go"), {})
                    ab, gb = a.get("bytes_per_conn", Stat([])), g.get("bytes_per_conn", Stat([]))
                    self.compare("idle connection, %s held" % count_fmt(n), ab.med, gb.med, words=("less", "more"))

                    def held(e):
                        return "%.0f" % e["held"].med if e.get("held") else "—"

                    def opened(e):
                        return "%.2f s" % e["open_s"].med if e.get("open_s") else "—"
                    a3, g3 = a.get("bytes_per_conn_3s", Stat([])), g.get("bytes_per_conn_3s", Stat([]))
                    if a3.med is not None:
                        self.compare("idle connection at 3 s, %s held" % count_fmt(n), a3.med, g3.med,
                                     words=("less", "more"))
                    md.append("| %s | %s | %s | %s | %s / %s | %s / %s | %s / %s |" % (
                        count_fmt(n), fmt_stat(ab, fmt_bytes), fmt_stat(gb, fmt_bytes),
                        ratio_text(ab.med, gb.med, what=("less memory", "more memory")),
                        fmt_stat(a3, fmt_bytes), fmt_stat(g3, fmt_bytes),
                        held(a), held(g), opened(a), opened(g)))
                md.append("")
        lim = next((d for d in self.net if d.get("kind") == "limits"), None)
        if lim:
            md.append("Limits in force: RLIMIT_NOFILE %s (hard %s; run.sh raises both for the idle case when it "
                      "may), fs.nr_open %s, ephemeral ports %s (the load generator spreads the idle case over "
                      "source addresses 127.0.0.2… to have enough), net.core.somaxconn %s, tcp_tw_reuse %s. "
                      "No sysctl is changed.\n" % (
                          lim.get("nofile", "?"), lim.get("nofile_hard", "?"), lim.get("nr_open", "?"),
                          lim.get("port_range", "?"), lim.get("somaxconn", "?"), lim.get("tw_reuse", "?")))

        # Summary rows: the targets of the netpoller issue, on the pinned layout.
        area = "network (netpoller)"

        def thr_row(name, conns, target, factor, with_p99=False):
            a = t.get((name, conns, "pinned", "mote"), {})
            g = t.get((name, conns, "pinned", "go"), {})
            key = "msgs_per_s" if name == "echo_stream" else "rps"
            av, gv = a.get(key), g.get(key)
            if not av or not gv:
                self.add_summary(area, target, ("Go %.0f/s; no mote data" % gv.med) if gv else "no data", None)
                return
            ok = av.med >= factor * gv.med
            txt = "mote %.0f/s, Go %.0f/s: %.2f×" % (av.med, gv.med, av.med / gv.med)
            if with_p99:
                ap, gp = a.get("p99_us"), g.get("p99_us")
                if ap and gp:
                    ok = ok and ap.med <= gp.med
                    txt += "; p99 %s vs %s" % (fmt_ns(ap.med * 1e3), fmt_ns(gp.med * 1e3))
            self.add_summary(area, target, txt, ok)
        thr_row("echo_pingpong", "50", "echo ping-pong 512 B, 50 connections: ≥ 1.3× Go's round trips/s", 1.3)
        thr_row("echo_pingpong", "1000", "echo ping-pong 512 B, 1000 connections: ≥ 1.3× Go's round trips/s", 1.3)
        thr_row("echo_stream", "4", "echo streaming 512 B, 4 connections: ≥ 1.5× Go's messages/s", 1.5)
        thr_row("http", "50", "HTTP hello, wrk -c50: ≥ 1.5× Go's requests/s, p99 no worse", 1.5, True)
        thr_row("http", "400", "HTTP hello, wrk -c400: ≥ 1.5× Go's requests/s, p99 no worse", 1.5, True)
        idle = {int(k[1]) for k in t if k[0] == "echo_idle"}
        for d in self.failures:  # sizes that could not run still get a row
            m = re.match(r"idle-(\d+)$", d.get("what", ""))
            if d.get("section") == "net" and m:
                idle.add(int(m.group(1)))
        for n in sorted(idle or {10000}):
            a = t.get(("echo_idle", str(n), "pinned", "mote"), {}).get("bytes_per_conn")
            g = t.get(("echo_idle", str(n), "pinned", "go"), {}).get("bytes_per_conn")
            target = "%s idle connections: server RSS+page tables per connection ≤ Go's" % count_fmt(n)
            if not a or not g:
                self.add_summary(area, target, ("Go %s; no mote data" % fmt_bytes(g.med)) if g else
                                 "not run (see Failures)", None)
                continue
            self.add_summary(area, target, "mote %s, Go %s" % (fmt_bytes(a.med), fmt_bytes(g.med)), a.med <= g.med)

    # ---------------------------------------------------------- frozen stacks
    FZ_ORDER = ["off", "4s", "1s", "250ms", "default", "go"]
    FZ_OFF_REASON = {"1": "not asked", "2": "userfaultfd denied", "3": "the kernel lacks it",
                     "4": "mprotect guards", "5": "under valgrind"}

    def fz_key(self, fz):
        return (self.FZ_ORDER.index(fz) if fz in self.FZ_ORDER else 50, fz)

    def section_freeze(self):
        md = self.md
        late_fmt = lambda us: "%.0f µs" % us if us < 1000 else "%.0f ms" % (us / 1000)
        rows = self.freeze
        if not rows:
            return
        md.append("## 5. Frozen stacks: the trade-off (issue 14)\n")
        md.append("A task parked longer than `MOTE_STACK_FREEZE` has its live stack bytes copied out and its pages "
                  "given back; it is thawed before it runs again. Shorter thresholds save memory sooner and cost "
                  "more thaws. Medians over the repetitions (min–max in small print); every variant runs in the "
                  "same invocation, the order rotating by repetition. See docs/bench.md.\n")
        modes = {d.get("freeze_mode") for d in rows if d.get("impl") == "mote" and d.get("freeze_mode")}
        if modes and modes <= {"0"}:
            why = {d.get("off_reason") for d in rows if d.get("off_reason")}
            md.append("**Freezing was off in this run** (`/stacks/freeze/off-reason:enum` = %s: %s): every "
                      "threshold below measures the same thing.\n" % (
                          ",".join(sorted(why)), ", ".join(self.FZ_OFF_REASON.get(w, "?") for w in sorted(why))))

        # (a) sleepers
        sl = [d for d in rows if d.get("kind") == "sleepers"]
        thaw_ok = None
        if sl:
            d0 = sl[0]
            md.append("### Idle-mostly server: `bench/tasks/sleepers` at several thresholds\n")
            md.append("%s tasks each sleep an exponentially distributed time (mean %s ms, capped at 8×), wake, touch "
                      "256 bytes of their state and sleep again, for the run's length; figures cover the window "
                      "after a warm-up of 2× the mean (span %s s). *RSS+PT/task* is the average of VmRSS + VmPTE "
                      "sampled every 100 ms, ÷ N; *vs Go* is the median over repetitions of mote ÷ Go in the "
                      "same repetition. *Late* is how long after its deadline a task ran (timer slack, plus its "
                      "thaw when frozen). *Thaw* is `/stacks/thaws/time:ns` ÷ thaws. *Freeze CPU* is "
                      "`/stacks/freeze/cpu:ns` per second of the window and per task frozen "
                      "(`/stacks/freeze/freezes:events`); *CPU* is the whole process's (getrusage), in cores. "
                      "Freeze CPU is the freezing worker's own CPU time; a thaw is timed with CLOCK_MONOTONIC "
                      "(its latency is on a wake-up's path), so on a loaded machine it includes preemption.\n" % (
                          count_fmt(num(d0, "n", default=0)), d0.get("mean_ms", "?"), d0.get("span_s", "?")))
            by = {}
            go_by_rep = {}
            for d in sl:
                fz = "go" if d.get("impl") == "go" else d.get("fz", d.get("freeze", "?"))
                by.setdefault(fz, []).append(d)
                if fz == "go":
                    go_by_rep[d.get("rep")] = num(d, "per_task")
            md.append("| threshold | RSS+PT/task | vs Go | late p50 / p99 | wakes/s | thaws/s | thaw (mean) | "
                      "freeze CPU /s | freeze CPU /task | CPU (cores) | frozen at end |")
            md.append("|---|---|---|---|---|---|---|---|---|---|---|")
            for fz in sorted(by, key=self.fz_key):
                ds = by[fz]
                st = lambda f: Stat([f(d) for d in ds])
                per = st(lambda d: num(d, "per_task"))
                ratios = Stat([num(d, "per_task") / go_by_rep[d.get("rep")] for d in ds
                               if fz != "go" and go_by_rep.get(d.get("rep")) and num(d, "per_task")])
                thps = st(lambda d: num(d, "thaws_per_s", default=(num(d, "thaws", default=0) /
                                                                    num(d, "span_s", default=1))))
                thaw = Stat([num(d, "thaw_us") for d in ds if num(d, "thaws", default=0) > 0])
                fzs = Stat([num(d, "freeze_cpu_ms") / num(d, "span_s") for d in ds
                            if num(d, "span_s") and num(d, "freeze_cpu_ms") is not None])
                fzt = Stat([num(d, "freeze_cpu_ms") * 1e6 / num(d, "freezes") for d in ds
                            if num(d, "freezes", default=0) > 0])
                isgo = fz == "go"
                md.append("| %s | %s | %s | %s / %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    "**Go**" if isgo else "`%s`" % fz,
                    fmt_stat(per, fmt_bytes), "1" if isgo else (("%.2f×" % ratios.med) if ratios else "—"),
                    fmt_stat(st(lambda d: num(d, "late_p50_us")), late_fmt),
                    fmt_stat(st(lambda d: num(d, "late_p99_us")), late_fmt),
                    fmt_num(st(lambda d: num(d, "wakes_per_s")).med, 0),
                    "—" if isgo else fmt_num(thps.med, 0),
                    "—" if isgo else fmt_stat(thaw, lambda v: "%.2f µs" % v),
                    "—" if isgo else fmt_stat(fzs, lambda v: "%.2f ms" % v),
                    "—" if isgo else fmt_stat(fzt, fmt_ns),
                    fmt_stat(st(lambda d: num(d, "cpu_s_per_s")), lambda v: "%.3f" % v),
                    "—" if isgo else fmt_num(st(lambda d: num(d, "frozen_end")).med, 0)))
                if fz == "1s" and thaw:
                    thaw_ok = thaw.med
            md.append("")
            for fz in ("1s", "250ms"):
                a = Stat([num(d, "per_task") for d in by.get(fz, [])])
                g = Stat([num(d, "per_task") for d in by.get("go", [])])
                if a and g:
                    self.compare("sleepers at MOTE_STACK_FREEZE=%s, RSS+PT per task" % fz, a.med, g.med,
                                 words=("less memory", "more memory"))

        # (b) ping-pong
        pp = [d for d in rows if d.get("name") == "chan_pingpong"]
        if pp:
            md.append("### Channel ping-pong, freezing off against the default\n")
            md.append("Two tasks bounce an int over unbuffered channels (`bench/tasks/chan_pingpong`); they never "
                      "park past the threshold, so this is the cost of the freezing machinery on the hot path. "
                      "*ratio* is default ÷ off (1.00 = unchanged).\n")
            md.append("| workers | freeze off | default | ratio |")
            md.append("|---|---|---|---|")
            ws = sorted({d.get("workers") for d in pp})
            worst = None
            for w in ws:
                off = Stat([num(d, "ns_per_op") for d in pp if d.get("workers") == w and d.get("fz") == "off"])
                on = Stat([num(d, "ns_per_op") for d in pp if d.get("workers") == w and d.get("fz") == "default"])
                r = on.med / off.med if on and off else None
                if r is not None:
                    worst = r if worst is None else max(worst, r)
                md.append("| %s | %s | %s | %s |" % (w, fmt_stat(off, fmt_ns), fmt_stat(on, fmt_ns),
                                                    "%.2f" % r if r else "—"))
            md.append("")
            self.add_summary("frozen stacks (#14)", "channel ping-pong with freezing on (default) unchanged against off (±10 %)",
                             "worst ratio on/off %s" % ("%.2f" % worst if worst else "—"),
                             None if worst is None else worst <= 1.10)

        # (c) seed
        sd = [d for d in rows if d.get("kind") in ("seed", "seedt")]
        release_thaw = None
        if sd:
            runs = {}
            for d in sd:
                key = (int(d.get("n", 0)), d.get("mode"), d.get("fz", d.get("freeze", "?")))
                r = runs.setdefault(key, {}).setdefault(d.get("rep", "0"), {"samples": []})
                if d["kind"] == "seed":
                    r[d.get("phase", "?")] = d
                else:
                    r["samples"].append(d)
            md.append("### Seed experiment: parked tasks, freezing off against the default\n")
            md.append("`bench/seed/seed` N tasks (idle, or 8 KiB of stack used once), parked on a channel. "
                      "*Parked*: RSS + page tables once all have parked; *at 2 s*: 2 s after the last park "
                      "(the issue's measure); *settled*: once the frozen count is stable (every task frozen, or "
                      "unchanged for 0.5 s; the wait is bounded), at *t* after the last park, with *last change* "
                      "when the count stopped moving. *Freeze CPU* is `/stacks/freeze/cpu:ns` in total and per "
                      "task frozen. *Release* closes the channel: every task wakes (and is thawed) and exits.\n")
            md.append("| case | freeze | parked | at 2 s | settled (t; last change) | per task settled | on ÷ off (2 s; settled) | "
                      "frozen | freeze CPU (total; per task) | release | thaw (mean) |")
            md.append("|---|---|---|---|---|---|---|---|---|---|---|")
            off_at = {}
            for key in sorted(runs, key=lambda k: (k[0], ["idle", "8k", "64k"].index(k[1]) if k[1] in ("idle", "8k", "64k") else 9, self.fz_key(k[2]))):
                n, mode, fz = key
                rs = list(runs[key].values())

                def col(f):
                    vals = []
                    for r in rs:
                        try:
                            vals.append(f(r))
                        except (KeyError, TypeError, ZeroDivisionError):
                            pass
                    return Stat(vals)
                tot = lambda d: num(d, "rss") + num(d, "pte")
                parked = col(lambda r: tot(r["parked"]))
                at2 = col(lambda r: tot(self.sample_at(r, 2000)))
                fin = lambda r: r.get("frozen") or r["settled"]
                settled = col(lambda r: tot(fin(r)))
                t_set = col(lambda r: num(r["frozen"], "t_ms"))
                t_chg = col(lambda r: num(r["frozen"], "t_settle_ms"))
                per = col(lambda r: tot(fin(r)) / num(r["parked"], "spawned"))
                frozen = col(lambda r: num(fin(r), "frozen"))
                fzc = col(lambda r: num(r["frozen"], "freeze_cpu_ms"))
                fzt = col(lambda r: num(r["frozen"], "freeze_ns_per_task"))
                rel = col(lambda r: num(r["released"], "release_ms"))
                thaw = col(lambda r: num(r["released"], "thaw_us") if num(r["released"], "thaws", default=0) > 0 else None)
                stable = all(r.get("frozen", {}).get("stable", "1") == "1" for r in rs)
                if fz == "off":
                    off_at[(n, mode)] = (at2.med, settled.med)
                o2, os_ = off_at.get((n, mode), (None, None))
                vs_off = "—" if fz == "off" or not o2 or not at2 or not settled else "%.2f; %.2f" % (at2.med / o2, settled.med / os_)
                md.append("| %s | `%s` | %s | %s | %s%s | %s | %s | %s | %s | %s | %s |" % (
                    case_label(n, mode), fz, fmt_stat(parked, fmt_bytes), fmt_stat(at2, fmt_bytes),
                    fmt_stat(settled, fmt_bytes),
                    " (%s; %s)%s" % (fmt_ms(t_set.med), fmt_ms(t_chg.med), "" if stable else " not stable") if t_set else "",
                    fmt_stat(per, fmt_bytes), vs_off, fmt_num(frozen.med, 0) if frozen else "—",
                    "%s; %s" % (fmt_ms(fzc.med), fmt_ns(fzt.med)) if fzc else "—",
                    fmt_stat(rel, fmt_ms), fmt_stat(thaw, lambda v: "%.2f µs" % v)))
                if fz == "default" and mode == "idle" and thaw:
                    release_thaw = thaw.med
                if fz == "default" and mode in ("idle", "8k"):
                    tgt = 1.2 * GiB * n / 1e6
                    scaled = "" if n == 1000000 else " (scaled to %s tasks: %s)" % (count_fmt(n), fmt_bytes(tgt))
                    self.add_summary("frozen stacks (#14)", "1M × %s parked: RSS+PT 2 s after the last park ≤ 1.2 GiB%s" % (
                        "idle" if mode == "idle" else "8 KiB once", scaled),
                        "%s at 2 s; %s settled at %s" % (fmt_bytes(at2.med), fmt_bytes(settled.med), fmt_ms(t_set.med))
                        if at2 else "no data", (at2.med <= tgt) if at2 else None)
                    if mode == "idle" and fzt:
                        self.add_summary("frozen stacks (#14)", "CPU to freeze 1M tasks: measured",
                                         "%s per task (the worker's CPU time): %s per 1M (measured on %s)" % (
                                             fmt_ns(fzt.med), fmt_ms(fzt.med), count_fmt(n)), True)
            md.append("")
        if thaw_ok is not None or release_thaw is not None:
            parts = []
            if thaw_ok is not None:
                parts.append("sleepers at 1s: %.2f µs mean" % thaw_ok)
            if release_thaw is not None:
                parts.append("seed release (every task at once): %.2f µs mean" % release_thaw)
            self.add_summary("frozen stacks (#14)", "thaw on resume ≤ 10 µs", "; ".join(parts),
                             (thaw_ok if thaw_ok is not None else release_thaw) <= 10)

    # ---------------------------------------------------------- machine
    def section_machine(self):
        m = self.machine
        md = self.md
        md.append("## 6. The machine\n")
        rows = [("CPU", "%s, %s CPUs" % (m.get("cpu", "?"), m.get("cpus", "?"))), ("memory", m.get("mem")),
                ("OS / kernel", "%s / %s" % (m.get("os", "?"), m.get("kernel", "?"))),
                ("gcc", m.get("gcc")), ("clang", m.get("clang")), ("go", m.get("go")), ("cmake", m.get("cmake")),
                ("python", m.get("python")),
                ("glibc (libc6)", m.get("pkg_libc6")), ("tcmalloc (libtcmalloc-minimal4)", m.get("pkg_libtcmalloc-minimal4")),
                ("jemalloc (libjemalloc2)", m.get("pkg_libjemalloc2")), ("mimalloc (libmimalloc2.0)", m.get("pkg_libmimalloc2.0")),
                ("transparent huge pages", m.get("thp")), ("vm.max_map_count", m.get("max_map_count")),
                ("load average at start / end", "%s / %s" % (m.get("loadavg_start", "?"), m.get("loadavg_end", "?")))]
        md.append("| | |")
        md.append("|---|---|")
        for k, v in rows:
            md.append("| %s | %s |" % (k, v if v else "—"))
        md.append("")

    # ---------------------------------------------------------- whole
    def render(self):
        body_start = len(self.md)
        self.section_seed()
        self.section_micro()
        self.section_malloc()
        self.section_malloc2()
        self.section_net()
        self.section_freeze()
        self.section_machine()
        body = self.md[body_start:]
        meta = self.meta
        head = ["# mote benchmark report\n",
                "Mode **%s**, %s repetitions per comparison (alternating sides), run %s at commit `%s`%s, "
                "took %s s. Machine: %s, %s CPUs, %s, Linux %s. Regenerate with `bench/run.sh --%s` "
                "(see docs/bench.md).\n" % (
                    meta.get("mode", self.mode), meta.get("reps", "?"), meta.get("date", "?"), meta.get("commit", "?"),
                    " (with local changes)" if meta.get("dirty", "0") not in ("0", "") else "",
                    meta.get("elapsed_s", "?"), self.machine.get("cpu", "?"), self.machine.get("cpus", "?"),
                    self.machine.get("mem", "?"), self.machine.get("kernel", "?"), meta.get("mode", self.mode)),
                "## Summary: targets of the issues, measured here\n",
                "| area | target | measured (median) | verdict |",
                "|---|---|---|---|"]
        for row in self.summary:
            head.append("| %s | %s | %s | %s |" % row)
        met = sum(1 for r in self.summary if r[3].startswith("✅"))
        miss = sum(1 for r in self.summary if r[3].startswith("❌"))
        nod = sum(1 for r in self.summary if r[3].startswith("—"))
        if self.wins:
            w = sorted(self.wins, reverse=True)
            good = [t for r, t in w if r >= 1.1]
            bad = [t for r, t in reversed(w) if r <= 1 / 1.1]
            head.append("")
            head.append("**Where mote wins:** " + ("; ".join(good[:6]) if good else "nowhere by more than 10% yet") + ".\n")
            head.append("**Where it does not yet:** " + ("; ".join(bad[:6]) if bad else "no comparison is lost by more than 10%") + ".")
        head.append("\n**%d met, %d not yet, %d without data.** Ratios compare medians of the same run; "
                    "\"faster\"/\"less memory\" means mote is better. The machine is a shared, noisy 2-core VM: "
                    "differences under ~10%% are noise.\n" % (met, miss, nod))
        tail = []
        if self.failures:
            tail.append("## Failures and gaps\n")
            tail.append("Runs that failed or sections that had nothing to run (raw log: `raw/run.log`):\n")
            seen = set()
            for d in self.failures:
                key = (d.get("section"), d.get("what"), d.get("rc"), d.get("msg"))
                if key in seen:
                    continue
                seen.add(key)
                tail.append("- %s: %s%s%s" % (d.get("section", "?"), d.get("what", "?"),
                                              (" exit %s" % d["rc"]) if d.get("rc", "0") != "0" else "",
                                              (" — " + d["msg"].replace("_", " ")) if d.get("msg") else ""))
            tail.append("")
        tail.append("## Method\n")
        tail.append("- Both sides of every comparison run in the same invocation of `bench/run.sh`, "
                    "alternating which side goes first from one repetition to the next; tables give the median "
                    "with min–max in small print.\n"
                    "- Memory comes from the kernel: VmRSS, VmHWM and VmPTE from `/proc/self/status`, peak from "
                    "`getrusage` (ru_maxrss; the allocator programs' from VmHWM, which on Linux 6.2+ does not "
                    "lag as ru_maxrss does), page faults from ru_minflt; mote's `/stacks/resident:bytes` is "
                    "measured by the runtime from the kernel. Nothing is estimated.\n"
                    "- A memory guard (min(20 GiB, MemAvailable − 2 GiB) at start) stops a program from spawning "
                    "further, and Go cases predicted to exceed it are skipped and listed.\n"
                    "- Raw data: `raw/*.txt` (key=value lines), `raw/run.log` (every command with its output).\n")
        with open(os.path.join(self.out, "REPORT.md"), "w") as f:
            f.write("\n".join(head + body + tail) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--raw", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", default="quick")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    Report(a.raw, a.out, a.mode).render()
    return 0


if __name__ == "__main__":
    sys.exit(main())
