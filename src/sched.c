/* sched.c: being written (core runtime). */
