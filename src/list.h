/*
 * list.h - the one intrusive doubly linked list in mote: wait queues, a
 * worker's started tasks and trim candidates, the allocator's page queues
 * and segment lists all use it.  A list is a head and a tail pointer (so a
 * zero-filled list is empty and public structs can embed one: it is
 * mote.h's struct mote_list); nodes live inside the objects they link and
 * may leave from the middle in O(1).
 *
 * Not thread-safe: the owner of the list (a lock, or a single thread)
 * serialises every change.  The head is stored with a relaxed atomic store so
 * that a reader may peek at "empty or not" without the lock (select does).
 */
#ifndef MOTE_LIST_H
#define MOTE_LIST_H

#include <stdbool.h>
#include <stddef.h>

#include "atomic.h"
#include "debug.h"
#include "mote.h"

typedef struct mote_list list;
typedef struct mote_list_node list_node;
struct mote_list_node {
    list_node *next, *prev;
};

#define list_entry(node, type, member) \
    ((type *)(void *)((char *)(node)-offsetof(type, member)))

static inline bool list_empty(const list *l) { return l->head == NULL; }

/* Without the owner's lock: a hint only. */
static inline bool list_peek_nonempty(list *l) { return LOAD(&l->head, RELAXED) != NULL; }

static inline void list_push_back(list *l, list_node *n)
{
    n->next = NULL;
    n->prev = l->tail;
    if (l->tail)
        l->tail->next = n;
    else
        STORE(&l->head, n, RELAXED);
    l->tail = n;
}

static inline void list_push_front(list *l, list_node *n)
{
    n->prev = NULL;
    n->next = l->head;
    if (l->head)
        l->head->prev = n;
    else
        l->tail = n;
    STORE(&l->head, n, RELAXED);
}

static inline void list_remove(list *l, list_node *n)
{
    mote__assert(n->prev ? n->prev->next == n : l->head == n);
    mote__assert(n->next ? n->next->prev == n : l->tail == n);
    if (n->prev)
        n->prev->next = n->next;
    else
        STORE(&l->head, n->next, RELAXED);
    if (n->next)
        n->next->prev = n->prev;
    else
        l->tail = n->prev;
    n->next = n->prev = NULL;
}

static inline list_node *list_pop_front(list *l)
{
    list_node *n = l->head;
    if (n)
        list_remove(l, n);
    return n;
}

/* Whether n is in l: walks the list (debug checks only). */
static inline bool list_contains(const list *l, const list_node *n)
{
    for (const list_node *x = l->head; x; x = x->next)
        if (x == n)
            return true;
    return false;
}

/* The whole list is well formed: links agree both ways. */
static inline bool list_valid(const list *l)
{
    const list_node *prev = NULL;
    for (const list_node *x = l->head; x; prev = x, x = x->next)
        if (x->prev != prev)
            return false;
    return l->tail == prev;
}

#endif /* MOTE_LIST_H */
