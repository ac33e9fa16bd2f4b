/* llama_join.c - a llama.cpp process's sequences, from its llama_decode calls,
 * and their join to its HTTP requests (docs/agent.md "llama.cpp servers"). */
#include <stdlib.h>
#include <string.h>
#include "bus.h"
#include "llama_join.h"
#include "marks.h"

#define LLAMA_JOIN_MAX_OPEN 1024        /* (context, sequence id) pairs followed */
#define LLAMA_JOIN_MAX_GENS 65536       /* generations kept, taken or not */

/* One generation: what a sequence id computed for one request, from the step
 * that first held it to its last. */
struct gen {
	uint64_t ctx;
	int32_t seq_id;
	int32_t pos_first, pos_last;    /* -1: the library tracks positions itself */
	uint64_t t_sched, t_first, t_last;
	int64_t prefill_steps, prefill_tokens, decode_steps;
	bool decoding;                  /* its first token's logits are computed */
	bool taken;                     /* matched to a request (checked or not) */
	bool tied;                      /* one of equals a request chose among */
	bool open;                      /* the current generation of its sequence */
};


struct llama_join {
	uint32_t pid;
	uint64_t steps;
	struct gen **gens;              /* in the order they started */
	size_t n_gens, cap_gens;
	struct gen *open[LLAMA_JOIN_MAX_OPEN];
	int n_open;
	struct bus_held *held;
	size_t n_held, cap_held;
	struct llama_join_stats st;
};

struct llama_join *llama_join_new(uint32_t pid)
{
	struct llama_join *j = calloc(1, sizeof(*j));

	if (!j)
		abort();
	j->pid = pid;
	return j;
}

void llama_join_free(struct llama_join *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->n_gens; i++)
		free(j->gens[i]);
	for (size_t i = 0; i < j->n_held; i++)
		bus_held_free(&j->held[i]);
	free(j->gens);
	free(j->held);
	free(j);
}

const struct llama_join_stats *llama_join_stats(const struct llama_join *j)
{
	return &j->st;
}

/* ---- generations ------------------------------------------------------------ */

static struct gen **open_slot(struct llama_join *j, uint64_t ctx, int32_t seq_id)
{
	for (int i = 0; i < j->n_open; i++)
		if (j->open[i]->ctx == ctx && j->open[i]->seq_id == seq_id)
			return &j->open[i];
	return NULL;
}

static void gens_drop_first(struct llama_join *j)
{
	struct gen *g = j->gens[0];

	if (!g->taken)
		j->st.forgotten++;
	if (g->open) {
		struct gen **slot = open_slot(j, g->ctx, g->seq_id);
		*slot = j->open[--j->n_open];
	}
	free(g);
	memmove(j->gens, j->gens + 1, --j->n_gens * sizeof(*j->gens));
}

static struct gen *gen_start(struct llama_join *j, struct gen **slot, const struct kpi_llama_ev *e,
			     const struct kpi_llama_seq *s)
{
	struct gen *g = calloc(1, sizeof(*g));

	if (!g)
		abort();
	*g = (struct gen){ .ctx = e->ctx, .seq_id = s->seq_id, .pos_first = s->pos_first,
			   .pos_last = -1, .t_sched = e->t_start, .open = true };
	if (j->n_gens == LLAMA_JOIN_MAX_GENS)
		gens_drop_first(j);
	if (slot && *slot) {
		(*slot)->open = false;
		*slot = g;
	} else if (j->n_open < LLAMA_JOIN_MAX_OPEN) {
		j->open[j->n_open++] = g;
	} else {
		g->open = false;        /* followed for this step only */
	}
	if (j->n_gens == j->cap_gens) {
		j->cap_gens = j->cap_gens ? 2 * j->cap_gens : 64;
		j->gens = realloc(j->gens, j->cap_gens * sizeof(*j->gens));
		if (!j->gens)
			abort();
	}
	j->gens[j->n_gens++] = g;
	j->st.generations++;
	return g;
}

/* A new request's work on a sequence id: its positions go back (the cache
 * was cut to a shared prefix, or cleared), or prompt tokens follow tokens it
 * was generating. */
static bool gen_is_new(const struct gen *g, const struct kpi_llama_seq *s)
{
	if (!g)
		return true;
	if (s->pos_first >= 0 && g->pos_last >= 0 && s->pos_first <= g->pos_last)
		return true;
	return g->decoding && s->n_tokens > 1;
}

void llama_join_call(struct llama_join *j, const struct kpi_llama_ev *e, struct kpi_step_record *step)
{
	*step = (struct kpi_step_record){ .pid = j->pid, .step_id = ++j->steps, .t_start = e->t_start,
					  .t_end = e->t_end, .source = "libllama" };
	j->st.calls++;
	if (e->flags & (KPI_LLAMA_F_CUT | KPI_LLAMA_F_READ_FAIL | KPI_LLAMA_F_BAD))
		j->st.partial++;
	if (e->ret != 0) {
		j->st.failed_calls++;
		return;
	}
	for (uint32_t i = 0; i < e->n_seqs && i < KPI_LLAMA_EV_SEQS; i++) {
		const struct kpi_llama_seq *s = &e->seqs[i];
		struct gen **slot = open_slot(j, e->ctx, s->seq_id);
		struct gen *g = slot ? *slot : NULL;
		if (gen_is_new(g, s))
			g = gen_start(j, slot, e, s);
		if (!g->decoding) {
			step->prefill_tokens += s->n_tokens;
			g->prefill_steps++;
			g->prefill_tokens += s->n_tokens;
			if (s->n_logits > 0) {
				g->decoding = true;
				g->t_first = e->t_end;
			}
		} else {
			step->decode_seqs++;
			g->decode_steps++;
		}
		g->t_last = e->t_end;
		g->pos_last = s->pos_last;
	}
}

/* ---- requests --------------------------------------------------------------- */

void llama_join_hold(struct llama_join *j, const struct kpi_request_record *rec)
{
	struct bus_held *h;

	if (j->n_held == j->cap_held) {
		j->cap_held = j->cap_held ? 2 * j->cap_held : 64;
		j->held = realloc(j->held, j->cap_held * sizeof(*j->held));
		if (!j->held)
			abort();
	}
	h = &j->held[j->n_held++];
	bus_held_keep(h, rec);
}

static int64_t read_mark(const struct kpi_request_record *r)
{
	return r->t_req_read != KPI_NULL ? r->t_req_read : r->t_arrive;
}

static int by_read(const void *a, const void *b)
{
	int64_t x = read_mark(&((const struct bus_held *)a)->r), y = read_mark(&((const struct bus_held *)b)->r);
	return x < y ? -1 : x > y;
}

static int64_t gen_prompt(const struct gen *g)
{
	return g->prefill_tokens + (g->pos_first > 0 ? g->pos_first : 0);
}

/* How well g's counts fit r's usage: 2 per count that agrees, 0 unknown. */
static int usage_fit(const struct gen *g, const struct kpi_request_record *r)
{
	int fit = 0;

	if (r->prompt_tokens != KPI_NULL)
		fit += gen_prompt(g) == r->prompt_tokens ? 2 : 0;
	if (r->output_tokens != KPI_NULL)
		fit += g->decode_steps + 1 == r->output_tokens ? 2 : 0;
	return fit;
}

static bool gen_free_for(const struct gen *g, const struct kpi_request_record *r)
{
	return !g->taken && (int64_t)g->t_sched >= r->t_req_read && (int64_t)g->t_last <= r->t_done;
}

/* The read-order rule: the first generation no request took that started
 * after r was read, skipping those still running after r ended (they are
 * requests in flight that were read before r). Generations that started in
 * the same step are in the batch's order, not the requests': among them the
 * one whose counts fit r's usage best is taken; when several fit as well
 * (equal counts, or no usage), nothing tells them apart, and the first in the
 * batch's order is taken, its sequence id possibly another request's, and
 * so for the equals left to the requests read after (*rule says which). */
static struct gen *gen_of(struct llama_join *j, const struct kpi_request_record *r, const char **rule)
{
	struct gen *first = NULL, *best = NULL;
	int best_fit = -1, n_best = 0;

	for (size_t i = 0; i < j->n_gens; i++) {
		struct gen *g = j->gens[i];
		if (!gen_free_for(g, r) || (first && g->t_sched != first->t_sched))
			continue;
		if (!first)
			first = g;
		int fit = usage_fit(g, r);
		if (fit > best_fit) {
			best = g;
			best_fit = fit;
			n_best = 1;
		} else if (fit == best_fit) {
			n_best++;
		}
	}
	/* equals stay equals: the ones left by this choice are as uncertain */
	for (size_t i = 0; n_best > 1 && i < j->n_gens; i++) {
		struct gen *g = j->gens[i];
		if (gen_free_for(g, r) && g->t_sched == first->t_sched && usage_fit(g, r) == best_fit)
			g->tied = true;
	}
	*rule = best && best->tied ? "read-order+tie" : best == first ? "read-order" : "read-order+usage";
	return best;
}

static void join_one(struct llama_join *j, struct kpi_request_record *r)
{
	const char *rule = NULL;
	struct gen *g = r->t_req_read != KPI_NULL ? gen_of(j, r, &rule) : NULL;

	if (!g) {
		j->st.no_generation++;
		return;
	}
	g->taken = true;
	/* the first token's content is written after the engine computed it */
	int64_t first_out = r->t_first_write != KPI_NULL ? r->t_first_write : r->t_done;
	if (!g->decoding || (int64_t)g->t_first > first_out) {
		j->st.check_failed++;
		return;
	}
	uint64_t m[6] = { (uint64_t)r->t_arrive, (uint64_t)r->t_req_read, g->t_sched, g->t_first,
			  g->t_last, (uint64_t)r->t_done };
	int64_t *ph[5] = { &r->net_in, &r->queue, &r->prefill, &r->decode, &r->net_out };
	marks_clamp(m, 6);
	marks_phases(m, 6, ph);
	r->t_sched = (int64_t)m[2];
	r->t_first = (int64_t)m[3];
	r->t_last = (int64_t)m[4];
	r->server_wait = KPI_NULL;      /* split into queue and prefill */
	r->seq_id = g->seq_id;
	r->cached_prompt_tokens = g->pos_first >= 0 ? g->pos_first : KPI_NULL;
	r->engine_prompt_tokens = gen_prompt(g);
	r->prefill_steps = g->prefill_steps;
	if (r->prompt_tokens == KPI_NULL)
		r->prompt_tokens = r->engine_prompt_tokens;
	r->engine_join = rule;
	r->source = "http+libllama";
	r->split_rule = NULL;           /* measured now: what was inferred goes */
	r->step_ns = KPI_NULL;
	j->st.joined++;
	j->st.ties += !strcmp(rule, "read-order+tie");
}

/* Frees generations that are done with: taken and superseded, or too old. */
static void gens_prune(struct llama_join *j, uint64_t now)
{
	size_t k = 0;

	for (size_t i = 0; i < j->n_gens; i++) {
		struct gen *g = j->gens[i];
		bool stale = g->t_last + LLAMA_JOIN_GEN_TTL_NS < now;
		if (!g->open && (g->taken || stale)) {
			j->st.forgotten += !g->taken;
			free(g);
			continue;
		}
		j->gens[k++] = g;
	}
	j->n_gens = k;
}

void llama_join_release(struct llama_join *j, uint64_t now, bool final,
			void (*out)(void *ctx, const struct kpi_request_record *rec), void *ctx)
{
	size_t n = 0;

	qsort(j->held, j->n_held, sizeof(*j->held), by_read);
	/* in read order: a record waits for the ones read before it */
	for (; n < j->n_held; n++) {
		struct bus_held *h = &j->held[n];
		bool over = j->n_held - n > LLAMA_JOIN_MAX_HELD;
		if (!final && !over && (uint64_t)h->r.t_done + LLAMA_JOIN_SETTLE_NS > now)
			break;
		join_one(j, &h->r);
		out(ctx, &h->r);
		bus_held_free(h);
	}
	memmove(j->held, j->held + n, (j->n_held - n) * sizeof(*j->held));
	j->n_held -= n;
	gens_prune(j, now);
}
