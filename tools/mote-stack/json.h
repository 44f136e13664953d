/*
 * json.h - the JSON mote-stack writes (a streaming writer that places the
 * commas) and the JSON it reads (the runtime's mote_stack_report: a small
 * tree parser).  Both are deliberately minimal: objects, arrays, strings,
 * numbers, true/false/null; strings are UTF-8 passed through, with control
 * characters and quotes escaped on output and \uXXXX decoded on input.
 */
#ifndef MOTE_STACK_JSON_H
#define MOTE_STACK_JSON_H

#include "util.h"

/* ---- writer ---- */
typedef struct jw {
    FILE *f;
    int depth;
    bool need_comma[64];
} jw;

void jw_init(jw *w, FILE *f);
void jw_obj(jw *w, const char *key); /* key NULL inside arrays / at top */
void jw_end_obj(jw *w);
void jw_arr(jw *w, const char *key);
void jw_end_arr(jw *w);
void jw_str(jw *w, const char *key, const char *val); /* NULL -> null */
void jw_int(jw *w, const char *key, long long val);
void jw_hex(jw *w, const char *key, unsigned long long val); /* "0x..." */
void jw_bool(jw *w, const char *key, bool val);
void jw_done(jw *w); /* final newline */

/* ---- reader ---- */
enum { JV_NULL, JV_BOOL, JV_NUM, JV_STR, JV_ARR, JV_OBJ };
typedef struct jv {
    int type;
    double num;
    bool b;
    char *str;         /* JV_STR */
    struct jv **items; /* JV_ARR values, JV_OBJ values */
    char **keys;       /* JV_OBJ keys */
    size_t n;
} jv;

/* NULL with a message in err (with the byte offset) when text is no JSON. */
jv *jv_parse(const char *text, size_t len, char *err, size_t errlen);
const jv *jv_get(const jv *obj, const char *key); /* NULL when absent */
void jv_free(jv *v);

#endif
