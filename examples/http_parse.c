/*
 * http_parse.c - HTTP/1.x request heads (RFC 9112) for examples/http_hello.c.
 *
 * Strict on purpose: a server that is benchmarked is also exposed, and every
 * place where two HTTP implementations could disagree about where a request
 * ends is a request-smuggling hole.  So the parser refuses, rather than
 * guesses:
 *   - a request line that is not exactly `token SP target SP HTTP/d.d`;
 *   - any control byte other than HTAB in a line, a bare CR included (the
 *     only CR allowed is the one right before LF; a bare LF ends a line, as
 *     RFC 9112 2.2 permits);
 *   - obs-fold (a header line starting with SP/HTAB) and whitespace between
 *     a field name and its colon (RFC 9112 5.1/5.2);
 *   - Content-Length that is not one decimal number, appears twice, or
 *     overflows; Transfer-Encoding together with Content-Length or in an
 *     HTTP/1.0 request (RFC 9112 6.1, 6.3);
 *   - HTTP/1.1 without exactly one Host, or several Host headers, or a
 *     Host whose value holds a byte no host or port can (a space, '/', '@');
 *   - a head over HTTP_MAX_HEAD bytes or HTTP_MAX_HEADERS lines, as soon as
 *     that is certain.
 * Transfer-coded bodies are refused with 501 instead of decoded: the hello
 * server never needs a body, and a decoder is one more state machine to get
 * wrong.  Empty lines before a request line are skipped (RFC 9112 2.2: some
 * clients send a CRLF after a POST body).
 */
#include "http_parse.h"

#include <string.h>
#include <strings.h>

/* RFC 9110 5.6.2 tchar: "!#$%&'*+-.^_`|~", digits, letters; bit c of this
 * 256-bit set. */
static const uint64_t tchar_bits[4] = {0x03ff6cfa00000000ull, 0x57ffffffc7fffffeull, 0,
                                       0};

static inline bool is_tchar(unsigned char c)
{
    return (tchar_bits[c >> 6] >> (c & 63)) & 1;
}

/* field-vchar / obs-text / SP / HTAB: anything but the other controls. */
static inline bool is_field_byte(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

/* A request-target is visible ASCII (RFC 3986 characters; the hello server
 * never interprets it, so no finer check). */
static inline bool is_target_byte(unsigned char c) { return c > 0x20 && c < 0x7f; }

static inline bool is_ows(unsigned char c) { return c == ' ' || c == '\t'; }

/* A Host value is `uri-host [ ":" port ]` (RFC 9110 7.2): reg-name,
 * IP-literal and port characters of RFC 3986, pct-encoding's '%' included;
 * no finer grammar (Go's server checks the same set).  Empty is allowed. */
static bool is_host_value(const char *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || strchr("-._~!$&'()*+,;=:[]%", c) != NULL) ||
            c == 0)
            return false;
    }
    return true;
}

static bool name_is(const char *s, size_t n, const char *lower)
{
    return strlen(lower) == n && strncasecmp(s, lower, n) == 0;
}

void http_parser_init(http_parser *p) { memset(p, 0, sizeof *p); }

int http_error_status(http_result r) { return r == HTTP_ERR_TRANSFER_CODING ? 501 : 400; }

/* `method SP request-target SP HTTP-version`, line = buf[s, e). */
static http_result take_request_line(http_parser *p, const char *buf, size_t s, size_t e)
{
    const unsigned char *u = (const unsigned char *)buf;
    size_t i = s;
    while (i < e && is_tchar(u[i]))
        i++;
    if (i == s || i == e || u[i] != ' ')
        return HTTP_ERR_SYNTAX;
    p->method_len = i - s;
    size_t t = ++i;
    while (i < e && is_target_byte(u[i]))
        i++;
    if (i == t || i == e || u[i] != ' ')
        return HTTP_ERR_SYNTAX;
    p->target_off = t - p->head_start;
    p->target_len = i - t;
    i++;
    /* Exactly "HTTP/" DIGIT "." DIGIT, case-sensitive (RFC 9112 2.3). */
    if (e - i != 8 || memcmp(buf + i, "HTTP/", 5) != 0 || buf[i + 5] != '1' ||
        buf[i + 6] != '.' || buf[i + 7] < '0' || buf[i + 7] > '9')
        return HTTP_ERR_VERSION;
    p->minor_version = buf[i + 7] - '0';
    return HTTP_INCOMPLETE;
}

/* Connection is a comma-separated list of tokens, any case. */
static void take_connection(http_parser *p, const char *v, size_t n)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (is_ows((unsigned char)v[i]) || v[i] == ','))
            i++;
        size_t s = i;
        while (i < n && v[i] != ',' && !is_ows((unsigned char)v[i]))
            i++;
        if (name_is(v + s, i - s, "close"))
            p->conn_close = true;
        else if (name_is(v + s, i - s, "keep-alive"))
            p->conn_keep_alive = true;
    }
}

static http_result take_content_length(http_parser *p, const char *v, size_t n)
{
    if (p->have_length || n == 0)
        return HTTP_ERR_LENGTH;
    int64_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return HTTP_ERR_LENGTH;
        int d = v[i] - '0';
        if (len > (INT64_MAX - d) / 10)
            return HTTP_ERR_LENGTH;
        len = len * 10 + d;
    }
    p->have_length = true;
    p->content_length = len;
    return HTTP_INCOMPLETE;
}

/* `field-name ":" OWS field-value OWS`, line = buf[s, e). */
static http_result take_header(http_parser *p, const char *buf, size_t s, size_t e)
{
    const unsigned char *u = (const unsigned char *)buf;
    if (++p->headers > HTTP_MAX_HEADERS)
        return HTTP_ERR_TOO_LARGE;
    size_t i = s;
    while (i < e && is_tchar(u[i]))
        i++;
    /* i == s covers obs-fold (a leading SP/HTAB) and an empty name; a
     * non-colon after the name covers "Name :" and stray bytes. */
    if (i == s || i == e || u[i] != ':')
        return HTTP_ERR_SYNTAX;
    const char *name = buf + s;
    size_t name_len = i - s;
    i++;
    while (i < e && is_ows(u[i]))
        i++;
    size_t ve = e;
    while (ve > i && is_ows(u[ve - 1]))
        ve--;
    for (size_t j = i; j < ve; j++)
        if (!is_field_byte(u[j]))
            return HTTP_ERR_SYNTAX;
    const char *v = buf + i;
    size_t vn = ve - i;

    switch (name_len) { /* only the headers that change framing or reply */
    case 4:
        if (name_is(name, name_len, "host")) {
            if (!is_host_value(v, vn))
                return HTTP_ERR_HOST;
            p->hosts++;
        }
        break;
    case 6:
        if (name_is(name, name_len, "expect") && name_is(v, vn, "100-continue"))
            p->expect = true;
        break;
    case 10:
        if (name_is(name, name_len, "connection"))
            take_connection(p, v, vn);
        break;
    case 14:
        if (name_is(name, name_len, "content-length"))
            return take_content_length(p, v, vn);
        break;
    case 17:
        if (name_is(name, name_len, "transfer-encoding"))
            p->transfer_coding = true;
        break;
    }
    return HTTP_INCOMPLETE;
}

/* The blank line has arrived: judge the head as a whole. */
static http_result finish(http_parser *p, const char *buf, size_t end, http_request *req)
{
    bool v11 = p->minor_version >= 1;
    if (p->transfer_coding) {
        /* Framing we would not share with a proxy: refuse (RFC 9112 6.1). */
        if (!v11 || p->have_length)
            return HTTP_ERR_SYNTAX;
        return HTTP_ERR_TRANSFER_CODING;
    }
    if (p->hosts > 1 || (v11 && p->hosts == 0))
        return HTTP_ERR_HOST;
    req->method = buf + p->head_start;
    req->method_len = p->method_len;
    req->target = buf + p->head_start + p->target_off;
    req->target_len = p->target_len;
    req->minor_version = p->minor_version;
    req->keep_alive = !p->conn_close && (v11 || p->conn_keep_alive);
    /* RFC 9110 10.1.1: an HTTP/1.0 server ignores 100-continue. */
    req->expect_continue = v11 && p->expect;
    req->content_length = p->have_length ? p->content_length : 0;
    req->head_len = end;
    return HTTP_DONE;
}

http_result http_parse_request(http_parser *p, const char *buf, size_t len,
                               http_request *req)
{
    /* Nothing past HTTP_MAX_HEAD can belong to an acceptable head. */
    size_t limit = len < HTTP_MAX_HEAD ? len : HTTP_MAX_HEAD;
    while (p->scanned < limit) {
        const char *nl = memchr(buf + p->scanned, '\n', limit - p->scanned);
        if (!nl) {
            p->scanned = limit;
            break;
        }
        size_t at = (size_t)(nl - buf);
        size_t s = p->line_start, e = at;
        if (e > s && buf[e - 1] == '\r')
            e--;
        p->scanned = p->line_start = at + 1;
        http_result r;
        if (e == s) { /* an empty line */
            if (p->in_head)
                return finish(p, buf, at + 1, req);
            p->head_start = at + 1;
            continue;
        }
        if (!p->in_head) {
            p->in_head = true;
            r = take_request_line(p, buf, s, e);
        } else {
            r = take_header(p, buf, s, e);
        }
        if (r != HTTP_INCOMPLETE)
            return r;
    }
    return len >= HTTP_MAX_HEAD ? HTTP_ERR_TOO_LARGE : HTTP_INCOMPLETE;
}
