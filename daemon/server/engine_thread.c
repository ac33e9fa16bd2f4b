/* engine_thread.c - the engine's thread: command queue in, events out. */
#include "daemon/server/engine_thread.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { CMD_SUBMIT, CMD_FINISH, CMD_SUBMIT_PREFILL, CMD_SUBMIT_DECODE, CMD_KV_UNPIN,
       CMD_KV_RESERVE, CMD_KV_RELEASE };

struct eth_cmd {
	int kind;
	uint64_t id;
	int32_t *prompt;
	int n_prompt;
	struct sampling_params sp;
	enum kpi_finish_reason reason;
	struct engine_kv_import kv;  /* CMD_SUBMIT_DECODE */
	struct engine_kv_pin *pin;   /* CMD_KV_UNPIN */
};

uint64_t eth_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return p;
	size_t c = *cap ? *cap : 64;
	while (c < need)
		c *= 2;
	void *q = realloc(p, c * elem);
	if (!q) {
		fprintf(stderr, "kpi-infer: out of memory in the engine queue\n");
		abort();
	}
	*cap = c;
	return q;
}

static void push_cmd(struct engine_thread *t, const struct eth_cmd *c)
{
	pthread_mutex_lock(&t->mu);
	t->cmds = grow(t->cmds, &t->cmds_cap, t->ncmds + 1, sizeof(*t->cmds));
	t->cmds[t->ncmds++] = *c;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
}

void eth_submit(struct engine_thread *t, uint64_t id, int32_t *prompt, int n_prompt,
		const struct sampling_params *sp)
{
	struct eth_cmd c = { .kind = CMD_SUBMIT, .id = id, .prompt = prompt,
			     .n_prompt = n_prompt, .sp = *sp };
	push_cmd(t, &c);
}

void eth_submit_prefill(struct engine_thread *t, uint64_t id, int32_t *prompt, int n_prompt,
			const struct sampling_params *sp)
{
	struct eth_cmd c = { .kind = CMD_SUBMIT_PREFILL, .id = id, .prompt = prompt,
			     .n_prompt = n_prompt, .sp = *sp };
	push_cmd(t, &c);
}

void eth_submit_decode(struct engine_thread *t, uint64_t id, int32_t *prompt, int n_prompt,
		       const struct sampling_params *sp, const struct engine_kv_import *kv)
{
	struct eth_cmd c = { .kind = CMD_SUBMIT_DECODE, .id = id, .prompt = prompt,
			     .n_prompt = n_prompt, .sp = *sp, .kv = *kv };
	push_cmd(t, &c);
}

void eth_kv_unpin(struct engine_thread *t, struct engine_kv_pin *pin)
{
	if (!pin)
		return;
	if (t->joined) {
		free(pin); /* the pool goes with the engine */
		return;
	}
	struct eth_cmd c = { .kind = CMD_KV_UNPIN, .pin = pin };
	push_cmd(t, &c);
}

void eth_kv_reserve(struct engine_thread *t, uint64_t id, int n_tokens)
{
	struct eth_cmd c = { .kind = CMD_KV_RESERVE, .id = id, .n_prompt = n_tokens };
	push_cmd(t, &c);
}

void eth_kv_release(struct engine_thread *t, uint64_t id)
{
	if (t->joined)
		return;
	struct eth_cmd c = { .kind = CMD_KV_RELEASE, .id = id };
	push_cmd(t, &c);
}

void eth_event_free(struct engine_thread *t, struct eth_event *ev)
{
	if (ev->held) { /* nobody took the blocks */
		eth_kv_release(t, ev->held->id);
		free(ev->held);
		ev->held = NULL;
	}
	free(ev->err);
	engine_kv_buffer_free(ev->kv.data);
	free(ev->kv.iov);
	free(ev->kv.digests);
	eth_kv_unpin(t, ev->kv.pin);
	ev->err = NULL;
	ev->kv.data = NULL;
	ev->kv.iov = NULL;
	ev->kv.digests = NULL;
	ev->kv.pin = NULL;
}

/* The engine's kv_layer callback, on the engine thread mid-step: the layer
 * goes to the I/O thread at once, so it is on the wire while the step's
 * remaining layers compute. */
static void eth_kv_layer(void *ctx, struct engine_kv_out *out)
{
	struct engine_thread *t = ctx;
	pthread_mutex_lock(&t->mu);
	t->evs = grow(t->evs, &t->evs_cap, t->nevs + 1, sizeof(*t->evs));
	t->evs[t->nevs++] = (struct eth_event){
		.ev = { .kind = ETH_EV_KV_LAYER, .id = out->id },
		.t_ns = eth_now_ns(), .kv = *out,
	};
	pthread_mutex_unlock(&t->mu);
	uint64_t one = 1;
	ssize_t w = write(t->wake_fd, &one, sizeof(one));
	(void)w;
}

void eth_finish(struct engine_thread *t, uint64_t id, enum kpi_finish_reason reason)
{
	struct eth_cmd c = { .kind = CMD_FINISH, .id = id, .reason = reason };
	push_cmd(t, &c);
}

size_t eth_take_events(struct engine_thread *t, struct eth_event **out)
{
	pthread_mutex_lock(&t->mu);
	size_t n = t->nevs;
	*out = t->evs;
	t->evs = NULL;
	t->nevs = t->evs_cap = 0;
	pthread_mutex_unlock(&t->mu);
	return n;
}

void eth_stats(struct engine_thread *t, struct engine_stats *st)
{
	pthread_mutex_lock(&t->mu);
	*st = t->stats;
	pthread_mutex_unlock(&t->mu);
}

/* Applies the I/O thread's commands in order; a refused submit becomes an
 * ETH_EV_SUBMIT_FAILED event in *fails, a reservation an ETH_EV_KV_HELD one.
 * Returns how many. */
static size_t apply_cmds(struct engine_thread *t, struct eth_cmd *cmds, size_t n,
			 struct eth_event **fails, size_t *fails_cap)
{
	size_t nfails = 0;
	for (size_t i = 0; i < n; i++) {
		struct eth_cmd *c = &cmds[i];
		if (c->kind == CMD_FINISH) {
			engine_finish(t->e, c->id, c->reason);
			continue;
		}
		if (c->kind == CMD_KV_UNPIN) {
			engine_kv_unpin(t->e, c->pin);
			continue;
		}
		if (c->kind == CMD_KV_RELEASE) {
			engine_kv_release(t->e, c->id);
			continue;
		}
		if (c->kind == CMD_KV_RESERVE) {
			char why[256] = "";
			struct engine_kv_in *in = engine_kv_reserve(t->e, c->id, c->n_prompt, why,
								     sizeof(why));
			*fails = grow(*fails, fails_cap, nfails + 1, sizeof(**fails));
			(*fails)[nfails++] = (struct eth_event){
				.ev = { .kind = ETH_EV_KV_HELD, .id = c->id }, .t_ns = eth_now_ns(),
				.held = in, .err = in ? NULL : strdup(why),
			};
			continue;
		}
		char err[256] = "";
		int rc;
		if (c->kind == CMD_SUBMIT_PREFILL) {
			rc = engine_submit_prefill(t->e, c->id, c->prompt, c->n_prompt, &c->sp, err,
						   sizeof(err));
		} else if (c->kind == CMD_SUBMIT_DECODE) {
			rc = engine_submit_decode(t->e, c->id, c->prompt, c->n_prompt, &c->sp, &c->kv,
						  err, sizeof(err));
			engine_kv_buffer_free(c->kv.data); /* NULL when the engine took it */
		} else {
			rc = engine_submit(t->e, c->id, c->prompt, c->n_prompt, &c->sp, err, sizeof(err));
		}
		free(c->prompt);
		if (rc < 0) {
			*fails = grow(*fails, fails_cap, nfails + 1, sizeof(**fails));
			(*fails)[nfails] = (struct eth_event){
				.ev = { .kind = ETH_EV_SUBMIT_FAILED, .id = c->id },
				.t_ns = eth_now_ns(),
				.err = strdup(err[0] ? err : strerror(-rc)),
			};
			nfails++;
		}
	}
	return nfails;
}

static void *engine_main(void *arg)
{
	struct engine_thread *t = arg;
	int max = engine_events_max(t->e);
	struct engine_event *evs = calloc((size_t)max + 1, sizeof(*evs));
	struct eth_cmd *cmds = NULL;
	size_t cmds_cap = 0;
	struct eth_event *fails = NULL;
	size_t nfails = 0, fails_cap = 0;
	if (!evs) {
		fprintf(stderr, "kpi-infer: out of memory for %d engine events\n", max);
		abort();
	}

	pthread_mutex_lock(&t->mu);
	for (;;) {
		while (!t->stop && t->ncmds == 0 && !engine_has_work(t->e))
			pthread_cond_wait(&t->cv, &t->mu);
		if (t->stop)
			break;
		/* swap the queue out so the I/O thread never waits on a step */
		struct eth_cmd *mine = t->cmds;
		size_t n = t->ncmds, cap = t->cmds_cap;
		t->cmds = cmds;
		t->cmds_cap = cmds_cap;
		t->ncmds = 0;
		cmds = mine;
		cmds_cap = cap;
		pthread_mutex_unlock(&t->mu);

		nfails = apply_cmds(t, cmds, n, &fails, &fails_cap);

		int nev = 0;
		uint64_t t0 = eth_now_ns(), t1 = t0;
		if (engine_has_work(t->e)) {
			nev = engine_step(t->e, evs, max);
			t1 = eth_now_ns();
		}
		struct engine_stats st;
		engine_stats(t->e, &st);

		pthread_mutex_lock(&t->mu);
		t->evs = grow(t->evs, &t->evs_cap, t->nevs + (size_t)nev + nfails, sizeof(*t->evs));
		for (size_t i = 0; i < nfails; i++)
			t->evs[t->nevs++] = fails[i];
		for (int i = 0; i < nev; i++)
			t->evs[t->nevs++] = (struct eth_event){
				.ev = evs[i],
				.t_ns = evs[i].kind == ENGINE_EV_SCHEDULED ? t0 : t1,
			};
		t->stats = st;
		if (nev || nfails) {
			uint64_t one = 1;
			ssize_t w = write(t->wake_fd, &one, sizeof(one));
			(void)w; /* an eventfd at its limit is already readable */
		}
	}
	pthread_mutex_unlock(&t->mu);
	free(evs);
	free(cmds);
	free(fails);
	return NULL;
}

int eth_start(struct engine_thread *t, struct engine *e, int wake_fd)
{
	memset(t, 0, sizeof(*t));
	t->e = e;
	t->wake_fd = wake_fd;
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cv, NULL);
	engine_stats(e, &t->stats);
	engine_set_kv_layer(e, eth_kv_layer, t);
	int rc = pthread_create(&t->th, NULL, engine_main, t);
	return rc ? -rc : 0;
}

void eth_stop(struct engine_thread *t)
{
	pthread_mutex_lock(&t->mu);
	t->stop = true;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
	pthread_join(t->th, NULL);
	t->joined = true;
	for (size_t i = 0; i < t->ncmds; i++) {
		free(t->cmds[i].prompt);
		engine_kv_buffer_free(t->cmds[i].kv.data);
		free(t->cmds[i].pin);
	}
	free(t->cmds);
	for (size_t i = 0; i < t->nevs; i++)
		eth_event_free(t, &t->evs[i]);
	free(t->evs);
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->cv);
}
