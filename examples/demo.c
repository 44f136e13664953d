/* demo.c: being written (core runtime). */
