/* config.c: being written (core runtime). */
