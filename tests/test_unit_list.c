/*
 * test_unit_list.c - the intrusive list (src/list.h) on its own: a
 * zero-filled list is empty; push at either end, remove from anywhere and
 * pop keep the order of a reference array, with the links checked in both
 * directions after every operation; list_entry finds the enclosing object.
 */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "list.h"

typedef struct item {
    int id;
    list_node link;
    bool in;
} item;

/* The list holds exactly ref[0..n), in order, linked both ways. */
static void check_list(list *l, item **ref, int n)
{
    CHECK(list_valid(l));
    CHECK_EQ(list_empty(l), n == 0);
    CHECK_EQ(list_peek_nonempty(l), n != 0);
    int i = 0;
    for (list_node *x = l->head; x; x = x->next, i++) {
        CHECK(i < n);
        CHECK(list_entry(x, item, link) == ref[i]);
    }
    CHECK_EQ(i, n);
    CHECK(n == 0 ? l->tail == NULL : l->tail == &ref[n - 1]->link);
    for (int k = 0; k < n; k++)
        CHECK(list_contains(l, &ref[k]->link));
}

TEST(zero_filled_list_is_empty)
{
    list l;
    memset(&l, 0, sizeof l);
    CHECK(list_empty(&l));
    CHECK(!list_peek_nonempty(&l));
    CHECK(list_valid(&l));
    CHECK(list_pop_front(&l) == NULL);
    mote_waitq q = {0, 0}; /* mote.h's public spelling of the same list */
    CHECK(list_empty(&q));
}

TEST(push_pop_and_remove_keep_order)
{
    item it[4] = {{.id = 0}, {.id = 1}, {.id = 2}, {.id = 3}};
    list l = {0};
    list_push_back(&l, &it[1].link);
    list_push_front(&l, &it[0].link);
    list_push_back(&l, &it[2].link);
    list_push_back(&l, &it[3].link);
    item *ref[4] = {&it[0], &it[1], &it[2], &it[3]};
    check_list(&l, ref, 4);
    list_remove(&l, &it[2].link); /* middle */
    CHECK(it[2].link.next == NULL && it[2].link.prev == NULL);
    CHECK(!list_contains(&l, &it[2].link));
    item *ref2[3] = {&it[0], &it[1], &it[3]};
    check_list(&l, ref2, 3);
    list_remove(&l, &it[3].link); /* tail */
    check_list(&l, ref2, 2);
    CHECK(list_pop_front(&l) == &it[0].link); /* head */
    check_list(&l, ref2 + 1, 1);
    list_remove(&l, &it[1].link); /* the only one */
    check_list(&l, NULL, 0);
    list_push_front(&l, &it[2].link); /* reusable after removal */
    check_list(&l, (item *[]){&it[2]}, 1);
}

TEST(random_ops_match_a_reference_array)
{
    enum { N = 64 };
    static item it[N];
    item *ref[N];
    int n = 0;
    list l = {0};
    for (int i = 0; i < N; i++)
        it[i] = (item){.id = i};
    uint64_t s = 0x1234567;
    for (long step = 0; step < TEST_SCALE(100000, 10); step++) {
        item *x = &it[test_rnd(&s) % N];
        uint32_t op = (uint32_t)(test_rnd(&s) % 4);
        if (!x->in && op < 2) {
            if (op == 0) {
                list_push_back(&l, &x->link);
                ref[n] = x;
            } else {
                list_push_front(&l, &x->link);
                memmove(ref + 1, ref, (size_t)n * sizeof *ref);
                ref[0] = x;
            }
            n++;
            x->in = true;
        } else if (x->in && op == 2) {
            list_remove(&l, &x->link);
            int k = 0;
            while (ref[k] != x)
                k++;
            memmove(ref + k, ref + k + 1, (size_t)(n - k - 1) * sizeof *ref);
            n--;
            x->in = false;
        } else if (op == 3) {
            list_node *h = list_pop_front(&l);
            if (n == 0) {
                CHECK(h == NULL);
            } else {
                CHECK(h == &ref[0]->link);
                ref[0]->in = false;
                memmove(ref, ref + 1, (size_t)(n - 1) * sizeof *ref);
                n--;
            }
        }
        check_list(&l, ref, n);
    }
}

TEST_MAIN()
