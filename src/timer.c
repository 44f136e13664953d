/* timer.c: being written (core runtime). */
