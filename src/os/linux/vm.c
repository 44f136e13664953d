/* vm.c: being written (core runtime). */
