/* test_http_parse.c - the example HTTP server's request parser
 * (examples/http_parse.c) against good requests, pipelining, every malformed
 * case it must refuse, reads split at every byte, and oversize heads.
 *
 *   test_http_parse            every case
 *   test_http_parse CASE...    only those (names from --list)
 *
 * Every parse is given an exact-size heap copy of the bytes received so far,
 * at a new address each time: a parser that kept pointers between calls or
 * read past len fails here (visibly under ASan). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "http_parse.h"

/* ---- helpers ------------------------------------------------------------ */

typedef struct outcome {
    http_result r;
    http_request req;
    size_t at; /* bytes given when the parser answered */
} outcome;

/* Parses s[0..n) handed over in reads of `step` bytes (0: all at once),
 * each call on a fresh copy of everything so far. */
static outcome feed(const char *s, size_t n, size_t step)
{
    http_parser p;
    http_parser_init(&p);
    outcome o = {HTTP_INCOMPLETE, {0}, 0};
    size_t have = step ? 0 : n;
    for (;;) {
        if (step)
            have = have + step < n ? have + step : n;
        char *copy = malloc(have ? have : 1);
        CHECK(copy != NULL);
        memcpy(copy, s, have);
        o.r = http_parse_request(&p, copy, have, &o.req);
        o.at = have;
        if (o.r == HTTP_DONE) { /* re-point into the caller's bytes */
            o.req.method = s + (o.req.method - copy);
            o.req.target = s + (o.req.target - copy);
        }
        free(copy);
        if (o.r != HTTP_INCOMPLETE || have == n)
            return o;
    }
}

static outcome parse_str(const char *s) { return feed(s, strlen(s), 0); }

static void check_same(const outcome *a, const outcome *b)
{
    CHECK_EQ(a->r, b->r);
    if (a->r != HTTP_DONE)
        return;
    CHECK_EQ(a->req.head_len, b->req.head_len);
    CHECK_EQ(a->req.method_len, b->req.method_len);
    CHECK(a->req.method == b->req.method);
    CHECK_EQ(a->req.target_len, b->req.target_len);
    CHECK(a->req.target == b->req.target);
    CHECK_EQ(a->req.minor_version, b->req.minor_version);
    CHECK_EQ(a->req.keep_alive, b->req.keep_alive);
    CHECK_EQ(a->req.expect_continue, b->req.expect_continue);
    CHECK_EQ(a->req.content_length, b->req.content_length);
}

/* The answer must not depend on how the bytes were split into reads: two
 * reads split at every byte, and one byte per read. */
static void check_splits(const char *s, size_t n)
{
    outcome whole = feed(s, n, 0);
    for (size_t k = 1; k < n; k++) {
        http_parser p;
        http_parser_init(&p);
        http_request req;
        char *a = malloc(k), *b = malloc(n);
        CHECK(a && b);
        memcpy(a, s, k);
        memcpy(b, s, n);
        http_result r = http_parse_request(&p, a, k, &req);
        outcome o = {r, req, k};
        if (r == HTTP_INCOMPLETE) {
            o.r = http_parse_request(&p, b, n, &o.req);
            o.at = n;
            if (o.r == HTTP_DONE) {
                o.req.method = s + (o.req.method - b);
                o.req.target = s + (o.req.target - b);
            }
        } else if (r == HTTP_DONE) {
            o.req.method = s + (o.req.method - a);
            o.req.target = s + (o.req.target - a);
        }
        free(a);
        free(b);
        if (o.r != whole.r)
            fprintf(stderr, "split at %zu of %zu: %d, whole: %d\n", k, n, o.r, whole.r);
        check_same(&o, &whole);
    }
    outcome bytes = feed(s, n, 1);
    check_same(&bytes, &whole);
    if (whole.r == HTTP_DONE) /* answered the moment the blank line came */
        CHECK_EQ(bytes.at, whole.req.head_len);
}

static void expect_err(const char *s, http_result want)
{
    outcome o = parse_str(s);
    if (o.r != want)
        fprintf(stderr, "input \"%s\": got %d, want %d\n", s, o.r, want);
    CHECK_EQ(o.r, want);
    check_splits(s, strlen(s));
}

static outcome expect_ok(const char *s)
{
    outcome o = parse_str(s);
    if (o.r != HTTP_DONE)
        fprintf(stderr, "input \"%s\": got %d, want HTTP_DONE\n", s, o.r);
    CHECK_EQ(o.r, HTTP_DONE);
    check_splits(s, strlen(s));
    return o;
}

static int str_is(const char *p, size_t n, const char *want)
{
    return strlen(want) == n && memcmp(p, want, n) == 0;
}

/* ---- good requests -------------------------------------------------------- */

static void test_simple_get(void)
{
    const char *s = "GET /index.html?a=1 HTTP/1.1\r\nHost: example.com\r\n"
                    "User-Agent: t\r\n\r\n";
    outcome o = expect_ok(s);
    CHECK(str_is(o.req.method, o.req.method_len, "GET"));
    CHECK(str_is(o.req.target, o.req.target_len, "/index.html?a=1"));
    CHECK_EQ(o.req.minor_version, 1);
    CHECK(o.req.keep_alive);
    CHECK(!o.req.expect_continue);
    CHECK_EQ(o.req.content_length, 0);
    CHECK_EQ(o.req.head_len, strlen(s));
}

static void test_wrk_request(void)
{
    /* What wrk sends, byte for byte. */
    const char *s = "GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n";
    outcome o = expect_ok(s);
    CHECK_EQ(o.req.head_len, strlen(s));
    CHECK(o.req.keep_alive);
}

static void test_keep_alive_rules(void)
{
    CHECK(expect_ok("GET / HTTP/1.1\r\nHost: a\r\n\r\n").req.keep_alive);
    CHECK(!expect_ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
               .req.keep_alive);
    CHECK(!expect_ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: CLOSE\r\n\r\n")
               .req.keep_alive);
    CHECK(!expect_ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade,"
                     " close\r\n\r\n")
               .req.keep_alive);
    CHECK(!expect_ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: foo\r\n"
                     "Connection: close\r\n\r\n")
               .req.keep_alive);
    CHECK(expect_ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: closed\r\n\r\n")
              .req.keep_alive);
    CHECK(expect_ok("GET / HTTP/1.1\r\nHost: a\r\nX-Connection: close\r\n\r\n")
              .req.keep_alive);
    /* HTTP/1.0: closes unless asked to keep the connection */
    CHECK(!expect_ok("GET / HTTP/1.0\r\n\r\n").req.keep_alive);
    CHECK(expect_ok("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").req.keep_alive);
    CHECK(expect_ok("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").req.keep_alive);
    CHECK(!expect_ok("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n")
               .req.keep_alive);
    CHECK(!expect_ok("GET / HTTP/1.0\r\nKeep-Alive: 1\r\n\r\n").req.keep_alive);
}

static void test_versions(void)
{
    CHECK_EQ(expect_ok("GET / HTTP/1.0\r\n\r\n").req.minor_version, 0);
    /* a later 1.x minor is served as 1.1 (RFC 9110 6.2) */
    outcome o = expect_ok("GET / HTTP/1.9\r\nHost: a\r\n\r\n");
    CHECK_EQ(o.req.minor_version, 9);
    CHECK(o.req.keep_alive);
}

static void test_host_rules(void)
{
    expect_ok("GET / HTTP/1.0\r\n\r\n"); /* 1.0 needs no Host */
    expect_ok("GET / HTTP/1.0\r\nHost: a\r\n\r\n");
    expect_ok("GET / HTTP/1.1\r\nHost:\r\n\r\n"); /* empty is allowed */
    expect_ok("GET / HTTP/1.1\r\nhOsT: a\r\n\r\n");
    expect_err("GET / HTTP/1.1\r\n\r\n", HTTP_ERR_HOST);
    expect_err("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", HTTP_ERR_HOST);
    expect_err("GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n", HTTP_ERR_HOST);
    /* hosts and ports as RFC 3986 writes them pass; anything else is 400 */
    expect_ok("GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n");
    expect_ok("GET / HTTP/1.1\r\nHost: xn--bcher-kva.example:80\r\n\r\n");
    expect_ok("GET / HTTP/1.1\r\nHost: a%20b.example\r\n\r\n");
    expect_err("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", HTTP_ERR_HOST);
    expect_err("GET / HTTP/1.1\r\nHost: a\tb\r\n\r\n", HTTP_ERR_HOST);
    expect_err("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", HTTP_ERR_HOST);
    expect_err("GET / HTTP/1.1\r\nHost: user@a\r\n\r\n", HTTP_ERR_HOST);
    expect_err("GET / HTTP/1.1\r\nHost: \xc3\xa9.example\r\n\r\n", HTTP_ERR_HOST);
    expect_err("GET / HTTP/1.0\r\nHost: a\"b\r\n\r\n", HTTP_ERR_HOST);
}

static void test_content_length(void)
{
    const char *s = "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n"
                    "hello";
    outcome o = expect_ok(s);
    CHECK_EQ(o.req.content_length, 5);
    CHECK_EQ(o.req.head_len, strlen(s) - 5);
    CHECK_EQ(expect_ok("POST / HTTP/1.1\r\nHost: a\r\ncontent-length:  \t12 "
                       "\t\r\n\r\n")
                 .req.content_length,
             12);
    CHECK_EQ(expect_ok("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0007\r\n"
                       "\r\n")
                 .req.content_length,
             7);
    CHECK_EQ(expect_ok("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: "
                       "9223372036854775807\r\n\r\n")
                 .req.content_length,
             INT64_MAX);
    CHECK_EQ(expect_ok("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n")
                 .req.content_length,
             0);
}

static void test_bare_lf(void)
{
    /* RFC 9112 2.2: a recipient may take a lone LF as a line end. */
    const char *s = "GET / HTTP/1.1\nHost: a\nContent-Length: 3\n\nabc";
    outcome o = expect_ok(s);
    CHECK_EQ(o.req.head_len, strlen(s) - 3);
    CHECK_EQ(o.req.content_length, 3);
    expect_ok("GET / HTTP/1.1\r\nHost: a\n\r\n");
}

static void test_leading_empty_lines(void)
{
    const char *s = "\r\n\n\r\nGET /x HTTP/1.1\r\nHost: a\r\n\r\n";
    outcome o = expect_ok(s);
    CHECK_EQ(o.req.head_len, strlen(s));
    CHECK(str_is(o.req.method, o.req.method_len, "GET"));
    CHECK(o.req.method == s + 5);
    CHECK(str_is(o.req.target, o.req.target_len, "/x"));
    /* only empty lines so far: keep waiting */
    CHECK_EQ(parse_str("\r\n\r\n\r\n").r, HTTP_INCOMPLETE);
}

static void test_methods_and_targets(void)
{
    outcome o = expect_ok("M-SEARCH * HTTP/1.1\r\nHost: a\r\n\r\n");
    CHECK(str_is(o.req.method, o.req.method_len, "M-SEARCH"));
    CHECK(str_is(o.req.target, o.req.target_len, "*"));
    o = expect_ok("HEAD http://a/b HTTP/1.1\r\nHost: a\r\n\r\n");
    CHECK(str_is(o.req.method, o.req.method_len, "HEAD"));
    o = expect_ok("CONNECT a.example:443 HTTP/1.1\r\nHost: a.example\r\n\r\n");
    CHECK(str_is(o.req.target, o.req.target_len, "a.example:443"));
    o = expect_ok("get /%7E?q=%20&x=[1]!$'()*+,;=:@ HTTP/1.1\r\nHost: a\r\n\r\n");
    CHECK(str_is(o.req.method, o.req.method_len, "get"));
}

static void test_header_values(void)
{
    /* obs-text, inner whitespace, tabs, empty values, long values */
    expect_ok("GET / HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9 \t au\tlait\r\n"
              "Y:\r\nZ: \t \r\n\r\n");
    char buf[HTTP_MAX_HEAD];
    int n = snprintf(buf, sizeof buf, "GET / HTTP/1.1\r\nHost: a\r\nX: ");
    memset(buf + n, 'v', 6000);
    strcpy(buf + n + 6000, "\r\n\r\n");
    expect_ok(buf);
}

static void test_expect_continue(void)
{
    CHECK(expect_ok("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
                    "Expect: 100-Continue\r\n\r\n")
              .req.expect_continue);
    CHECK(!expect_ok("POST / HTTP/1.0\r\nContent-Length: 3\r\n"
                     "Expect: 100-continue\r\n\r\n")
               .req.expect_continue);
    CHECK(!expect_ok("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continuex\r\n"
                     "\r\n")
               .req.expect_continue);
}

/* ---- pipelining ----------------------------------------------------------- */

/* Several requests in one buffer, parsed the way the server does: drop the
 * head and the body, reset, go on. */
static void test_pipelined(void)
{
    const char *s = "GET /1 HTTP/1.1\r\nHost: a\r\n\r\n"
                    "POST /2 HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n"
                    "0123456789"
                    "\r\n" /* a stray CRLF after a body, skipped */
                    "GET /3 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
                    "GET /4 HTTP/1.1\r\nHo";
    const char *want[] = {"/1", "/2", "/3"};
    size_t n = strlen(s), pos = 0;
    for (int i = 0; i < 3; i++) {
        http_parser p;
        http_parser_init(&p);
        http_request req;
        CHECK_EQ(http_parse_request(&p, s + pos, n - pos, &req), HTTP_DONE);
        CHECK(str_is(req.target, req.target_len, want[i]));
        CHECK_EQ(req.keep_alive, i < 2);
        pos += req.head_len + (size_t)req.content_length;
    }
    http_parser p;
    http_parser_init(&p);
    http_request req;
    CHECK_EQ(http_parse_request(&p, s + pos, n - pos, &req), HTTP_INCOMPLETE);
    CHECK(str_is(s + pos, n - pos, "GET /4 HTTP/1.1\r\nHo"));
}

/* A bad request behind good ones: the good ones parse, the bad one fails. */
static void test_pipelined_then_bad(void)
{
    const char *s = "GET /1 HTTP/1.1\r\nHost: a\r\n\r\n"
                    "GET /2 HTTP/1.1\r\nHost: a\r\n\r\n"
                    "GET /3 HTTP/1.1\r\n Host: a\r\n\r\n";
    size_t n = strlen(s), pos = 0;
    http_parser p;
    http_request req;
    for (int i = 0; i < 2; i++) {
        http_parser_init(&p);
        CHECK_EQ(http_parse_request(&p, s + pos, n - pos, &req), HTTP_DONE);
        pos += req.head_len;
    }
    http_parser_init(&p);
    CHECK_EQ(http_parse_request(&p, s + pos, n - pos, &req), HTTP_ERR_SYNTAX);
}

/* ---- malformed -------------------------------------------------------------- */

static void test_bad_request_line(void)
{
    static const char *bad[] = {
        "GET\r\nHost: a\r\n\r\n",
        "GET /\r\nHost: a\r\n\r\n",
        " GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n",
        "G(T / HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET@ / HTTP/1.1\r\nHost: a\r\n\r\n",
        "G\x80T / HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /a\x7f HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /a\x01 HTTP/1.1\r\nHost: a\r\n\r\n",
        " / HTTP/1.1\r\nHost: a\r\n\r\n",
        "\x16\x03\x01\x02\xfc\x01\x02\xfc\x03\x03\r\n\r\n", /* TLS-like */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_err(bad[i], HTTP_ERR_SYNTAX);
    /* a NUL inside the request line */
    static const char nul[] = "GET /\0 HTTP/1.1\r\nHost: a\r\n\r\n";
    CHECK_EQ(feed(nul, sizeof nul - 1, 0).r, HTTP_ERR_SYNTAX);
    check_splits(nul, sizeof nul - 1);
}

static void test_bad_version(void)
{
    static const char *bad[] = {
        "GET / HTTP/2.0\r\n\r\n",
        "GET / HTTP/0.9\r\n\r\n",
        "GET / HTTP/1.1 \r\n\r\n",
        "GET / http/1.1\r\nHost: a\r\n\r\n",
        "GET / HTTP/1\r\n\r\n",
        "GET / HTTP/1.10\r\n\r\n",
        "GET / HTTP/1,1\r\n\r\n",
        "GET / HTTP/1.x\r\n\r\n",
        "GET / HTTP/11\r\n\r\n",
        "GET / HTTPS/1.1\r\n\r\n",
        "GET / HTTP/1.1x\r\n\r\n",
        "GET / a b\r\n\r\n",
        "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /  HTTP/1.1\r\nHost: a\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_err(bad[i], HTTP_ERR_VERSION);
}

static void test_bad_headers(void)
{
    static const char *bad[] = {
        /* obs-fold, and whitespace before the first header */
        "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n  continued\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n\tcontinued\r\n\r\n",
        "GET / HTTP/1.1\r\n Host: a\r\n\r\n",
        /* whitespace between name and colon, no colon, empty name */
        "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
        "GET / HTTP/1.1\r\nHost\t: a\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\n: value\r\n\r\n",
        /* bytes outside token in a name */
        "GET / HTTP/1.1\r\nHost: a\r\nX(1): v\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX\xc3\xa9: v\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX/Y: v\r\n\r\n",
        /* controls in a value, a bare CR anywhere */
        "GET / HTTP/1.1\r\nHost: a\r\nX: a\x01"
        "b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX: a\x7f"
        "b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX: ab\r\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\n\r\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX: \x1b[31m\r\n\r\n",
        /* Transfer-Encoding framing we refuse outright */
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
        "Content-Length: 3\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
        "Transfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_err(bad[i], HTTP_ERR_SYNTAX);
    /* a bare CR ending the request line leaves it with a bad version */
    expect_err("GET / HTTP/1.1\rHost: a\r\n\r\n", HTTP_ERR_VERSION);
    static const char nul[] = "GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n";
    CHECK_EQ(feed(nul, sizeof nul - 1, 0).r, HTTP_ERR_SYNTAX);
    check_splits(nul, sizeof nul - 1);
}

static void test_bad_content_length(void)
{
    static const char *bad[] = {
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1,1\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1e3\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775808"
        "\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999"
        "\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
        "Content-Length: 5\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
        "content-length: 6\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_err(bad[i], HTTP_ERR_LENGTH);
}

static void test_transfer_coding(void)
{
    expect_err("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
               "\r\n5\r\nhello\r\n0\r\n\r\n",
               HTTP_ERR_TRANSFER_CODING);
    expect_err("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, "
               "chunked\r\n\r\n",
               HTTP_ERR_TRANSFER_CODING);
    expect_err("POST / HTTP/1.1\r\nHost: a\r\ntransfer-encoding: identity\r\n"
               "\r\n",
               HTTP_ERR_TRANSFER_CODING);
    CHECK_EQ(http_error_status(HTTP_ERR_TRANSFER_CODING), 501);
}

static void test_early_rejection(void)
{
    /* A bad line is refused when it ends, not when the head does. */
    CHECK_EQ(parse_str("GET / HTTP/1.1\r\nHost : a\r\n").r, HTTP_ERR_SYNTAX);
    CHECK_EQ(parse_str("FOO BAR\r\n").r, HTTP_ERR_SYNTAX);
    CHECK_EQ(parse_str("GET / HTTP/3.0\r\n").r, HTTP_ERR_VERSION);
    CHECK_EQ(parse_str("POST / HTTP/1.1\r\nContent-Length: x\r\n").r, HTTP_ERR_LENGTH);
    /* ...and not before: a complete good line with no blank line yet */
    CHECK_EQ(parse_str("GET / HTTP/1.1\r\nHost: a\r\n").r, HTTP_INCOMPLETE);
    CHECK_EQ(parse_str("GET / HTTP/1.1\r\nHost: a\r").r, HTTP_INCOMPLETE);
}

/* Every byte value in each position, against the grammar's own lists
 * (snprintf writes a %c of 0 like any other byte). */
static void test_every_byte(void)
{
    const char *tchars = "!#$%&'*+-.^_`|~0123456789"
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    for (int c = 0; c < 256; c++) {
        int tchar = c && strchr(tchars, c);
        char buf[128];
        int n;
        /* in a method */
        n = snprintf(buf, sizeof buf, "G%cT / HTTP/1.1\r\nHost: a\r\n\r\n", c);
        http_result r = feed(buf, (size_t)n, 0).r;
        if (c == ' ')
            CHECK_EQ(r, HTTP_ERR_VERSION); /* "G T / HTTP/1.1": 4 words */
        else if (c == '\n' || c == '\r')
            CHECK(r < 0);
        else
            CHECK_EQ(r, tchar ? HTTP_DONE : HTTP_ERR_SYNTAX);
        /* in a header name */
        n = snprintf(buf, sizeof buf,
                     "GET / HTTP/1.1\r\nHost: a\r\nX%cY: v\r\n"
                     "\r\n",
                     c);
        r = feed(buf, (size_t)n, 0).r;
        if (c == ':') /* "X:Y: v" is name X, value "Y: v" */
            CHECK_EQ(r, HTTP_DONE);
        else
            CHECK_EQ(r, tchar ? HTTP_DONE : HTTP_ERR_SYNTAX);
        /* in a header value */
        n = snprintf(buf, sizeof buf,
                     "GET / HTTP/1.1\r\nHost: a\r\nX: a%cb\r\n"
                     "\r\n",
                     c);
        r = feed(buf, (size_t)n, 0).r;
        int field = c == '\t' || (c >= 0x20 && c != 0x7f);
        if (c == '\n') /* ends the line: "b" is then a line with no colon */
            CHECK_EQ(r, HTTP_ERR_SYNTAX);
        else
            CHECK_EQ(r, field ? HTTP_DONE : HTTP_ERR_SYNTAX);
        /* in a target */
        n = snprintf(buf, sizeof buf, "GET /a%cb HTTP/1.1\r\nHost: a\r\n\r\n", c);
        r = feed(buf, (size_t)n, 0).r;
        if (c == ' ')
            CHECK_EQ(r, HTTP_ERR_VERSION);
        else
            CHECK_EQ(r, (c > 0x20 && c < 0x7f) ? HTTP_DONE : HTTP_ERR_SYNTAX);
    }
}

/* ---- oversize -------------------------------------------------------------- */

/* A head of exactly `total` bytes: request line, Host, one filler header. */
static char *head_of(size_t total)
{
    const char *pre = "GET / HTTP/1.1\r\nHost: a\r\nX: ";
    size_t fixed = strlen(pre) + 4; /* + "\r\n\r\n" */
    CHECK(total > fixed);
    char *s = malloc(total + 1);
    CHECK(s != NULL);
    strcpy(s, pre);
    memset(s + strlen(pre), 'x', total - fixed);
    strcpy(s + total - 4, "\r\n\r\n");
    CHECK_EQ(strlen(s), total);
    return s;
}

static void test_oversize(void)
{
    char *s = head_of(HTTP_MAX_HEAD);
    outcome o = parse_str(s);
    CHECK_EQ(o.r, HTTP_DONE);
    CHECK_EQ(o.req.head_len, HTTP_MAX_HEAD);
    CHECK_EQ(feed(s, HTTP_MAX_HEAD, 1).at, HTTP_MAX_HEAD);
    free(s);

    s = head_of(HTTP_MAX_HEAD + 1);
    CHECK_EQ(parse_str(s).r, HTTP_ERR_TOO_LARGE);
    /* refused once HTTP_MAX_HEAD bytes are in and no head ended */
    o = feed(s, HTTP_MAX_HEAD + 1, 1);
    CHECK_EQ(o.r, HTTP_ERR_TOO_LARGE);
    CHECK_EQ(o.at, HTTP_MAX_HEAD);
    free(s);

    /* no line end at all, and a flood of empty lines */
    s = malloc(3 * HTTP_MAX_HEAD);
    CHECK(s != NULL);
    memset(s, 'A', 3 * HTTP_MAX_HEAD);
    CHECK_EQ(feed(s, HTTP_MAX_HEAD - 1, 0).r, HTTP_INCOMPLETE);
    CHECK_EQ(feed(s, HTTP_MAX_HEAD, 0).r, HTTP_ERR_TOO_LARGE);
    o = feed(s, 3 * HTTP_MAX_HEAD, 1000);
    CHECK_EQ(o.r, HTTP_ERR_TOO_LARGE);
    CHECK_EQ(o.at, 9000); /* the first read to reach HTTP_MAX_HEAD */
    for (size_t i = 0; i < 3 * HTTP_MAX_HEAD; i += 2)
        memcpy(s + i, "\r\n", 2);
    CHECK_EQ(feed(s, 3 * HTTP_MAX_HEAD, 0).r, HTTP_ERR_TOO_LARGE);
    free(s);

    /* a good head after HTTP_MAX_HEAD bytes of body is fine: the caller
     * parses from the start of each request */
    const char *req = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    size_t n = HTTP_MAX_HEAD + strlen(req);
    s = malloc(n);
    CHECK(s != NULL);
    memset(s, 'b', HTTP_MAX_HEAD);
    memcpy(s + HTTP_MAX_HEAD, req, strlen(req));
    CHECK_EQ(feed(s + HTTP_MAX_HEAD, strlen(req), 0).r, HTTP_DONE);
    free(s);
}

static void test_header_count(void)
{
    char *s = malloc(HTTP_MAX_HEAD);
    CHECK(s != NULL);
    for (int count = HTTP_MAX_HEADERS; count <= HTTP_MAX_HEADERS + 1; count++) {
        size_t n = (size_t)sprintf(s, "GET / HTTP/1.1\r\nHost: a\r\n");
        for (int i = 1; i < count; i++) /* Host is the first */
            n += (size_t)sprintf(s + n, "X%d: 1\r\n", i);
        n += (size_t)sprintf(s + n, "\r\n");
        CHECK(n < HTTP_MAX_HEAD);
        CHECK_EQ(feed(s, n, 0).r,
                 count <= HTTP_MAX_HEADERS ? HTTP_DONE : HTTP_ERR_TOO_LARGE);
    }
    free(s);
}

static void test_error_status(void)
{
    CHECK_EQ(http_error_status(HTTP_ERR_SYNTAX), 400);
    CHECK_EQ(http_error_status(HTTP_ERR_TOO_LARGE), 400);
    CHECK_EQ(http_error_status(HTTP_ERR_VERSION), 400);
    CHECK_EQ(http_error_status(HTTP_ERR_LENGTH), 400);
    CHECK_EQ(http_error_status(HTTP_ERR_HOST), 400);
    CHECK_EQ(http_error_status(HTTP_ERR_TRANSFER_CODING), 501);
}

/* Random bytes drawn mostly from HTTP's own alphabet: the parser must
 * answer without crashing, reading past len (ASan), or depending on how
 * the bytes were split. */
static void test_random_inputs(void)
{
    static const char *pieces[] = {
        "GET",  " ",          "/",       "HTTP/1.1", "HTTP/1.0", "\r\n",
        "\n",   "\r",         ":",       "Host",     "a",        "Content-Length",
        "5",    "Connection", "close",   "\t",       ",",        "Transfer-Encoding",
        "\x00", "\x80",       "\r\n\r\n"};
    uint64_t x = 0x9e3779b97f4a7c15ull;
    char buf[512];
    int done = 0;
    for (int iter = 0; iter < TEST_SCALE(3000, 10); iter++) {
        size_t n = 0;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int parts = 1 + (int)(x % 24);
        if (x & 1) /* half start with a plausible request line */
            n = (size_t)sprintf(buf, "GET / HTTP/1.1\r\nHost: a\r\n");
        for (int i = 0; i < parts; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            const char *p = pieces[x % (sizeof pieces / sizeof *pieces)];
            size_t l = *p ? strlen(p) : 1;
            if (n + l > sizeof buf)
                break;
            memcpy(buf + n, p, l);
            n += l;
        }
        outcome o = feed(buf, n, 0);
        done += o.r == HTTP_DONE;
        if (o.r == HTTP_DONE)
            CHECK(o.req.head_len <= n);
        check_splits(buf, n);
    }
    CHECK(done > 0); /* the generator does reach whole requests */
}

/* ---- driver ------------------------------------------------------------------ */

#define CASE(f) \
    {           \
#f, f   \
    }
static const struct {
    const char *name;
    void (*fn)(void);
} cases[] = {
    CASE(test_simple_get),
    CASE(test_wrk_request),
    CASE(test_keep_alive_rules),
    CASE(test_versions),
    CASE(test_host_rules),
    CASE(test_content_length),
    CASE(test_bare_lf),
    CASE(test_leading_empty_lines),
    CASE(test_methods_and_targets),
    CASE(test_header_values),
    CASE(test_expect_continue),
    CASE(test_pipelined),
    CASE(test_pipelined_then_bad),
    CASE(test_bad_request_line),
    CASE(test_bad_version),
    CASE(test_bad_headers),
    CASE(test_bad_content_length),
    CASE(test_transfer_coding),
    CASE(test_early_rejection),
    CASE(test_every_byte),
    CASE(test_oversize),
    CASE(test_header_count),
    CASE(test_error_status),
    CASE(test_random_inputs),
};

int main(int argc, char **argv)
{
    size_t ncases = sizeof cases / sizeof *cases;
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < ncases; i++)
            printf("%s\n", cases[i].name);
        return 0;
    }
    int ran = 0;
    for (size_t i = 0; i < ncases; i++) {
        int want = argc == 1;
        for (int a = 1; a < argc; a++)
            want |= strcmp(argv[a], cases[i].name) == 0;
        if (!want)
            continue;
        cases[i].fn();
        TEST_PASS(cases[i].name);
        ran++;
    }
    if (ran == 0 || (argc > 1 && ran != argc - 1)) {
        fprintf(stderr, "unknown case (try --list)\n");
        return 2;
    }
    return 0;
}
