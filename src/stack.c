/* stack.c: being written (core runtime). */
