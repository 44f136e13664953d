/*
 * stack_story.c - seed 004's story in C: a request-handling service whose
 * deepest path runs through one hot function with a fat local buffer
 * (render_template's 2.6 KB scratch), the way Uber found a 2.6 KB frame on
 * the stack traces of a Go service.  `mote-stack worst` on this binary finds
 * the path and the frame; stack_story_fixed.c (this file built with
 * -DSTORY_FIXED) renders in 600 bytes and the recommended stack_size halves.
 * See docs/mote-stack.md.
 *
 * Only mote_run, mote_go and channels: each request is a task, results come
 * back over a channel.
 */
#include <mote.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef STORY_FIXED
enum { SCRATCH = 600 }; /* render in place: a few lines at a time */
#else
enum { SCRATCH = 2600 }; /* the whole page in a local first */
#endif

enum { NREQ = 64, MAXKV = 8 };

typedef struct request {
    int id;
    char path[48];
    char query[96];
} request;

typedef struct kv {
    char key[16];
    char val[32];
} kv;

static mote_chan *done, *keepalive;
static const char *report_path;
static request reqs[NREQ];
static volatile unsigned long checksum;

__attribute__((noinline)) static int parse_query(const char *q, kv *out, int max)
{
    char copy[128];
    snprintf(copy, sizeof copy, "%s", q);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(copy, "&", &save); tok && n < max;
         tok = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq)
            continue;
        *eq = 0;
        snprintf(out[n].key, sizeof out[n].key, "%s", tok);
        snprintf(out[n].val, sizeof out[n].val, "%s", eq + 1);
        n++;
    }
    return n;
}

__attribute__((noinline)) static void escape_html(char *dst, size_t cap, const char *src)
{
    size_t o = 0;
    for (; *src && o + 6 < cap; src++) {
        if (*src == '<') {
            memcpy(dst + o, "&lt;", 4);
            o += 4;
        } else if (*src == '&') {
            memcpy(dst + o, "&amp;", 5);
            o += 5;
        } else {
            dst[o++] = *src;
        }
    }
    dst[o] = 0;
}

__attribute__((noinline)) static size_t format_row(char *out, size_t cap, const kv *f,
                                                   int i)
{
    char esc[96];
    escape_html(esc, sizeof esc, f->val);
    return (size_t)snprintf(out, cap, "<tr><td>%d</td><td>%s</td><td>%s</td></tr>\n", i,
                            f->key, esc);
}

/* The hot function: formats every row into a scratch buffer first. */
__attribute__((noinline)) static size_t render_template(char *out, size_t cap,
                                                        const kv *f, int n)
{
    char scratch[SCRATCH];
    size_t used = 0, o = 0;
    for (int i = 0; i < n; i++) {
        size_t len = format_row(scratch + used, sizeof scratch - used, &f[i], i);
        if (len >= sizeof scratch - used) {
            /* Flush what fits and start over. */
            memcpy(out + o, scratch, used < cap - o ? used : cap - o - 1);
            o += used < cap - o ? used : cap - o - 1;
            used = 0;
            len = format_row(scratch, sizeof scratch, &f[i], i);
        }
        used += len;
    }
    size_t take = used < cap - o - 1 ? used : cap - o - 1;
    memcpy(out + o, scratch, take);
    out[o + take] = 0;
    return o + take;
}

__attribute__((noinline)) static size_t render_page(char *out, size_t cap,
                                                    const request *r, const kv *f, int n)
{
    char title[384];
    snprintf(title, sizeof title, "<h1>%s (request %d)</h1>\n", r->path, r->id);
    size_t t = strlen(title);
    memcpy(out, title, t);
    return t + render_template(out + t, cap - t, f, n);
}

__attribute__((noinline)) static size_t route(const request *r, char *out, size_t cap)
{
    kv fields[MAXKV];
    int n = parse_query(r->query, fields, MAXKV);
    if (strncmp(r->path, "/items", 6) == 0)
        return render_page(out, cap, r, fields, n);
    return (size_t)snprintf(out, cap, "404 %s\n", r->path);
}

__attribute__((noinline)) static int authenticate(const request *r)
{
    unsigned h = 2166136261u;
    for (const char *p = r->path; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return (h & 0xff) != 0xff;
}

static unsigned long served_bytes[2];

/* Middleware, as services stack it: metrics around logging around the
 * router, each with its own small frame. */
__attribute__((noinline)) static size_t with_logging(const request *r, char *out,
                                                     size_t cap)
{
    char line[768];
    size_t len = route(r, out, cap);
    int n = snprintf(line, sizeof line, "req=%d path=%s bytes=%zu query=%s", r->id,
                     r->path, len, r->query);
    served_bytes[n & 1] += (unsigned long)n;
    return len;
}

__attribute__((noinline)) static size_t with_metrics(const request *r, char *out,
                                                     size_t cap)
{
    int64_t t0 = mote_now();
    size_t len = with_logging(r, out, cap);
    served_bytes[0] += (unsigned long)(mote_now() - t0) & 1;
    return len;
}

/* A task per request: the entry mote-stack finds from the mote_go call. */
static void handle_request(void *arg)
{
    request *r = arg;
    char body[2048];
    size_t len = authenticate(r) ? with_metrics(r, body, sizeof body) : 0;
    unsigned long sum = len;
    for (size_t i = 0; i < len; i++)
        sum = sum * 31 + (unsigned char)body[i];
    mote_chan_send(done, &sum);
    mote_chan_recv(keepalive, NULL); /* an idle keep-alive connection */
}

static void accept_loop(void *arg)
{
    (void)arg;
    done = mote_chan_make(sizeof(unsigned long), NREQ);
    keepalive = mote_chan_make(0, 0);
    for (int i = 0; i < NREQ; i++) {
        reqs[i].id = i;
        snprintf(reqs[i].path, sizeof reqs[i].path, "/items/%d", i);
        snprintf(reqs[i].query, sizeof reqs[i].query,
                 "name=widget%d&color=blue&size=%d&note=a<b&x=y", i, i % 7);
        mote_go(handle_request, &reqs[i]);
    }
    unsigned long sum = 0, v;
    for (int i = 0; i < NREQ; i++) {
        mote_chan_recv(done, &v);
        sum += v;
    }
    checksum = sum;
    /* Every handler now waits on its connection with the pages its deepest
     * call touched (the trim gives them back after 20 ms parked). */
    uint64_t resident = 0;
    mote_metric("/stacks/resident:bytes", &resident);
    printf(
        "served %d requests, checksum %lx; parked handlers' stacks: %llu KiB resident\n",
        NREQ, sum, (unsigned long long)resident >> 10);
    mote_chan_close(keepalive);
    if (report_path) { /* the measured depths, for `mote-stack check` */
        uint64_t live = 0;
        while (mote_metric("/tasks/live:tasks", &live) == 0 && live > 1)
            mote_sleep(1000000);
        FILE *f = fopen(report_path, "w");
        if (!f || mote_stack_report(fileno(f)) != 0)
            perror(report_path);
        if (f)
            fclose(f);
    }
    mote_chan_free(done);
    mote_chan_free(keepalive);
}

/* stack_story [REPORT]: with a path, writes mote_stack_report there. */
int main(int argc, char **argv)
{
    report_path = argc > 1 ? argv[1] : NULL;
    int r = mote_run(accept_loop, NULL);
    if (r)
        fprintf(stderr, "mote: %s\n", mote_strerror(r));
    return r != 0;
}
