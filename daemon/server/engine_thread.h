/* engine_thread.h - the one thread that owns the engine (engine.h is
 * single-threaded by contract). The I/O thread queues commands (submit,
 * finish); the engine thread applies them, runs engine_step while there is
 * work, and hands timestamped events back, waking the I/O thread through an
 * eventfd. */
#ifndef KPI_ENGINE_THREAD_H
#define KPI_ENGINE_THREAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "daemon/engine.h"

/* Beyond enum engine_event_kind: engine_submit refused a request; one layer
 * of a prefill-only request's KV is ready (mid-step, ahead of the step's own
 * events). */
#define ETH_EV_SUBMIT_FAILED 100
#define ETH_EV_KV_LAYER 101
/* eth_kv_reserve's answer: the blocks held for a request's incoming KV. */
#define ETH_EV_KV_HELD 102

struct eth_event {
	struct engine_event ev;
	uint64_t t_ns;     /* CLOCK_MONOTONIC: step start for SCHEDULED, step end otherwise */
	char *err;         /* ETH_EV_SUBMIT_FAILED: engine's message (owned) */
	struct engine_kv_out kv; /* ETH_EV_KV_LAYER (owned: data, iov and pin) */
	struct engine_kv_in *held; /* ETH_EV_KV_HELD (owned: released when not taken; NULL: refused, err) */
};

struct eth_cmd;

struct engine_thread {
	struct engine *e;
	int wake_fd;                 /* eventfd the I/O thread polls */
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct eth_cmd *cmds;        /* queued by the I/O thread */
	size_t ncmds, cmds_cap;
	struct eth_event *evs;       /* produced for the I/O thread */
	size_t nevs, evs_cap;
	struct engine_stats stats;   /* after the latest step */
	bool stop;
	bool joined;                 /* eth_stop returned: the engine takes no more commands */
};

/* Frees what an event owns (err, a KV layer's buffer, runs and pin). */
void eth_event_free(struct engine_thread *t, struct eth_event *ev);
/* Hands a KV layer's pinned blocks back to the engine (engine_kv_unpin on
 * its thread); after eth_stop only frees the pin. */
void eth_kv_unpin(struct engine_thread *t, struct engine_kv_pin *pin);

uint64_t eth_now_ns(void);

/* Starts the thread; returns 0 or -errno. */
int eth_start(struct engine_thread *t, struct engine *e, int wake_fd);
/* Stops and joins the thread (pending commands are dropped). */
void eth_stop(struct engine_thread *t);

/* Takes ownership of prompt (malloc'd). */
void eth_submit(struct engine_thread *t, uint64_t id, int32_t *prompt, int n_prompt,
		const struct sampling_params *sp);
/* engine_submit_prefill: the KV comes back as ETH_EV_KV_LAYER events. */
void eth_submit_prefill(struct engine_thread *t, uint64_t id, int32_t *prompt, int n_prompt,
			const struct sampling_params *sp);
/* engine_submit_decode; takes kv (its data freed whatever happens). */
void eth_submit_decode(struct engine_thread *t, uint64_t id, int32_t *prompt, int n_prompt,
		       const struct sampling_params *sp, const struct engine_kv_import *kv);
void eth_finish(struct engine_thread *t, uint64_t id, enum kpi_finish_reason reason);
/* engine_kv_reserve for request id: answered by an ETH_EV_KV_HELD event. */
void eth_kv_reserve(struct engine_thread *t, uint64_t id, int n_tokens);
/* engine_kv_release. */
void eth_kv_release(struct engine_thread *t, uint64_t id);

/* Moves the pending events into *out (caller frees with free(), and each
 * err); returns their count. */
size_t eth_take_events(struct engine_thread *t, struct eth_event **out);
void eth_stats(struct engine_thread *t, struct engine_stats *st);

#endif
