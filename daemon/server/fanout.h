/* fanout.h - the engine thread's events, on the I/O thread (fanout.c). */
#ifndef KPI_SERVER_FANOUT_H
#define KPI_SERVER_FANOUT_H

/* Reads the eventfd and hands every pending engine event to its request. */
void fanout_engine_events(void);

#endif
