/* export_prom.c - keeps the agent's Prometheus series (one set per traced
 * process) and renders them in the text exposition format.  Sink callbacks
 * run on the agent's main thread, rendering on the HTTP thread: one mutex,
 * held for an update or for one rendering (a few microseconds). */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uthash.h>
#include "abi/kpi_reasons.h"
#include "export_ident.h"
#include "export_prom.h"
#include "prom_native.h"
#include "prom_proto.h"

#define PROM_MAX_TARGETS   64
#define PROM_MAX_ERRTYPES  8     /* distinct error_type values per process */
#define PROM_MAX_OUTCOMES  24    /* distinct (status, finish reason) per process */
#define PROM_EVICT_NS      (300ull * 1000000000ull)  /* forget a quiet, gone process */
#define PROM_MAX_COLLECTORS 4
#define PROM_MAX_INTEG     16    /* process names with an integration-overhead histogram */
/* The kpi_request_model label: what requests named, a client's choice, so
 * bounded per process; the rest count under "other", a request that named
 * none has no label. */
#define PROM_MODEL_OTHER   PROM_REQUEST_MODELS
#define PROM_MODEL_NONE    (PROM_REQUEST_MODELS + 1)
#define PROM_MODEL_SLOTS   (PROM_REQUEST_MODELS + 2)

/* ---- buckets ----------------------------------------------------------------------- */

/* OpenTelemetry GenAI semantic conventions (gen-ai-metrics.md), the
 * ExplicitBucketBoundaries they recommend for each server metric. */
static struct prom_buckets b_ttft = {
	.name = "gen_ai_server_time_to_first_token_seconds",
	.help = "Time to generate the first token for successful responses "
	"(gen_ai.server.time_to_first_token; first byte read to first token written).",
	.n = 16, .le = { 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
	      7.5, 10.0 },
};
/* The first answer event, reasoning not counted (docs/agent.md, Reasoning): TTFT's bounds. */
static struct prom_buckets b_ttfo = {
	.name = "kpi_time_to_first_output_seconds",
	.help = "Time to the first answer event of a streamed response, the reasoning before it "
	"not counted (first byte read to the write of the first content, text or tool-call "
	"arguments that is not reasoning); servers traced from their HTTP exchange.",
	.n = 16, .le = { 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
	      7.5, 10.0 },
};
static struct prom_buckets b_reasoning = {
	.name = "kpi_reasoning_seconds",
	.help = "The first reasoning event to the first answer event of a streamed response: how long "
	"the model thought before it answered.",
	.n = 14, .le = { 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96,
	      81.92 },
};
static struct prom_buckets b_tpot = {
	.name = "gen_ai_server_time_per_output_token_seconds",
	.help = "Time per output token after the first, for successful responses "
	"(gen_ai.server.time_per_output_token).",
	.n = 13, .le = { 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5 },
};
static struct prom_buckets b_duration = {
	.name = "gen_ai_server_request_duration_seconds",
	.help = "Server-side end-to-end request duration, first byte read to last byte "
	"written (gen_ai.server.request.duration).",
	.n = 14, .le = { 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96,
	      81.92 },
};
/* Phases span 10 µs (loopback network) to a minute (a deep queue): the
 * conventions say nothing about them, so a 1-2.5-5 ladder. */
#define PHASE_LE .n = 18, .le = { 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, \
		       0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 10.0, 60.0 }
enum { PH_NET_IN, PH_QUEUE, PH_PREFILL, PH_SERVER_WAIT, PH_DECODE, PH_NET_OUT,
       PH_ROUTER, PH_KV_TRANSFER, PH_DECODE_QUEUE, N_PHASES };
static struct prom_buckets b_phase[N_PHASES] = {
	{ .name = "kpi_request_network_in_seconds",
	  .help = "Request phase net_in: first byte read to admitted (read, parse, tokenize).", PHASE_LE },
	{ .name = "kpi_request_queue_seconds",
	  .help = "Request phase queue: admitted to scheduled into its first batch step (kpi_source "
	  "http: inferred from the server's stream timing, from the request read).", PHASE_LE },
	{ .name = "kpi_request_prefill_seconds",
	  .help = "Request phase prefill: scheduled to first token generated (kpi_source http: "
	  "inferred from the server's stream timing).", PHASE_LE },
	{ .name = "kpi_request_server_wait_seconds",
	  .help = "Request phase server_wait (kpi_source http): request read to the first content "
	  "written, queue and prefill together, where no rule could tell them apart.", PHASE_LE },
	{ .name = "kpi_request_decode_seconds",
	  .help = "Request phase decode: first token to last token generated.", PHASE_LE },
	{ .name = "kpi_request_network_out_seconds",
	  .help = "Request phase net_out: last token generated to last byte written.", PHASE_LE },
	/* disaggregated prefill and decode (docs/disaggregation.md): the
	 * router's and the decode worker's requests, from their joined rows */
	{ .name = "kpi_request_router_seconds",
	  .help = "Request phase router (disaggregated): the router's decision to the decode worker's "
	  "admission.", PHASE_LE },
	{ .name = "kpi_kv_transfer_seconds",
	  .help = "Request phase kv_transfer (disaggregated): the prefill worker's first token to the "
	  "decode worker holding the whole KV, checked: the part of the KV transfer the request "
	  "waited for.", PHASE_LE },
	{ .name = "kpi_request_decode_queue_seconds",
	  .help = "Request phase decode_queue (disaggregated): the KV received to a running slot on "
	  "the decode worker.", PHASE_LE },
};

/* Labelled by the top-level process's name, not its pid: a gateway that
 * restarts keeps its series (schema/008_hops.sql, integration). */
static struct prom_buckets b_integ = {
	.name = "kpi_integration_overhead_seconds",
	.help = "What the client of a top-level request waited beyond its model hop's server-side "
	"end-to-end time (gateway, guardrail, retrieval and the way back), by the process that "
	"served the top-level request.", PHASE_LE,
};

/* Agent tasks (docs/agent.md, Tasks) and what an escalation added (Cascades),
 * by the agent's or the gateway's process name. */
static struct prom_buckets b_task = {
	.name = "kpi_agent_task_duration_seconds",
	.help = "Duration of an agent task (an inbound request that made two model calls, or a model "
	"and a tool call; a command-line agent's calls under one trace or conversation id or "
	"between idle gaps), by the agent's process.",
	.n = 14, .le = { 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96,
	      81.92 },
};
static struct prom_buckets b_escalation = {
	.name = "kpi_cascade_escalation_added_seconds",
	.help = "What an escalation added: the second model's answer's end minus the first's, by the "
	"process that escalated.", PHASE_LE,
};

static struct prom_buckets *all_buckets[] = {
	&b_ttft, &b_ttfo, &b_reasoning, &b_task, &b_escalation, &b_tpot, &b_duration,
	&b_phase[0], &b_phase[1], &b_phase[2], &b_phase[3], &b_phase[4], &b_phase[5], &b_phase[6],
	&b_phase[7], &b_phase[8], &b_integ,
};

static void buckets_init(void)
{
	for (size_t i = 0; i < sizeof(all_buckets) / sizeof(all_buckets[0]); i++)
		for (int k = 0; k < all_buckets[i]->n; k++)
			all_buckets[i]->le_ns[k] = llround(all_buckets[i]->le[k] * 1e9);
}

const struct prom_buckets *prom_buckets_of(const char *name)
{
	buckets_init();
	for (size_t i = 0; i < sizeof(all_buckets) / sizeof(all_buckets[0]); i++)
		if (!strcmp(all_buckets[i]->name, name))
			return all_buckets[i];
	return NULL;
}

int prom_bucket_index(const struct prom_buckets *b, int64_t v_ns)
{
	int lo = 0, hi = b->n;      /* first bound >= v */
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (b->le_ns[mid] >= v_ns)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* ---- series -------------------------------------------------------------------------- */

struct hist {
	uint64_t counts[PROM_MAX_BOUNDS + 1];   /* per bucket, not cumulative */
	uint64_t count;
	int64_t sum_ns;
	struct prom_native nat;                 /* the same values, native buckets */
};

struct outcome {
	int status;
	char finish[16];
	char error[16];
	uint64_t n;
};

/* The request series of one process, one gen_ai.operation.name (index:
 * enum kpi_operation; KPI_OP_NONE holds requests refused before admission,
 * rendered without the label) and one kpi_request_model (a slot of the
 * process's req_model, PROM_MODEL_OTHER or PROM_MODEL_NONE). */
struct opstats {
	bool used;                      /* a request was counted: render the series */
	struct hist ttft, tpot, phase[N_PHASES];
	struct hist ttfo, reasoning;
	uint64_t reasoning_events, answer_events;
	struct { char error[16]; struct hist h; } dur[PROM_MAX_ERRTYPES];
	int n_dur;
	struct outcome out[PROM_MAX_OUTCOMES];
	int n_out;
	uint64_t tokens_in, tokens_out;
	/* requests with the engine's split (http+libllama): their prompt as the
	 * engine computed it, and the part its KV cache already held */
	uint64_t prompt_engine, prompt_cached;
	uint64_t kv_bytes;              /* KV moved by its disaggregated requests' transfers */
};

/* Behind whom the daemon's threads waited for a CPU (the `behind` label). */
enum { RUNQ_BEHIND_OWN, RUNQ_BEHIND_IDLE, RUNQ_BEHIND_OTHER };
static const char *const runq_behind[] = { "own_threads", "idle_cpu", "other_processes" };

struct target {
	uint32_t pid;
	struct export_ident id;
	char source[16];                /* of its last request: usdt, http (the kpi_source label) */
	uint64_t last_seen;             /* CLOCK_MONOTONIC ns of the last record */
	/* the first model a request named: gen_ai_request_model of a process with
	 * no model file of its own (one value for its life, not the last client's) */
	char first_model[sizeof(((struct kpi_request_record *)0)->model)];
	char req_model[PROM_REQUEST_MODELS][sizeof(((struct kpi_request_record *)0)->model)];
	int n_req_model;
	struct opstats *op[KPI_OP__COUNT][PROM_MODEL_SLOTS];    /* made when first counted */
	uint64_t preemptions;
	uint64_t runq_ns[3];            /* by RUNQ_BEHIND_* */
	bool sampled;
	int queue_depth, running;
	int64_t kv_used, kv_free;
	double kv_usage;
};

struct prom_exporter {
	pthread_mutex_t lock;
	struct target t[PROM_MAX_TARGETS];
	int n;
	uint64_t losses[KPI_LOSS__COUNT];      /* agent-wide running totals */
	uint64_t overflow;
	struct { void (*fn)(void *, FILE *); void *ctx; } coll[PROM_MAX_COLLECTORS];
	int n_coll;
	struct { char comm[16]; struct hist h; } integ[PROM_MAX_INTEG];
	int n_integ;
	/* agent tasks and escalations, by process name */
	struct agent_proc {
		char comm[16];
		struct hist task, escalation;
		uint64_t tasks[4][2];           /* by rule and outcome (failure, success) */
		uint64_t calls[2], retries, escalations;    /* calls: model, tool */
	} agents[PROM_MAX_INTEG];
	int n_agents;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void hist_add(struct hist *h, const struct prom_buckets *b, int64_t v_ns)
{
	if (v_ns == KPI_NULL || v_ns < 0)
		return;
	h->counts[prom_bucket_index(b, v_ns)]++;
	h->count++;
	h->sum_ns += v_ns;
	prom_native_add(&h->nat, v_ns);
}

static void opstats_free(struct opstats *S)
{
	if (!S)
		return;
	prom_native_free(&S->ttft.nat);
	prom_native_free(&S->tpot.nat);
	prom_native_free(&S->ttfo.nat);
	prom_native_free(&S->reasoning.nat);
	for (int k = 0; k < N_PHASES; k++)
		prom_native_free(&S->phase[k].nat);
	for (int k = 0; k < PROM_MAX_ERRTYPES; k++)
		prom_native_free(&S->dur[k].h.nat);
	free(S);
}

static void target_clear(struct target *t)
{
	for (int op = 0; op < KPI_OP__COUNT; op++)
		for (int m = 0; m < PROM_MODEL_SLOTS; m++)
			opstats_free(t->op[op][m]);
	memset(t, 0, sizeof(*t));
}

/* The target entry of pid; a new one evicts the least recently seen. */
static struct target *target_of(struct prom_exporter *p, uint32_t pid)
{
	struct target *t;
	int victim = 0;

	for (int i = 0; i < p->n; i++)
		if (p->t[i].pid == pid)
			return &p->t[i];
	if (p->n < PROM_MAX_TARGETS) {
		t = &p->t[p->n++];
	} else {
		for (int i = 1; i < p->n; i++)
			if (p->t[i].last_seen < p->t[victim].last_seen)
				victim = i;
		t = &p->t[victim];
	}
	target_clear(t);
	t->pid = pid;
	t->kv_usage = -1;
	return t;
}

/* error.type of the conventions: empty for a success. */
static void error_type(const struct kpi_request_record *r, char *out, size_t len)
{
	out[0] = 0;
	if (r->http_status != KPI_NULL && r->http_status >= 400 && r->http_status <= 999)
		snprintf(out, len, "%d", (int)r->http_status);
	else if (r->finish_reason && !strcmp(r->finish_reason, "error"))
		snprintf(out, len, "error");
	else if (r->finish_reason && !strcmp(r->finish_reason, "cancelled"))
		snprintf(out, len, "cancelled");
}

/* enum kpi_operation of a record's gen_ai.operation.name; KPI_OP_NONE if absent. */
static int op_index(const char *operation)
{
	for (int k = 1; operation && k < KPI_OP__COUNT; k++)
		if (!strcmp(operation, kpi_operation_name(k)))
			return k;
	return KPI_OP_NONE;
}

/* The kpi_request_model slot of a request that named model. */
static int model_slot(struct target *t, const char *model)
{
	int m;

	if (!model[0])
		return PROM_MODEL_NONE;
	for (m = 0; m < t->n_req_model && strcmp(t->req_model[m], model); m++)
		;
	if (m == t->n_req_model && m < PROM_REQUEST_MODELS)
		snprintf(t->req_model[t->n_req_model++], sizeof(t->req_model[0]), "%s", model);
	return m < t->n_req_model ? m : PROM_MODEL_OTHER;
}

/* One top-level request's integration overhead, under its process's name. */
static void on_integration(void *ctx, const struct kpi_integration_record *r)
{
	struct prom_exporter *p = ctx;
	const char *comm = r->comm[0] ? r->comm : "unknown";
	int i;

	pthread_mutex_lock(&p->lock);
	for (i = 0; i < p->n_integ && strcmp(p->integ[i].comm, comm); i++)
		;
	if (i == p->n_integ && i < PROM_MAX_INTEG)
		snprintf(p->integ[p->n_integ++].comm, sizeof(p->integ[0].comm), "%s", comm);
	if (i < p->n_integ)
		hist_add(&p->integ[i].h, &b_integ, r->overhead);
	else
		p->overflow++;
	pthread_mutex_unlock(&p->lock);
}

static const char *const task_rules[4] = { "inbound", "traceparent", "conversation", "idle_gap" };

/* The agent series of a process name (NULL when PROM_MAX_INTEG are taken). */
static struct agent_proc *agent_of(struct prom_exporter *p, const char *comm)
{
	int i;
	comm = comm[0] ? comm : "unknown";
	for (i = 0; i < p->n_agents && strcmp(p->agents[i].comm, comm); i++)
		;
	if (i == p->n_agents && i < PROM_MAX_INTEG)
		snprintf(p->agents[p->n_agents++].comm, sizeof(p->agents[0].comm), "%s", comm);
	if (i < p->n_agents)
		return &p->agents[i];
	p->overflow++;
	return NULL;
}

static void on_task(void *ctx, const struct kpi_task_record *k)
{
	struct prom_exporter *p = ctx;

	pthread_mutex_lock(&p->lock);
	struct agent_proc *a = agent_of(p, k->comm);
	for (int i = 0; a && i < 4; i++)
		if (k->rule && !strcmp(k->rule, task_rules[i])) {
			a->tasks[i][k->success]++;
			hist_add(&a->task, &b_task, k->duration);
		}
	pthread_mutex_unlock(&p->lock);
}

/* A call of an agent's task, or an escalation. */
static void on_exchange_out(void *ctx, const struct kpi_request_record *r)
{
	struct prom_exporter *p = ctx;

	if (!r->task_id[0] && !r->escalated_from[0])
		return;
	pthread_mutex_lock(&p->lock);
	struct agent_proc *a = agent_of(p, r->comm);
	if (a) {
		a->calls[r->call_kind && !strcmp(r->call_kind, "tool")]++;
		a->retries += r->retry == 1;
		if (r->escalated_from[0]) {
			a->escalations++;
			hist_add(&a->escalation, &b_escalation, r->escalation_added);
		}
	}
	pthread_mutex_unlock(&p->lock);
}

static void on_request(void *ctx, const struct kpi_request_record *r)
{
	struct prom_exporter *p = ctx;
	const struct export_ident *id = export_ident_get(r->pid);  /* /proc: outside the lock */
	char err[16];
	int status = r->http_status == KPI_NULL ? 0 : (int)r->http_status;
	const char *fin = r->finish_reason ? r->finish_reason : "";

	error_type(r, err, sizeof(err));
	pthread_mutex_lock(&p->lock);
	struct target *tg = target_of(p, r->pid);
	tg->id = *id;
	/* a server seen only on the wire: the first model its requests asked for */
	if (!tg->first_model[0])
		snprintf(tg->first_model, sizeof(tg->first_model), "%s", r->model);
	snprintf(tg->id.model, sizeof(tg->id.model), "%s", export_ident_model(id, tg->first_model));
	snprintf(tg->source, sizeof(tg->source), "%s", r->source ? r->source : "usdt");
	tg->last_seen = mono_ns();
	struct opstats **slot = &tg->op[op_index(r->operation)][model_slot(tg, r->model)];
	if (!*slot && !(*slot = calloc(1, sizeof(**slot)))) {
		p->overflow++;
		pthread_mutex_unlock(&p->lock);
		return;
	}
	struct opstats *t = *slot;
	t->used = true;
	if (!err[0]) {
		hist_add(&t->ttft, &b_ttft, r->ttft);
		hist_add(&t->ttfo, &b_ttfo, r->ttfo);
		hist_add(&t->reasoning, &b_reasoning, r->reasoning_ns);
		if (r->output_tokens != KPI_NULL && r->output_tokens > 1)
			hist_add(&t->tpot, &b_tpot, r->tpot);
	}
	if (r->e2e != KPI_NULL) {
		int i;
		for (i = 0; i < t->n_dur && strcmp(t->dur[i].error, err); i++)
			;
		if (i == t->n_dur && i < PROM_MAX_ERRTYPES)
			snprintf(t->dur[t->n_dur++].error, sizeof(err), "%s", err);
		if (i < t->n_dur)
			hist_add(&t->dur[i].h, &b_duration, r->e2e);
		else
			p->overflow++;
	}
	const bool pd = r->pd_role != NULL;     /* other producers leave those fields 0 */
	const int64_t ph[N_PHASES] = { r->net_in, r->queue, r->prefill, r->server_wait, r->decode, r->net_out,
				       pd ? r->router_ns : KPI_NULL, pd ? r->kv_transfer_ns : KPI_NULL,
				       pd ? r->decode_queue_ns : KPI_NULL };
	for (int k = 0; k < N_PHASES; k++)
		hist_add(&t->phase[k], &b_phase[k], ph[k]);

	int i;
	for (i = 0; i < t->n_out; i++)
		if (t->out[i].status == status && !strcmp(t->out[i].finish, fin) &&
		    !strcmp(t->out[i].error, err))
			break;
	if (i == t->n_out && i < PROM_MAX_OUTCOMES) {
		t->out[i].status = status;
		snprintf(t->out[i].finish, sizeof(t->out[i].finish), "%s", fin);
		snprintf(t->out[i].error, sizeof(t->out[i].error), "%s", err);
		t->n_out++;
	}
	if (i < t->n_out)
		t->out[i].n++;
	else
		p->overflow++;
	if (r->reasoning_events != KPI_NULL && r->reasoning_events > 0)
		t->reasoning_events += (uint64_t)r->reasoning_events;
	if (r->answer_events != KPI_NULL && r->answer_events > 0)
		t->answer_events += (uint64_t)r->answer_events;
	if (r->prompt_tokens != KPI_NULL && r->prompt_tokens > 0)
		t->tokens_in += (uint64_t)r->prompt_tokens;
	if (r->output_tokens != KPI_NULL && r->output_tokens > 0)
		t->tokens_out += (uint64_t)r->output_tokens;
	if (pd && r->kv_bytes != KPI_NULL && r->kv_bytes > 0)
		t->kv_bytes += (uint64_t)r->kv_bytes;
	if (r->engine_join && r->engine_prompt_tokens > 0) {
		t->prompt_engine += (uint64_t)r->engine_prompt_tokens;
		if (r->cached_prompt_tokens > 0)
			t->prompt_cached += (uint64_t)r->cached_prompt_tokens;
	}
	pthread_mutex_unlock(&p->lock);
}

static void on_sample(void *ctx, const struct kpi_sample_record *s)
{
	struct prom_exporter *p = ctx;
	const struct export_ident *id = export_ident_get(s->pid);

	pthread_mutex_lock(&p->lock);
	struct target *t = target_of(p, s->pid);
	t->id = *id;
	snprintf(t->id.model, sizeof(t->id.model), "%s", export_ident_model(id, t->first_model));
	t->last_seen = mono_ns();
	t->sampled = true;
	t->queue_depth = s->queue_depth;
	t->running = s->running;
	t->kv_used = s->kv_used;
	t->kv_free = s->kv_free;
	t->kv_usage = s->kv_usage;
	if (s->preemptions > 0)
		t->preemptions += (uint64_t)s->preemptions;
	t->runq_ns[RUNQ_BEHIND_OWN] += s->runq_self_ns;
	t->runq_ns[RUNQ_BEHIND_IDLE] += s->runq_idle_ns;
	if (s->runq_ns > s->runq_self_ns + s->runq_idle_ns)
		t->runq_ns[RUNQ_BEHIND_OTHER] += s->runq_ns - s->runq_self_ns - s->runq_idle_ns;
	pthread_mutex_unlock(&p->lock);
}

/* The ledger's running totals, as they are: each only grows. (A sample's
 * drops are the second's, and the same agent-wide figure in every target's
 * sample: neither a maximum nor a sum of them is the total.) */
static void on_losses(void *ctx, const struct kpi_loss_record *l)
{
	struct prom_exporter *p = ctx;

	pthread_mutex_lock(&p->lock);
	for (int c = 0; c < KPI_LOSS__COUNT; c++)
		if (l->total[c] > p->losses[c])
			p->losses[c] = l->total[c];
	pthread_mutex_unlock(&p->lock);
}

struct prom_exporter *prom_new(void)
{
	struct prom_exporter *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	buckets_init();
	pthread_mutex_init(&p->lock, NULL);
	return p;
}

void prom_free(struct prom_exporter *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->n; i++)
		target_clear(&p->t[i]);
	for (int i = 0; i < p->n_integ; i++)
		prom_native_free(&p->integ[i].h.nat);
	for (int i = 0; i < p->n_agents; i++) {
		prom_native_free(&p->agents[i].task.nat);
		prom_native_free(&p->agents[i].escalation.nat);
	}
	pthread_mutex_destroy(&p->lock);
	free(p);
}

struct kpi_sink prom_sink(struct prom_exporter *p)
{
	return (struct kpi_sink){ .ctx = p, .request = on_request, .sample = on_sample,
				  .losses = on_losses, .integration = on_integration,
				  .exchange_out = on_exchange_out, .task = on_task };
}

void prom_add_collector(struct prom_exporter *p, void (*fn)(void *ctx, FILE *out), void *ctx)
{
	if (p->n_coll < PROM_MAX_COLLECTORS) {
		p->coll[p->n_coll].fn = fn;
		p->coll[p->n_coll].ctx = ctx;
		p->n_coll++;
	}
}

/* ---- exposition ---------------------------------------------------------------------- */

void prom_format_double(char *buf, size_t len, double v)
{
	if (isnan(v)) {
		snprintf(buf, len, "NaN");
		return;
	}
	if (isinf(v)) {
		snprintf(buf, len, v > 0 ? "+Inf" : "-Inf");
		return;
	}
	/* shortest of %.15g / %.17g that reads back as v */
	snprintf(buf, len, "%.15g", v);
	if (strtod(buf, NULL) != v)
		snprintf(buf, len, "%.17g", v);
}

/* Label values are sanitized where they come from (export_ident) or are
 * fixed words; escaping still follows the format, for safety. */
static void put_label(FILE *out, const char *name, const char *v, bool *first)
{
	fprintf(out, "%s%s=\"", *first ? "" : ",", name);
	*first = false;
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			fputc('\\', out), fputc(*v, out);
		else if (*v == '\n')
			fputs("\\n", out);
		else
			fputc(*v, out);
	}
	fputc('"', out);
}

/* op: enum kpi_operation of a request series; gauges and requests refused
 * before admission (KPI_OP_NONE) carry no gen_ai_operation_name.  m: the
 * series' kpi_request_model slot (PROM_MODEL_NONE: no such label). */
static void put_target_labels(FILE *out, const struct target *t, int op, int m, bool *first)
{
	char port[16], pid[16];
	snprintf(port, sizeof(port), "%d", t->id.port);
	snprintf(pid, sizeof(pid), "%u", t->pid);
	if (kpi_operation_name(op))
		put_label(out, "gen_ai_operation_name", kpi_operation_name(op), first);
	put_label(out, "gen_ai_request_model", t->id.model[0] ? t->id.model : "unknown", first);
	put_label(out, "server_port", port, first);
	put_label(out, "pid", pid, first);
	if (t->source[0])
		put_label(out, "kpi_source", t->source, first);
	/* OpenTelemetry's k8s names; bounded with the process's series (a pod
	 * gone and quiet for PROM_EVICT_NS loses them with its process) */
	if (t->id.in_container && t->id.container.pod_name[0]) {
		const struct container_info *ci = &t->id.container;
		if (ci->pod_namespace[0])
			put_label(out, "k8s_namespace_name", ci->pod_namespace, first);
		put_label(out, "k8s_pod_name", ci->pod_name, first);
		if (ci->name[0])
			put_label(out, "k8s_container_name", ci->name, first);
	}
	if (m < PROM_REQUEST_MODELS && m < t->n_req_model)
		put_label(out, "kpi_request_model", t->req_model[m], first);
	else if (m == PROM_MODEL_OTHER)
		put_label(out, "kpi_request_model", "other", first);
}

static void family(FILE *out, const char *name, const char *type, const char *help)
{
	fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* ---- native histograms ------------------------------------------------------------------ */

/* While prom_render_proto renders, each histogram series leaves its native
 * buckets here, found again by family and label text (prom_proto.h). */
struct native_entry {
	UT_hash_handle hh;
	char *key;                      /* "family{labels}" */
	struct pbuf nat;
};

static __thread struct native_entry *native_reg;
static __thread bool native_on;

static char *native_key(const char *family, const char *labels)
{
	size_t n = strlen(family) + strlen(labels) + 3;
	char *k = malloc(n);
	if (k)
		snprintf(k, n, "%s{%s}", family, labels);
	return k;
}

static void native_keep(const char *family, const char *labels, const struct hist *h)
{
	struct native_entry *e = calloc(1, sizeof(*e));
	if (!e || !(e->key = native_key(family, labels))) {
		free(e);
		return;
	}
	prom_native_encode(&h->nat, &e->nat);
	HASH_ADD_KEYPTR(hh, native_reg, e->key, strlen(e->key), e);
}

static const struct pbuf *native_find(void *ctx, const char *family, const char *labels)
{
	struct native_entry *e = NULL;
	char *k = native_key(family, labels);
	(void)ctx;
	if (k)
		HASH_FIND_STR(native_reg, k, e);
	free(k);
	return e && !e->nat.oom ? &e->nat : NULL;
}

static void native_clear(void)
{
	struct native_entry *e, *tmp;
	HASH_ITER(hh, native_reg, e, tmp) {
		HASH_DEL(native_reg, e);
		free(e->key);
		pbuf_free(&e->nat);
		free(e);
	}
}

/* One histogram series: its buckets, sum and count, every line with the
 * label text lt (and the native buckets kept when rendering for protobuf). */
static void put_series(FILE *out, const struct prom_buckets *b, const char *lt, const struct hist *h)
{
	uint64_t cum = 0;
	char le[32], sum[32];

	for (int k = 0; k <= b->n; k++) {
		cum += h->counts[k];
		if (k < b->n)
			prom_format_double(le, sizeof(le), b->le[k]);
		else
			snprintf(le, sizeof(le), "+Inf");
		fprintf(out, "%s_bucket{%s%sle=\"%s\"} %llu\n", b->name, lt, lt[0] ? "," : "", le,
			(unsigned long long)cum);
	}
	prom_format_double(sum, sizeof(sum), (double)h->sum_ns / 1e9);
	fprintf(out, "%s_sum{%s} %s\n", b->name, lt, sum);
	fprintf(out, "%s_count{%s} %llu\n", b->name, lt, (unsigned long long)h->count);
	if (native_on)
		native_keep(b->name, lt, h);
}

static void put_hist(FILE *out, const struct prom_buckets *b, const struct target *t, int op, int m,
		     const struct opstats *S, const struct hist *h, const char *error)
{
	char *lt = NULL;
	size_t n = 0;
	bool first = true;

	if (!S->used || (op == KPI_OP_NONE && !h->count))
		return;         /* no empty series for refused requests' missing values */
	FILE *f = open_memstream(&lt, &n);
	if (!f)
		return;
	put_target_labels(f, t, op, m, &first);
	if (error && error[0])
		put_label(f, "error_type", error, &first);
	if (fclose(f) == 0)
		put_series(out, b, lt, h);
	free(lt);
}

/* A histogram of b labelled by process name alone. */
static void put_integ(FILE *out, const struct prom_buckets *b, const char *comm, const struct hist *h)
{
	char *lt = NULL;
	size_t n = 0;
	bool first = true;
	FILE *f = open_memstream(&lt, &n);

	if (!f)
		return;
	put_label(f, "process", comm, &first);
	if (fclose(f) == 0)
		put_series(out, b, lt, h);
	free(lt);
}

/* A counter labelled by process name and one more label (NULL: none). */
static void put_proc_counter(FILE *out, const char *name, const char *comm, const char *label,
			     const char *value, const char *label2, const char *value2, uint64_t n)
{
	bool first = true;
	fprintf(out, "%s{", name);
	put_label(out, "process", comm, &first);
	if (label)
		put_label(out, label, value, &first);
	if (label2)
		put_label(out, label2, value2, &first);
	fprintf(out, "} %llu\n", (unsigned long long)n);
}

/* Agent tasks and cascades, by process name (docs/agent.md, Tasks, Cascades). */
static void put_agents(FILE *out, const struct prom_exporter *p)
{
	if (!p->n_agents)
		return;
	family(out, b_task.name, "histogram", b_task.help);
	for (int i = 0; i < p->n_agents; i++)
		if (p->agents[i].task.count)
			put_integ(out, &b_task, p->agents[i].comm, &p->agents[i].task);
	family(out, "kpi_agent_tasks_total", "counter",
	       "Agent tasks ended, by the rule that made them and their outcome (success: the inbound "
	       "response below 400, else the last call did not fail).");
	for (int i = 0; i < p->n_agents; i++)
		for (int r = 0; r < 4; r++)
			for (int ok = 0; ok < 2; ok++)
				if (p->agents[i].tasks[r][ok])
					put_proc_counter(out, "kpi_agent_tasks_total", p->agents[i].comm, "rule",
							 task_rules[r], "outcome", ok ? "success" : "failure",
							 p->agents[i].tasks[r][ok]);
	family(out, "kpi_agent_task_calls_total", "counter",
	       "Calls an agent's tasks (and a gateway's requests) made, by kind: model (an inference "
	       "endpoint) or tool (any other call, MCP's tools/call included).");
	for (int i = 0; i < p->n_agents; i++)
		for (int k = 0; k < 2; k++)
			put_proc_counter(out, "kpi_agent_task_calls_total", p->agents[i].comm, "kind",
					 k ? "tool" : "model", NULL, NULL, p->agents[i].calls[k]);
	family(out, "kpi_agent_task_retries_total", "counter",
	       "Calls that re-sent a call of the same task whose last try failed.");
	for (int i = 0; i < p->n_agents; i++)
		put_proc_counter(out, "kpi_agent_task_retries_total", p->agents[i].comm, NULL, NULL, NULL, NULL,
				 p->agents[i].retries);
	family(out, "kpi_cascade_escalations_total", "counter",
	       "Model calls that asked a second, different model the same request after the first "
	       "answered (the escalation rate: this over the process's requests).");
	for (int i = 0; i < p->n_agents; i++)
		put_proc_counter(out, "kpi_cascade_escalations_total", p->agents[i].comm, NULL, NULL, NULL, NULL,
				 p->agents[i].escalations);
	family(out, b_escalation.name, "histogram", b_escalation.help);
	for (int i = 0; i < p->n_agents; i++)
		if (p->agents[i].escalation.count)
			put_integ(out, &b_escalation, p->agents[i].comm, &p->agents[i].escalation);
}

static void put_gauge_line(FILE *out, const char *name, const struct target *t, double v)
{
	char val[32];
	bool first = true;
	prom_format_double(val, sizeof(val), v);
	fprintf(out, "%s{", name);
	put_target_labels(out, t, KPI_OP_NONE, PROM_MODEL_NONE, &first);
	fprintf(out, "} %s\n", val);
}

static void evict_quiet(struct prom_exporter *p, uint64_t now)
{
	for (int i = p->n - 1; i >= 0; i--) {
		struct target *t = &p->t[i];
		bool alive = kill((pid_t)t->pid, 0) == 0;
		if (!alive && now - t->last_seen > PROM_EVICT_NS) {
			target_clear(t);
			p->t[i] = p->t[--p->n];
			/* the last entry moved: its old place holds no series of its own */
			memset(&p->t[p->n], 0, sizeof(p->t[0]));
		}
	}
}

int prom_render_proto(struct prom_exporter *p, FILE *out, char *err, size_t errlen)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	native_on = true;
	int rc = prom_render(p, f);
	native_on = false;
	if (fclose(f) || rc) {
		snprintf(err, errlen, "rendering the metrics failed");
		rc = -1;
	} else {
		rc = prom_proto_from_text(text, len, native_find, NULL, out, err, errlen);
	}
	native_clear();
	free(text);
	return rc;
}

int prom_render(struct prom_exporter *p, FILE *out)
{
	uint64_t now = mono_ns();
	bool first;

	pthread_mutex_lock(&p->lock);
	evict_quiet(p, now);

/* every request series: i the target, op its enum kpi_operation, m its
 * kpi_request_model slot, S its counts */
#define FOR_OPS(p, i, op, m, S) \
	for (int i = 0; i < (p)->n; i++) \
		for (int op = 0; op < KPI_OP__COUNT; op++) \
			for (int m = 0; m < PROM_MODEL_SLOTS; m++) \
				for (const struct opstats *S = (p)->t[i].op[op][m]; S; S = NULL)

	family(out, b_ttft.name, "histogram", b_ttft.help);
	FOR_OPS(p, i, op, m, S)
		put_hist(out, &b_ttft, &p->t[i], op, m, S, &S->ttft, NULL);
	family(out, b_ttfo.name, "histogram", b_ttfo.help);
	FOR_OPS(p, i, op, m, S)
		if (S->ttfo.count)
			put_hist(out, &b_ttfo, &p->t[i], op, m, S, &S->ttfo, NULL);
	family(out, b_reasoning.name, "histogram", b_reasoning.help);
	FOR_OPS(p, i, op, m, S)
		if (S->reasoning.count)
			put_hist(out, &b_reasoning, &p->t[i], op, m, S, &S->reasoning, NULL);
	family(out, b_tpot.name, "histogram", b_tpot.help);
	FOR_OPS(p, i, op, m, S)
		put_hist(out, &b_tpot, &p->t[i], op, m, S, &S->tpot, NULL);
	family(out, b_duration.name, "histogram", b_duration.help);
	FOR_OPS(p, i, op, m, S)
		for (int k = 0; k < S->n_dur; k++)
			put_hist(out, &b_duration, &p->t[i], op, m, S, &S->dur[k].h, S->dur[k].error);
	for (int ph = 0; ph < N_PHASES; ph++) {
		family(out, b_phase[ph].name, "histogram", b_phase[ph].help);
		FOR_OPS(p, i, op, m, S)
			/* the disaggregated phases only where a request had them */
			if (ph < PH_ROUTER || S->phase[ph].count)
				put_hist(out, &b_phase[ph], &p->t[i], op, m, S, &S->phase[ph], NULL);
	}
	family(out, b_integ.name, "histogram", b_integ.help);
	for (int i = 0; i < p->n_integ; i++)
		put_integ(out, &b_integ, p->integ[i].comm, &p->integ[i].h);
	put_agents(out, p);

	family(out, "kpi_requests_total", "counter",
	       "Requests completed or rejected, by HTTP status and finish reason.");
	FOR_OPS(p, i, op, m, S)
		for (int k = 0; k < S->n_out; k++) {
			const struct outcome *o = &S->out[k];
			char st[16];
			snprintf(st, sizeof(st), "%d", o->status);
			first = true;
			fputs("kpi_requests_total{", out);
			put_target_labels(out, &p->t[i], op, m, &first);
			put_label(out, "http_response_status_code", st, &first);
			if (o->finish[0])
				put_label(out, "gen_ai_response_finish_reason", o->finish, &first);
			if (o->error[0])
				put_label(out, "error_type", o->error, &first);
			fprintf(out, "} %llu\n", (unsigned long long)o->n);
		}
	family(out, "kpi_tokens_total", "counter",
	       "Tokens processed, by gen_ai.token.type (input: prompt, output: generated).");
	FOR_OPS(p, i, op, m, S) {
		if (!S->used || op == KPI_OP_NONE)
			continue;       /* a refused request processed no tokens */
		for (int k = 0; k < 2; k++) {
			first = true;
			fputs("kpi_tokens_total{", out);
			put_target_labels(out, &p->t[i], op, m, &first);
			put_label(out, "gen_ai_token_type", k ? "output" : "input", &first);
			fprintf(out, "} %llu\n", (unsigned long long)(k ? S->tokens_out : S->tokens_in));
		}
	}
	/* only where a stream's events were told reasoning from answer */
	for (int k = 0; k < 2; k++) {
		const char *name = k ? "kpi_answer_events_total" : "kpi_reasoning_events_total";
		bool any = false;
		FOR_OPS(p, i, op, m, S)
			any |= S->reasoning_events + S->answer_events > 0;
		if (!any)
			continue;
		family(out, name, "counter", k ? "Streamed events that carried answer (content, text, "
		       "tool-call arguments that are not reasoning)." : "Streamed events that carried "
		       "reasoning only (delta.reasoning, delta.reasoning_content, a Responses API "
		       "reasoning delta, inline <think> content).");
		FOR_OPS(p, i, op, m, S) {
			if (!S->reasoning_events && !S->answer_events)
				continue;
			first = true;
			fprintf(out, "%s{", name);
			put_target_labels(out, &p->t[i], op, m, &first);
			fprintf(out, "} %llu\n", (unsigned long long)(k ? S->answer_events : S->reasoning_events));
		}
	}
	/* only where a llama.cpp server's requests were joined to its engine */
	for (int k = 0; k < 2; k++) {
		const char *name = k ? "kpi_prompt_tokens_cached_total" : "kpi_prompt_tokens_engine_total";
		bool any = false;
		FOR_OPS(p, i, op, m, S)
			any |= S->prompt_engine > 0;
		if (!any)
			continue;
		family(out, name, "counter", k
		       ? "Prompt tokens the KV cache already held (prefix-cache reuse), of requests "
			 "joined to a llama.cpp engine (source http+libllama)."
		       : "Prompt tokens as the engine computed them (cached + prefilled), of requests "
			 "joined to a llama.cpp engine: the prefix-cache hit ratio's denominator.");
		FOR_OPS(p, i, op, m, S) {
			if (!S->prompt_engine)
				continue;
			first = true;
			fprintf(out, "%s{", name);
			put_target_labels(out, &p->t[i], op, m, &first);
			fprintf(out, "} %llu\n", (unsigned long long)(k ? S->prompt_cached : S->prompt_engine));
		}
	}
	/* only where disaggregated requests moved KV: the router's (what its
	 * requests' transfers moved), the decode worker's (received), the
	 * prefill worker's (sent, gen_ai_operation_name kv_prefill) */
	bool any_kv = false;
	FOR_OPS(p, i, op, m, S)
		any_kv |= S->kv_bytes > 0;
	if (any_kv) {
		family(out, "kpi_kv_transfer_bytes_total", "counter",
		       "KV cache bytes the requests' transfers between prefill and decode workers moved "
		       "(disaggregated; per request from the kv__* probes).");
		FOR_OPS(p, i, op, m, S) {
			if (!S->kv_bytes)
				continue;
			first = true;
			fputs("kpi_kv_transfer_bytes_total{", out);
			put_target_labels(out, &p->t[i], op, m, &first);
			fprintf(out, "} %llu\n", (unsigned long long)S->kv_bytes);
		}
	}
#undef FOR_OPS
	family(out, "kpi_preemptions_total", "counter",
	       "Sequences preempted by the scheduler (KV cache pressure).");
	for (int i = 0; i < p->n; i++)
		put_gauge_line(out, "kpi_preemptions_total", &p->t[i], (double)p->t[i].preemptions);

	family(out, "kpi_run_queue_wait_seconds_total", "counter",
	       "Time the daemon's threads waited runnable for a CPU, summed over its threads, by "
	       "what held the CPU when the wait ended: own_threads (the daemon's), idle_cpu (a "
	       "wake-up's own latency), other_processes.");
	for (int i = 0; i < p->n; i++)
		for (int k = 0; k < 3; k++) {
			char val[32];
			bool first = true;
			prom_format_double(val, sizeof(val), (double)p->t[i].runq_ns[k] / 1e9);
			fputs("kpi_run_queue_wait_seconds_total{", out);
			put_target_labels(out, &p->t[i], KPI_OP_NONE, PROM_MODEL_NONE, &first);
			put_label(out, "behind", runq_behind[k], &first);
			fprintf(out, "} %s\n", val);
		}

	family(out, "kpi_queue_depth", "gauge", "Requests in their queue phase (admitted, in no engine step yet): the most at once in the last sample interval.");
	for (int i = 0; i < p->n; i++)
		if (p->t[i].sampled)
			put_gauge_line(out, "kpi_queue_depth", &p->t[i], p->t[i].queue_depth);
	family(out, "kpi_running_requests", "gauge", "Sequences in the running batch.");
	for (int i = 0; i < p->n; i++)
		if (p->t[i].sampled)
			put_gauge_line(out, "kpi_running_requests", &p->t[i], p->t[i].running);
	family(out, "kpi_kv_cache_usage_ratio", "gauge",
	       "KV cache blocks in use / all blocks (0..1), from the last batch step.");
	for (int i = 0; i < p->n; i++)
		if (p->t[i].sampled && p->t[i].kv_usage >= 0)
			put_gauge_line(out, "kpi_kv_cache_usage_ratio", &p->t[i], p->t[i].kv_usage);

	family(out, "kpi_agent_ringbuf_drops_total", "counter",
	       "BPF events lost because the ring buffer was full (grow --ringbuf-mb).");
	fprintf(out, "kpi_agent_ringbuf_drops_total %llu\n",
		(unsigned long long)p->losses[KPI_LOSS_RINGBUF_DROPS]);
	family(out, "kpi_agent_losses_total", "counter",
	       "What the agent lost or could not see, by cause (docs/agent.md, \"Losses\").");
	for (int c = 0; c < KPI_LOSS__COUNT; c++)
		fprintf(out, "kpi_agent_losses_total{cause=\"%s\"} %llu\n", kpi_loss_name(c),
			(unsigned long long)p->losses[c]);
	family(out, "kpi_agent_series_overflow_total", "counter",
	       "Records not counted because a process had too many distinct label values.");
	fprintf(out, "kpi_agent_series_overflow_total %llu\n", (unsigned long long)p->overflow);
	int n_coll = p->n_coll;
	pthread_mutex_unlock(&p->lock);

	for (int i = 0; i < n_coll; i++)
		p->coll[i].fn(p->coll[i].ctx, out);
	return ferror(out) ? -1 : 0;
}
