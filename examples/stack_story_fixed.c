/*
 * stack_story_fixed.c - stack_story.c after the fix: render_template's
 * scratch buffer shrinks from 2600 to 600 bytes (it flushes rows as it
 * goes).  Same program otherwise; `mote-stack worst` shows the deepest
 * path and the recommended stack_size drop.  See docs/mote-stack.md.
 */
#define STORY_FIXED 1
#include "stack_story.c"
