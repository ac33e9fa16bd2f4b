/* state.c - the one definition of the I/O thread's state (state.h). A module
 * of its own so that every other module reaches it downwards. */
#include "daemon/server/state.h"

struct server srv;
