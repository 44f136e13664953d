/* task.c: being written (core runtime). */
