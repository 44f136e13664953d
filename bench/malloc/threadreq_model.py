#!/usr/bin/env python3
"""threadreq_model.py - what a per-class heap must keep resident for
bench/malloc/threadreq.c, against a heap whose sizes share memory.

Each request (a thread) allocates WORK blocks of 16..2048 B at once.  With a
page per size class per live thread whose touched part never shrinks (mote,
and every segregated allocator), a class keeps the most one thread ever held
of it, rounded up to the 4 KiB a page is carved by; the heap keeps the sum
of those over classes and threads.  A heap whose sizes share memory (glibc's
arenas) needs about the most one thread held in all sizes together.  Threads
take turns as threadreq's CONC threads do.  Live data only: no headers, no
kept objects, no fragmentation.

    threadreq_model.py [REQUESTS=3000] [CONC=2] [WORK=200] [SEEDS=5]
"""
import math
import random
import sys


def size_class(n):
    """mote's class of a request of n <= 2048 bytes (src/heap/internal.h)."""
    if n <= 128:
        return 16 * max(1, (n + 15) // 16)
    b = (n - 1).bit_length() - 1
    step = 1 << (b - 2)
    return ((n - 1) // step + 1) * step


def model(requests, conc, work, seed):
    rng = random.Random(seed)
    per_class = [dict() for _ in range(conc)]
    whole = [0] * conc
    for r in range(requests):
        k = r % conc
        held, total = {}, 0
        for _ in range(work):
            n = 16 + rng.randrange(2033)
            c = size_class(n)
            held[c] = held.get(c, 0) + c
            total += n
        for c, b in held.items():
            per_class[k][c] = max(per_class[k].get(c, 0), b)
        whole[k] = max(whole[k], total)
    segregated = sum(math.ceil(b / 4096) * 4096 for t in per_class for b in t.values())
    return segregated, sum(whole)


def main():
    a = [int(x) for x in sys.argv[1:]]
    requests, conc, work, seeds = (a + [3000, 2, 200, 5][len(a):])[:4]
    runs = [model(requests, conc, work, s) for s in range(seeds)]
    seg = sorted(r[0] for r in runs)[len(runs) // 2] / 1024
    shared = sorted(r[1] for r in runs)[len(runs) // 2] / 1024
    print("requests=%d conc=%d work=%d: per-class peaks %.0f KiB, peak of the sums %.0f KiB (%.2fx)"
          % (requests, conc, work, seg, shared, seg / shared))


if __name__ == "__main__":
    main()
