/* errors.c: being written (core runtime). */
