/* overflow.c: being written (core runtime). */
