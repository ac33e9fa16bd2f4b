/* cost.c - kpi-agent's cost side: the energy meter read each sample, each
 * step's sequences from the CUPTI side (gpu.h), cost_attr's split of each
 * interval into the trace store and /metrics. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "agent/host/targets.h"
#include "agent/sinks/cost_store.h"
#include "agent/sinks/export_prom.h"
#include "agent/track/cost_attr.h"
#include "cost.h"
#include "energy.h"
#include "gpu.h"

#define COST_MAX_TARGETS 64
#define COST_ERR_NS 1000000000ull

/* A target whose steps were heard: its open steps close when it goes. */
struct cost_target {
	uint32_t pid;
	unsigned long long start_time;
};

struct agent_cost {
	struct energy_meter *em;
	struct cost_attr *attr;
	struct cost_store *store;
	struct agent_gpu *gpu;          /* where step lists come from; NULL: none */
	bool (*http_in_flight)(void *ctx);      /* agent_cost_watch_http */
	void *http_ctx;
	struct cost_target t[COST_MAX_TARGETS];
	int n_t;
	double price;
	struct cost_queue q;
	const char *domains[ENERGY_MAX_DOMAINS];
	uint64_t not_found, last_err;
	/* /metrics, read by the HTTP thread */
	pthread_mutex_t lock;
	uint64_t total_uj[ENERGY_MAX_DOMAINS];
	uint64_t t_first, t_last, idle_ns, idle_uj, attributed_uj;
	bool measured;
};

/* ---- step__seqs ---------------------------------------------------------- */

static void on_step_seqs(void *ctx, uint32_t pid, uint64_t step, uint32_t n_total, uint32_t first,
			 const struct kpi_step_seq *e, uint32_t n, uint64_t t_probe)
{
	cost_attr_step_seqs(((struct agent_cost *)ctx)->attr, pid, step, n_total, first, e, n, t_probe);
}

void agent_cost_listen(struct agent_cost *c, struct agent_gpu *g)
{
	if (!c)
		return;
	c->gpu = g;
	agent_gpu_listen_steps(g, (struct gpu_step_listener){ on_step_seqs, c });
}

/* The first step of a target, or the first sample that lists it. */
static void target_ensure(struct agent_cost *c, uint32_t pid)
{
	for (int i = 0; i < c->n_t; i++)
		if (c->t[i].pid == pid)
			return;
	if (c->n_t == COST_MAX_TARGETS)
		return;
	c->t[c->n_t++] = (struct cost_target){ .pid = pid,
						.start_time = target_start_time((pid_t)pid) };
}

static void targets_sync(struct agent_cost *c, const uint32_t *pids, int n, uint64_t now)
{
	for (int i = c->n_t - 1; i >= 0; i--) {
		bool listed = false;
		for (int k = 0; k < n && !listed; k++)
			listed = pids[k] == c->t[i].pid;
		if (listed && target_start_time((pid_t)c->t[i].pid) == c->t[i].start_time)
			continue;
		cost_attr_forget_pid(c->attr, c->t[i].pid, now);
		c->t[i] = c->t[--c->n_t];
	}
	for (int k = 0; k < n; k++)
		target_ensure(c, pids[k]);
}

/* ---- the sink ------------------------------------------------------------- */

static void on_step(void *ctx, const struct kpi_step_record *s)
{
	struct agent_cost *c = ctx;

	/* the split needs kpi-infer's step__seqs: a llama.cpp server's steps
	 * (agent/sources/llama.c) have no sequence list to split by */
	if (s->source)
		return;
	target_ensure(c, s->pid);
	cost_attr_step(c->attr, s->pid, s->step_id, s->t_start, s->t_end);
}

static void on_request(void *ctx, const struct kpi_request_record *r)
{
	struct agent_cost *c = ctx;
	int64_t end = r->t_done != KPI_NULL ? r->t_done : r->t_last != KPI_NULL ? r->t_last : r->t_admit;

	if (r->seq_id == KPI_NULL && r->source && !strncmp(r->source, "http", 4)) {
		/* traced from its HTTP exchange: no steps, its time in flight;
		 * where a rule inferred its split, from its start on the engine
		 * (its queue wait is the engine's work for others) */
		int64_t done = r->t_done != KPI_NULL ? r->t_done : r->t_arrive + (r->e2e != KPI_NULL ? r->e2e : 0);
		int64_t from = r->split_rule && r->t_sched != KPI_NULL ? r->t_sched : r->t_arrive;
		target_ensure(c, r->pid);
		int64_t stream = r->protocol && r->h2_stream != KPI_NULL ? r->h2_stream : 0;
		cost_attr_http_request(c->attr, r->pid, (uint64_t)r->t_arrive, from > 0 ? (uint64_t)from : 0, stream,
				       done > 0 ? (uint64_t)done : 0);
		return;
	}
	if (r->seq_id == KPI_NULL) /* rejected: never in a step, no row to key */
		return;
	cost_attr_request(c->attr, r->pid, (uint64_t)r->seq_id, end > 0 ? (uint64_t)end : 0);
}

void agent_cost_watch_http(struct agent_cost *c, bool (*in_flight)(void *ctx), void *ctx)
{
	if (!c)
		return;
	c->http_in_flight = in_flight;
	c->http_ctx = ctx;
}

struct kpi_sink agent_cost_sink(struct agent_cost *c)
{
	return (struct kpi_sink){ .ctx = c, .request = on_request, .step = on_step };
}

/* ---- /metrics ------------------------------------------------------------- */

static void prom_collect(void *ctx, FILE *out)
{
	struct agent_cost *c = ctx;
	char v[64];

	pthread_mutex_lock(&c->lock);
	if (energy_domains(c->em)) {
		fputs("# HELP kpi_energy_joules_total Energy the host's counters measured since the "
		      "agent started, by domain (RAPL zone, or gpuN from NVML; docs/cost.md).\n"
		      "# TYPE kpi_energy_joules_total counter\n", out);
		for (int i = 0; i < energy_domains(c->em); i++) {
			prom_format_double(v, sizeof(v), (double)c->total_uj[i] / 1e6);
			fprintf(out, "kpi_energy_joules_total{domain=\"%s\"} %s\n", c->domains[i], v);
		}
		prom_format_double(v, sizeof(v), (double)c->idle_uj / 1e6);
		fprintf(out, "# HELP kpi_energy_idle_joules_total Of that, the energy of time outside "
			"any batch step (and of steps not split per request), settled a sample late.\n"
			"# TYPE kpi_energy_idle_joules_total counter\nkpi_energy_idle_joules_total %s\n", v);
	}
	if (c->price >= 0) {
		prom_format_double(v, sizeof(v), c->price * (double)(c->t_last - c->t_first) / 3.6e12);
		fprintf(out, "# HELP kpi_cost_usd_total Machine cost since the agent started at its "
			"--price-per-hour (docs/cost.md).\n# TYPE kpi_cost_usd_total counter\n"
			"kpi_cost_usd_total %s\n", v);
		prom_format_double(v, sizeof(v), c->price * (double)c->idle_ns / 3.6e12);
		fprintf(out, "# HELP kpi_cost_idle_usd_total Of that, the cost of time outside any "
			"batch step (and of steps not split per request), settled a sample late.\n"
			"# TYPE kpi_cost_idle_usd_total counter\nkpi_cost_idle_usd_total %s\n", v);
	}
	pthread_mutex_unlock(&c->lock);
}

void agent_cost_metrics(struct agent_cost *c, struct prom_exporter *p)
{
	if (c && p)
		prom_add_collector(p, prom_collect, c);
}

/* ---- sample, settle, write ------------------------------------------------ */

static bool queue_interval(void *ctx, const struct cost_interval *i)
{
	struct agent_cost *c = ctx;

	cost_queue_interval(&c->q, i);
	pthread_mutex_lock(&c->lock);
	c->idle_ns += i->idle_ns + i->unattributed_ns;
	if (i->energy_uj >= 0) {
		c->idle_uj += (uint64_t)(i->idle_energy_uj + i->unattributed_energy_uj);
		c->attributed_uj += (uint64_t)(i->energy_uj - i->idle_energy_uj - i->unattributed_energy_uj);
	}
	pthread_mutex_unlock(&c->lock);
	return true;
}

static bool queue_req(void *ctx, const struct cost_req *r)
{
	cost_queue_req(&((struct agent_cost *)ctx)->q, r);
	return true;
}

static void sample_energy(struct agent_cost *c, uint64_t now, bool final)
{
	uint64_t reading[ENERGY_MAX_DOMAINS], delta[ENERGY_MAX_DOMAINS], sum = 0;
	int first[ENERGY_MAX_DOMAINS], n = energy_domains(c->em);

	if (n)
		sum = energy_read(c->em, reading, delta, first);
	pthread_mutex_lock(&c->lock);
	if (!c->t_first)
		c->t_first = now;
	c->t_last = now;
	for (int i = 0; i < n; i++) {
		c->total_uj[i] += delta[i];
		cost_queue_reading(&c->q, &(struct cost_reading){ now, i, reading[i],
								  first[i] ? -1 : (int64_t)delta[i] });
	}
	pthread_mutex_unlock(&c->lock);
	cost_attr_interval(c->attr, now, n ? (int64_t)sum : -1);
	cost_attr_hold(c->attr, c->http_in_flight && c->http_in_flight(c->http_ctx));
	cost_attr_settle(c->attr, now, final);
	cost_attr_drain(c->attr, now, queue_interval, queue_req, c);
}

void agent_cost_sample(struct agent_cost *c, uint64_t now, const uint32_t *pids, int n)
{
	if (!c)
		return;
	targets_sync(c, pids, n, now);
	sample_energy(c, now, false);
}

static void print_totals(struct agent_cost *c)
{
	struct cost_attr_stats st;
	char money[96] = "", joules[128] = "";

	cost_attr_stats(c->attr, &st);
	if (c->price >= 0)
		snprintf(money, sizeof(money), "; $%.6f (idle $%.6f)",
			 c->price * (double)(c->t_last - c->t_first) / 3.6e12,
			 c->price * (double)c->idle_ns / 3.6e12);
	if (energy_domains(c->em))
		snprintf(joules, sizeof(joules), "; %.6f J to requests, %.6f J idle",
			 (double)c->attributed_uj / 1e6, (double)c->idle_uj / 1e6);
	printf("cost: %.3f s sampled: %.3f s to %llu requests (%llu by their time in flight, %llu of "
	       "them from the inferred split's start, %llu too late for a share), %.3f s idle, %.3f s "
	       "in steps with no sequence list (%llu CUPTI ring records lost to a full ring)%s%s; "
	       "token share of batch steps, time in flight where there are none, idle apart "
	       "(docs/cost.md)\n", (double)(c->t_last - c->t_first) / 1e9,
	       (double)st.attributed_ns / 1e9, (unsigned long long)st.requests,
	       (unsigned long long)st.http_requests, (unsigned long long)st.http_inferred,
	       (unsigned long long)st.http_late,
	       (double)st.idle_ns / 1e9, (double)st.unattributed_ns / 1e9,
	       (unsigned long long)agent_gpu_ring_drops(c->gpu), joules, money);
}

void agent_cost_flush(struct agent_cost *c, uint64_t now, bool final)
{
	char err[512];

	if (!c)
		return;
	if (final)
		sample_energy(c, now, true);
	if (cost_store_flush(c->store, &c->q, c->domains, now, final, &c->not_found, err, sizeof(err)) &&
	    (final || now - c->last_err >= COST_ERR_NS)) {
		fprintf(stderr, "kpi-agent: %s\n", err);
		c->last_err = now;
	}
	if (final)
		print_totals(c);
}

/* ---- open / close --------------------------------------------------------- */

static int write_meta(struct agent_cost *c, char *err, size_t errlen)
{
	char price[32], pw[16], dw[16];
	const char *kv[12];
	int n = 0;

#define KV(k, v) (kv[2 * n] = (k), kv[2 * n + 1] = (v), n++)
	snprintf(pw, sizeof(pw), "%d", COST_PREFILL_WEIGHT);
	snprintf(dw, sizeof(dw), "%d", COST_DECODE_WEIGHT);
	KV("energy_source", energy_source(c->em));
	KV("cost_method", "token share of batch steps: each sample interval's time and energy to "
	   "the steps in it by their time in it, each step's to its requests by tokens times "
	   "cost_prefill_weight or cost_decode_weight; time outside steps is idle (docs/cost.md)");
	KV("cost_method_http", "time in flight: a target traced from its HTTP exchange (source http) "
	   "has no steps; each sample interval's busy time is the union of its requests' times in "
	   "flight, from arrival, or from the start on the engine where the inferred split gives one "
	   "(split_rule set: its queue wait not charged), each instant shared equally by the requests "
	   "in flight then (a step's instants left to the step), the rest idle (docs/cost.md)");
	KV("cost_prefill_weight", pw);
	KV("cost_decode_weight", dw);
	if (c->price >= 0) { /* no price: no key, rather than a made-up 0 */
		snprintf(price, sizeof(price), "%.10g", c->price);
		KV("price_per_hour", price);
	}
#undef KV
	return cost_store_meta(c->store, kv, n, err, errlen);
}

struct agent_cost *agent_cost_open(struct side_store *store, const char *powercap_root,
				   double price_per_hour, char *err, size_t errlen)
{
	struct agent_cost *c = calloc(1, sizeof(*c));
	char said[1024];

	if (!c)
		abort();
	pthread_mutex_init(&c->lock, NULL);
	c->price = price_per_hour;
	c->attr = cost_attr_new(COST_PREFILL_WEIGHT, COST_DECODE_WEIGHT);
	c->em = energy_open(powercap_root, said, sizeof(said));
	for (int i = 0; i < energy_domains(c->em); i++)
		c->domains[i] = energy_domain_name(c->em, i);
	c->store = cost_store_open(store, price_per_hour, err, errlen);
	if (!c->store || write_meta(c, err, errlen))
		goto fail;
	printf("%s\n", said);
	if (price_per_hour >= 0)
		printf("cost: $%.10g an hour, split by token share of the batch steps (by time in flight "
		       "for targets traced from their HTTP exchange), idle apart (docs/cost.md)\n",
		       price_per_hour);
	else
		printf("cost: no --price-per-hour: cost_usd stays NULL; machine time per request is "
		       "still attributed (requests.machine_ns)\n");
	return c;
fail:
	agent_cost_close(c);
	return NULL;
}

void agent_cost_close(struct agent_cost *c)
{
	if (!c)
		return;
	cost_store_close(c->store);
	cost_attr_free(c->attr);
	energy_close(c->em);
	cost_queue_free(&c->q);
	pthread_mutex_destroy(&c->lock);
	free(c);
}
