/* metrics.c: being written (core runtime). */
