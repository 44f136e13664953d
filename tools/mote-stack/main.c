/*
 * main.c - the mote-stack command line: subcommands frames, worst, traces,
 * check and calibrate (see docs/mote-stack.md and `mote-stack --help`).
 *
 * Exit codes (util.h): 0 done; 1 check found a measured depth above a
 * complete static bound; 2 an input could not be used (missing, not ELF,
 * wrong machine, truncated, stripped, bad report/hints/costs); 64 a bad
 * command line.  Every error is one "mote-stack: ..." line on stderr.
 */
#include "check.h"
#include "costs.h"
#include "elfbin.h"
#include "frames.h"
#include "graph.h"
#include "output.h"
#include "traces.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#ifndef MOTE_STACK_VERSION
#define MOTE_STACK_VERSION "0"
#endif

static const char usage[] =
    "usage: mote-stack COMMAND [options]\n"
    "\n"
    "  frames BINARY          every function's stack frame\n"
    "      --sort addr|frame|name   order (default addr)   --top N   first N only\n"
    "  worst BINARY           deepest path from each task entry, recommended stack_size\n"
    "      --entry FN         an entry (name or 0xADDR; repeatable); default: the\n"
    "                         functions passed to mote_go/mote_go_ex/mote_run\n"
    "      --hints FILE       targets of indirect calls, bounds of dynamic frames\n"
    "      --no-signal        no reserve for a signal frame on the task stack\n"
    "  traces BINARY [FILE]   sampled stacks (perf script or folded; stdin without "
    "FILE)\n"
    "      --format perf|folded   (default: detected)   --top N\n"
    "  check BINARY REPORT    the runtime's measured depths against the static bounds\n"
    "      --hints FILE  --no-signal\n"
    "  calibrate              measure library calls, lazy binding and the signal\n"
    "      -o FILE            frame on this machine; write a cost table (default "
    "stdout)\n"
    "\n"
    "common: --json  machine-readable output;  --costs FILE  a cost table from\n"
    "        calibrate (default: built in);  --eh-frame  also analyse functions\n"
    "        without symbols, found from the unwind table (stripped binaries)\n";

enum {
    O_JSON = 256,
    O_COSTS,
    O_EHFRAME,
    O_SORT,
    O_TOP,
    O_ENTRY,
    O_HINTS,
    O_NOSIGNAL,
    O_FORMAT,
    O_VERSION
};

static const struct option longopts[] = {
    {"json", no_argument, NULL, O_JSON},
    {"costs", required_argument, NULL, O_COSTS},
    {"eh-frame", no_argument, NULL, O_EHFRAME},
    {"sort", required_argument, NULL, O_SORT},
    {"top", required_argument, NULL, O_TOP},
    {"entry", required_argument, NULL, O_ENTRY},
    {"hints", required_argument, NULL, O_HINTS},
    {"no-signal", no_argument, NULL, O_NOSIGNAL},
    {"format", required_argument, NULL, O_FORMAT},
    {"output", required_argument, NULL, 'o'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, O_VERSION},
    {NULL, 0, NULL, 0},
};

typedef struct cli {
    const char *cmd;
    bool json, eh_frame, no_signal;
    const char *costs, *hints, *output;
    int sort, format;
    size_t top;
    bool top_set;
    const char **entries;
    size_t nentries, capentries;
    const char *args[3];
    int nargs;
} cli;

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "mote-stack: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(mote-stack --help lists the commands and options)\n");
    return EXIT_USAGE;
}

static int parse(cli *c, int argc, char **argv)
{
    memset(c, 0, sizeof *c);
    c->format = TR_AUTO;
    int opt;
    /* getopt's own messages are not in the "mote-stack: ..." form. */
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":ho:", longopts, NULL)) != -1) {
        switch (opt) {
        case O_JSON: c->json = true; break;
        case O_COSTS: c->costs = optarg; break;
        case O_EHFRAME: c->eh_frame = true; break;
        case O_NOSIGNAL: c->no_signal = true; break;
        case O_HINTS: c->hints = optarg; break;
        case 'o': c->output = optarg; break;
        case O_ENTRY: *VEC_PUSH(c->entries, c->nentries, c->capentries) = optarg; break;
        case O_SORT:
            if (strcmp(optarg, "addr") == 0)
                c->sort = SORT_ADDR;
            else if (strcmp(optarg, "frame") == 0)
                c->sort = SORT_FRAME;
            else if (strcmp(optarg, "name") == 0)
                c->sort = SORT_NAME;
            else
                return bad_usage("--sort takes addr, frame or name, not '%s'", optarg);
            break;
        case O_TOP: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 0)
                return bad_usage("--top takes a count, not '%s'", optarg);
            c->top = (size_t)v;
            c->top_set = true;
            break;
        }
        case O_FORMAT:
            if (strcmp(optarg, "perf") == 0)
                c->format = TR_PERF;
            else if (strcmp(optarg, "folded") == 0)
                c->format = TR_FOLDED;
            else
                return bad_usage("--format takes perf or folded, not '%s'", optarg);
            break;
        case 'h': fputs(usage, stdout); exit(0);
        case O_VERSION: printf("mote-stack %s\n", MOTE_STACK_VERSION); exit(0);
        case ':': return bad_usage("option '%s' needs an argument", argv[optind - 1]);
        default: return bad_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    for (int i = optind; i < argc; i++) {
        if (!c->cmd) {
            c->cmd = argv[i];
            continue;
        }
        if (c->nargs == 3)
            return bad_usage("too many arguments ('%s')", argv[i]);
        c->args[c->nargs++] = argv[i];
    }
    if (!c->cmd) {
        fputs(usage, stderr);
        return EXIT_USAGE;
    }
    return 0;
}

static int need_args(const cli *c, int lo, int hi, const char *what)
{
    if (c->nargs < lo || c->nargs > hi) {
        fprintf(stderr, "mote-stack: usage: mote-stack %s %s\n", c->cmd, what);
        return EXIT_USAGE;
    }
    return 0;
}

static int cmd_frames(const cli *c, elfbin *b, analyzer *a)
{
    out_opts o = {c->json, c->sort, c->top};
    print_frames(stdout, b, a, &o);
    return 0;
}

/* In a stripped executable: the function _start hands to
 * __libc_start_main. */
static int find_main(elfbin *b, analyzer *a)
{
    const frame *f = frame_of(a, elfbin_func_at(b, b->entry));
    const callsite *cs = f ? frame_calls(a, f) : NULL;
    for (uint32_t k = 0; f && k < f->ncalls; k++)
        if (cs[k].ext && strncmp(cs[k].ext, "__libc_start_main", 17) == 0 &&
            cs[k].arg0_known)
            return elfbin_func_start(b, cs[k].arg0);
    return -1;
}

static int cmd_worst(const cli *c, elfbin *b, analyzer *a, const costs *co,
                     const hints *h)
{
    worst_report r;
    memset(&r, 0, sizeof r);
    r.c = co;
    r.h = h;
    r.signal = !c->no_signal;
    int *entries = NULL;
    size_t n = 0, cap = 0;
    if (c->nentries) {
        for (size_t i = 0; i < c->nentries; i++) {
            const char *e = c->entries[i];
            int fi = -1;
            char *end = NULL;
            if (e[0] == '0' && (e[1] == 'x' || e[1] == 'X')) {
                unsigned long long v = strtoull(e, &end, 16);
                fi = *end || end == e + 2 ? -1 : elfbin_func_start(b, v);
            } else
                fi = elfbin_func_named(b, e, strlen(e));
            if (fi < 0 && strcmp(e, "main") == 0)
                fi = find_main(b, a);
            if (fi < 0) {
                msg_error("%s: no function %s", b->path, e);
                free(entries);
                return EXIT_INPUT;
            }
            *VEC_PUSH(entries, n, cap) = fi;
        }
    } else {
        r.from_spawns = true;
        r.nspawns = find_spawns(a, b, &r.spawns);
        for (size_t i = 0; i < r.nspawns; i++) {
            int t = r.spawns[i].target;
            bool dup = t < 0;
            for (size_t k = 0; k < n && !dup; k++)
                dup = entries[k] == t;
            if (!dup)
                *VEC_PUSH(entries, n, cap) = t;
        }
        if (!r.nspawns) {
            msg_error("%s: no calls to mote_go, mote_go_ex or mote_run found; "
                      "name the entries with --entry FN",
                      b->path);
            free(entries);
            return EXIT_INPUT;
        }
    }
    graph_opts go = {h, co, !c->no_signal};
    r.runtime = runtime_overhead(a, b, co);
    r.w = xcalloc(n ? n : 1, sizeof *r.w);
    r.n = n;
    for (size_t i = 0; i < n; i++) {
        worst *w = &r.w[i];
        worst_from(a, b, entries[i], &go, w);
        w->runtime = r.runtime;
        w->signal = r.signal ? co->sigframe + co->redzone : 0;
        w->stack_size = stack_class_for(w->bound + w->runtime + w->signal);
    }
    out_opts o = {c->json, 0, c->top};
    print_worst(stdout, b, a, &r, &o);
    for (size_t i = 0; i < n; i++)
        worst_free(&r.w[i]);
    free(r.w);
    free(r.spawns);
    free(entries);
    return 0;
}

static int cmd_traces(const cli *c, elfbin *b, analyzer *a, const costs *co)
{
    FILE *in = stdin;
    const char *name = "<stdin>";
    if (c->nargs == 2 && strcmp(c->args[1], "-") != 0) {
        name = c->args[1];
        in = open_input(name, "stacks file");
        if (!in)
            return EXIT_INPUT;
    }
    traces t;
    int r = traces_read(&t, in, name, c->format);
    if (in != stdin)
        fclose(in);
    if (r)
        return r;
    traces_charge(&t, a, b, co);
    out_opts o = {c->json, 0, c->top};
    print_traces(stdout, b, &t, &o);
    traces_free(&t);
    return 0;
}

int main(int argc, char **argv)
{
    cli c;
    int r = parse(&c, argc, argv);
    if (r)
        return r;
    if (strcmp(c.cmd, "calibrate") == 0) {
        if ((r = need_args(&c, 0, 0, "[-o FILE]")))
            return r;
        return cmd_calibrate(c.output, c.json);
    }
    bool frames = strcmp(c.cmd, "frames") == 0, worst = strcmp(c.cmd, "worst") == 0,
         tr = strcmp(c.cmd, "traces") == 0, check = strcmp(c.cmd, "check") == 0;
    if (!frames && !worst && !tr && !check)
        return bad_usage("unknown command '%s'", c.cmd);
    if ((r = need_args(&c, check ? 2 : 1, check || tr ? 2 : 1,
                       check ? "BINARY REPORT"
                       : tr  ? "BINARY [FILE]"
                             : "BINARY")))
        return r;
    if (c.nentries && !worst)
        return bad_usage("--entry belongs to worst, not %s", c.cmd);

    costs co;
    if ((r = costs_load(&co, c.costs)))
        return r;
    hints h;
    memset(&h, 0, sizeof h);
    if (c.hints && (r = hints_load(&h, c.hints))) {
        costs_free(&co);
        return r;
    }
    elfbin b;
    elfbin_opts eo = {c.eh_frame};
    if ((r = elfbin_open(&b, c.args[0], &eo))) {
        costs_free(&co);
        hints_free(&h);
        return r;
    }
    analyzer *a = analyzer_new(&b);
    if (frames) {
        r = cmd_frames(&c, &b, a);
    } else if (worst) {
        r = cmd_worst(&c, &b, a, &co, c.hints ? &h : NULL);
    } else if (tr) {
        r = cmd_traces(&c, &b, a, &co);
    } else {
        graph_opts go = {c.hints ? &h : NULL, &co, !c.no_signal};
        check_result cr;
        r = check_run(&cr, &b, a, c.args[1], &go);
        if (!r) {
            out_opts o = {c.json, 0, 0};
            print_check(stdout, &cr, &co, &o);
            r = cr.violations ? EXIT_FINDING : 0;
            check_free(&cr);
        }
    }
    analyzer_free(a);
    elfbin_close(&b);
    costs_free(&co);
    hints_free(&h);
    free(c.entries);
    /* A full disk or a closed pipe: the output is cut short, and a cost
     * table or report read from it later would be wrong. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        msg_error("cannot write the output: %s", strerror(errno ? errno : EIO));
        return EXIT_INPUT;
    }
    return r;
}
