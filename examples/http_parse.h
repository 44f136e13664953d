/*
 * http_parse.h - the HTTP/1.x request-head parser of examples/http_hello.c:
 * strict, allocation-free, incremental over a buffer that grows by reads.
 *
 * The caller keeps the bytes of the request being received at the start of
 * its buffer (buf[0..len)) and calls http_parse_request after every read.
 * Each line is checked once, when its end arrives, so a bad request is
 * refused as soon as its bad line is in.  Once the call returns HTTP_DONE
 * the caller drops req.head_len bytes, then req.content_length bytes of
 * body, and calls http_parser_init before the next request.  The parser
 * keeps offsets, not pointers, so buf may move between calls (compaction).
 *
 * What is refused, and why, is in http_parse.c.  Chunked (or any other
 * transfer-coded) request bodies are not decoded: HTTP_ERR_TRANSFER_CODING,
 * which the server answers with 501 and a close.
 */
#ifndef HTTP_PARSE_H
#define HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    HTTP_MAX_HEAD = 8192,   /* request line + header lines + the blank line,
                               empty lines before the request included */
    HTTP_MAX_HEADERS = 100, /* header lines in one request */
};

typedef enum http_result {
    HTTP_DONE = 1,                 /* a whole request head: *req is set */
    HTTP_INCOMPLETE = 0,           /* read more and call again */
    HTTP_ERR_SYNTAX = -1,          /* malformed line or framing: 400 */
    HTTP_ERR_TOO_LARGE = -2,       /* head over HTTP_MAX_HEAD, or more than
                                      HTTP_MAX_HEADERS headers: 400 */
    HTTP_ERR_VERSION = -3,         /* not HTTP/1.x: 400 */
    HTTP_ERR_LENGTH = -4,          /* bad or repeated Content-Length: 400 */
    HTTP_ERR_HOST = -5,            /* no, several or a malformed Host: 400 */
    HTTP_ERR_TRANSFER_CODING = -6, /* Transfer-Encoding: 501 */
} http_result;

typedef struct http_request {
    const char *method; /* both point into the caller's buffer */
    size_t method_len;
    const char *target;
    size_t target_len;
    int minor_version;      /* HTTP/1.<minor_version>, 0-9 */
    bool keep_alive;        /* the connection may carry another request */
    bool expect_continue;   /* HTTP/1.1 and Expect: 100-continue */
    int64_t content_length; /* body bytes after the head (0 when none) */
    size_t head_len;        /* bytes of the head, with any empty lines
                               before the request line */
} http_request;

/* The state between calls.  Private: use http_parser_init. */
typedef struct http_parser {
    size_t scanned;    /* bytes searched for line ends */
    size_t line_start; /* where the line being received starts */
    size_t head_start; /* the request line's offset; lines before it that
                          were empty are skipped */
    size_t method_len, target_off, target_len;
    int64_t content_length;
    int minor_version;
    int headers;
    int hosts;
    bool in_head; /* the request line has been taken */
    bool have_length, transfer_coding, conn_close, conn_keep_alive, expect;
} http_parser;

void http_parser_init(http_parser *p);

/* Parses what arrived of a request head in buf[0..len): HTTP_DONE with *req
 * set, HTTP_INCOMPLETE, or a negative http_result once the bytes can never
 * become a valid request.  len must not shrink between calls. */
http_result http_parse_request(http_parser *p, const char *buf, size_t len,
                               http_request *req);

/* The status code a server answers an error result with: 400 or 501. */
int http_error_status(http_result r);

#endif /* HTTP_PARSE_H */
