/* test_agent_split.c - agent/track/split_infer.c against a simulated
 * continuous-batching engine whose truth the test knows (admission, chunked
 * prefill, first come first served), and against the servers its rules must
 * decline: buffered writes, two engines behind one port, a step's writes
 * spread wide, events of several tokens; the hold and its release. */
#include <math.h>
#include "tests/unit/check.h"
#include "agent/track/split_infer.h"

#define MS 1000000ll
#define US 1000ll

/* ---- a simulated engine ----------------------------------------------------- */

struct sim_req {
	int64_t read;                   /* request read (ns) */
	int64_t prompt;                 /* its prefill work (ns) */
	int n_out;                      /* tokens */
	/* truth */
	int64_t t_sched, t_first;
	/* engine state */
	int64_t left;                   /* prefill work left */
	int out;
	bool admitted, done;
	/* its writes */
	int64_t w[512];
	int n_w;
};

struct sim {
	int64_t step_ns;                /* a decode step */
	int64_t chunk_ns;               /* prefill work a step takes at most (0: whole prompts) */
	int64_t write_gap;              /* between the writes of one step, stream after stream */
	int n_replicas;                 /* engines, requests dealt round robin */
	int max_run;                    /* sequences running at most (0: no cap); the
					 * others wait, first come first served */
	struct sim_req *r;
	int n;
};

/* Runs engine `rep` of s: steps while it has work, a step = step_ns + the
 * prefill work it takes, then one token to every stream that decoded in it or
 * finished its prompt, written write_gap apart in admission order. */
static void sim_run_engine(struct sim *s, int rep)
{
	int64_t t = 0;

	for (;;) {
		/* nothing running: wait for the next arrival */
		bool busy = false;
		int64_t next = INT64_MAX;
		for (int i = rep; i < s->n; i += s->n_replicas) {
			struct sim_req *q = &s->r[i];
			if (q->admitted && !q->done)
				busy = true;
			else if (!q->admitted && q->read < next)
				next = q->read;
		}
		if (!busy && next == INT64_MAX)
			return;
		if (!busy && next > t)
			t = next;
		int64_t t0 = t, work = 0, budget = s->chunk_ns ? s->chunk_ns : INT64_MAX;
		int in_step[64], n_in = 0, running = 0;
		for (int i = rep; i < s->n; i += s->n_replicas)
			running += s->r[i].admitted && !s->r[i].done;
		for (int i = rep; i < s->n; i += s->n_replicas) {
			struct sim_req *q = &s->r[i];
			if (!q->admitted && q->read <= t0 && (!s->max_run || running < s->max_run)) {
				running++;
				q->admitted = true;
				q->left = q->prompt;
			}
			if (!q->admitted || q->done)
				continue;
			if (q->left > 0) {
				if (budget <= 0)
					continue;
				int64_t take = q->left < budget ? q->left : budget;
				if (!q->t_sched)
					q->t_sched = t0;
				q->left -= take;
				budget -= take;
				work += take;
				if (q->left > 0)
					continue;       /* more chunks to come */
			}
			in_step[n_in++] = i;
		}
		t = t0 + s->step_ns + work;
		for (int k = 0; k < n_in; k++) {
			struct sim_req *q = &s->r[in_step[k]];
			if (!q->out)
				q->t_first = t;
			q->w[q->n_w++] = t + (k + 1) * s->write_gap;
			if (++q->out == q->n_out)
				q->done = true;
		}
	}
}

static void sim_run(struct sim *s)
{
	for (int rep = 0; rep < s->n_replicas; rep++)
		sim_run_engine(s, rep);
}

/* ---- feeding it to the module ------------------------------------------------ */

static struct kpi_request_record got[256];
static int n_got;

static void collect(void *ctx, const struct kpi_request_record *r)
{
	(void)ctx;
	if (n_got < 256)
		got[n_got++] = *r;
}

struct feed {
	int64_t t;
	int kind;                       /* 0 read, 1 token, 2 done */
	int req, k;
};

static int feed_cmp(const void *a, const void *b)
{
	const struct feed *x = a, *y = b;
	return x->t != y->t ? (x->t < y->t ? -1 : 1) : x->kind - y->kind;
}

/* The HTTP record of q, as agent/track/http_path.c makes it. */
static struct kpi_request_record record_of(const struct sim_req *q, int i, int64_t output_tokens)
{
	struct kpi_request_record r = { .pid = 9, .seq_id = KPI_NULL, .source = "http",
					.direction = "in" };

	snprintf(r.request_id, sizeof(r.request_id), "r%d", i);
	r.t_arrive = q->read - 100 * US;
	r.t_req_read = q->read;
	r.t_first_write = q->w[0];
	r.t_done = q->w[q->n_w - 1] + 100 * US;
	r.net_in = r.t_req_read - r.t_arrive;
	r.server_wait = r.t_first_write - r.t_req_read;
	r.decode = q->w[q->n_w - 1] - q->w[0];
	r.net_out = r.t_done - q->w[q->n_w - 1];
	r.e2e = r.t_done - r.t_arrive;
	r.queue = r.prefill = r.t_sched = r.t_first = r.t_last = KPI_NULL;
	r.output_tokens = output_tokens ? output_tokens : q->n_w;
	r.split_rule = NULL;
	r.step_ns = KPI_NULL;
	return r;
}

/* Feeds s's requests to a new module in time order, as the agent would:
 * reads, token writes (tokens_per_write events at the same time), ends;
 * releases as time goes and at the end. */
static struct split_infer *sim_feed(const struct sim *s, int tokens_per_write, int64_t tokens_per_event)
{
	struct split_infer *si = split_infer_new();
	struct feed *f = calloc((size_t)s->n * 520, sizeof(*f));
	size_t n = 0;

	CHECK(f, "out of memory");
	n_got = 0;
	for (int i = 0; i < s->n; i++) {
		f[n++] = (struct feed){ s->r[i].read, 0, i, 0 };
		for (int k = 0; k < s->r[i].n_w; k++)
			f[n++] = (struct feed){ s->r[i].w[k], 1, i, k };
		f[n++] = (struct feed){ s->r[i].w[s->r[i].n_w - 1] + 100 * US, 2, i, 0 };
	}
	qsort(f, n, sizeof(*f), feed_cmp);
	for (size_t i = 0; i < n; i++) {
		const struct sim_req *q = &s->r[f[i].req];
		if (f[i].kind == 0) {
			split_infer_open(si, 9, (uint64_t)f[i].req + 1, (uint64_t)q->read, true);
		} else if (f[i].kind == 1) {
			for (int k = 0; k < tokens_per_write; k++)
				split_infer_token(si, 9, (uint64_t)f[i].req + 1, (uint64_t)f[i].t, 0);
		} else {
			struct kpi_request_record r = record_of(q, f[i].req, tokens_per_event * q->n_w);
			split_infer_done(si, 9, (uint64_t)f[i].req + 1, &r);
		}
		split_infer_release(si, (uint64_t)f[i].t, false, collect, NULL);
	}
	split_infer_release(si, UINT64_MAX, true, collect, NULL);
	free(f);
	CHECK(n_got == s->n, "%d records out of %d", n_got, s->n);
	return si;
}

static const struct kpi_request_record *got_of(int i)
{
	char id[16];

	snprintf(id, sizeof(id), "r%d", i);
	for (int k = 0; k < n_got; k++)
		if (!strcmp(got[k].request_id, id))
			return &got[k];
	return NULL;
}

/* Every record with a split has phases that still sum to e2e and marks in
 * order; returns how many have one. */
static int check_sums(void)
{
	int with = 0;

	for (int k = 0; k < n_got; k++) {
		const struct kpi_request_record *r = &got[k];
		if (!r->split_rule) {
			CHECK(r->queue == KPI_NULL && r->prefill == KPI_NULL && r->server_wait != KPI_NULL,
			      "%s: declined but split", r->request_id);
			continue;
		}
		with++;
		CHECK(r->server_wait == KPI_NULL, "%s", r->request_id);
		CHECK(r->net_in + r->queue + r->prefill + r->decode + r->net_out == r->e2e,
		      "%s: phases %lld+%lld+%lld+%lld+%lld != e2e %lld", r->request_id,
		      (long long)r->net_in, (long long)r->queue, (long long)r->prefill,
		      (long long)r->decode, (long long)r->net_out, (long long)r->e2e);
		CHECK(r->t_req_read <= r->t_sched && r->t_sched <= r->t_first &&
		      r->t_first <= r->t_first_write, "%s: marks out of order", r->request_id);
		CHECK(r->queue >= 0 && r->prefill >= 0 && r->decode >= 0, "%s", r->request_id);
	}
	return with;
}

/* g's split against q's truth: whether it is within tol; never off by more
 * than a step and a chunk where the engine chunks (a first chunk that shared
 * the last step of the prompt before it). */
static bool near_truth(const struct sim *s, const struct sim_req *q,
		       const struct kpi_request_record *g, int64_t tol)
{
	int64_t tq = q->t_sched - q->read, tp = q->t_first - q->t_sched;
	int64_t off = llabs(g->queue - tq) > llabs(g->prefill - tp) ? llabs(g->queue - tq)
								  : llabs(g->prefill - tp);
	CHECK(off <= tol || (s->chunk_ns && off <= s->step_ns + s->chunk_ns + tol),
	      "%s (%s): queue %lld vs %lld, prefill %lld vs %lld", g->request_id, g->split_rule,
	      (long long)g->queue, (long long)tq, (long long)g->prefill, (long long)tp);
	return off <= tol;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_idle(void)
{
	struct sim_req r[2] = { { .read = 100 * MS, .prompt = 30 * MS, .n_out = 5 },
				{ .read = 400 * MS, .prompt = 5 * MS, .n_out = 5 } };
	struct sim s = { .step_ns = 10 * MS, .write_gap = 50 * US, .n_replicas = 1, .r = r, .n = 2 };

	sim_run(&s);
	struct split_infer *si = sim_feed(&s, 1, 1);
	CHECK(check_sums() == 2, "both split");
	for (int i = 0; i < 2; i++) {
		const struct kpi_request_record *g = got_of(i);
		CHECK(g && !strcmp(g->split_rule, "idle"), "r%d: %s", i, g ? g->split_rule : "-");
		CHECK(g->queue == 0, "r%d queue %lld", i, (long long)g->queue);
		/* nothing else in flight: prefill runs to its first token's write */
		CHECK(g->prefill == r[i].w[0] - r[i].read, "r%d", i);
		CHECK(g->step_ns == 10 * MS + 50 * US - 50 * US, "step %lld", (long long)g->step_ns);
	}
	CHECK(split_infer_stats(si)->rules[SPLIT_IDLE] == 2, "stats");
	split_infer_free(si);
}

/* n requests over a busy engine, one arriving every ~23 ms, prompts of 1 to
 * 12.5 ms of work: every request with company gets a split, `want` among the
 * rules, the truth within tol; with chunks, a request read while the one
 * before it was computed may start in that one's last step or the next
 * (whether the last chunk left budget over), so there within one step. */
static void busy_engine(int64_t chunk, const char *want, int64_t tol, int exact_pct)
{
	enum { N = 40 };
	struct sim_req r[N];
	struct sim s = { .step_ns = 8 * MS, .chunk_ns = chunk, .write_gap = 40 * US, .n_replicas = 1,
			 .r = r, .n = N };

	memset(r, 0, sizeof(r));
	for (int i = 0; i < N; i++) {
		r[i].read = 50 * MS + i * 23 * MS + (i % 3) * 1700 * US;
		/* prompt work never a whole number of chunks, as prompts of any
		 * token count are not */
		r[i].prompt = (1 + (i * 7) % 12) * MS + 500 * US;
		r[i].n_out = 20 + i % 11;
	}
	sim_run(&s);
	struct split_infer *si = sim_feed(&s, 1, 1);
	int with = check_sums(), rule = 0, exact = 0;
	const struct split_stats *st = split_infer_stats(si);
	CHECK(with >= N - 1, "%d of %d split: declined few %llu pace %llu participation %llu spread %llu "
	      "wait %llu", with, N, (unsigned long long)st->declined[SPLIT_D_FEW],
	      (unsigned long long)st->declined[SPLIT_D_PACE],
	      (unsigned long long)st->declined[SPLIT_D_PARTICIPATION],
	      (unsigned long long)st->declined[SPLIT_D_SPREAD], (unsigned long long)st->declined[SPLIT_D_WAIT]);
	for (int i = 1; i < N; i++) {
		const struct kpi_request_record *g = got_of(i);
		if (!g->split_rule)
			continue;
		exact += near_truth(&s, &r[i], g, tol);
		rule += !strcmp(g->split_rule, want);
		/* a decode step, or a little more where every step around carried a prompt */
		CHECK(g->step_ns >= s.step_ns && g->step_ns <= s.step_ns * 3 / 2, "step %lld",
		      (long long)g->step_ns);
	}
	CHECK(exact * 100 >= with * exact_pct, "%d of %d within %lld ns", exact, with, (long long)tol);
	CHECK(rule > 0, "no request took the rule %s", want);
	split_infer_free(si);
}

/* Whole prompts: each prompt's step is the one step before its first token. */
static void test_step(void)
{
	busy_engine(0, "step", 200 * US, 95);
}

/* Chunked prefill: a long prompt's steps are the lengthened ones before its
 * first token, back to the step after its read (or after the prompts read
 * before it were done). */
static void test_chunked(void)
{
	busy_engine(4 * MS, "chunked", 200 * US, 80);
}

/* A request read while another's prompt is computed waits for it: the
 * queue ends where that one's first token is, first come first served. */
static void test_queued_behind_a_prompt(void)
{
	struct sim_req r[4] = {
		{ .read = 10 * MS, .prompt = 1 * MS, .n_out = 60 },      /* decoding throughout */
		{ .read = 11 * MS, .prompt = 1 * MS, .n_out = 60 },
		{ .read = 100 * MS, .prompt = 55 * MS, .n_out = 10 },    /* a long prompt */
		{ .read = 101 * MS, .prompt = 20 * MS, .n_out = 10 },    /* read just after it */
	};
	struct sim s = { .step_ns = 8 * MS, .chunk_ns = 15 * MS, .write_gap = 40 * US, .n_replicas = 1,
			 .r = r, .n = 4 };

	sim_run(&s);
	struct split_infer *si = sim_feed(&s, 1, 1);
	check_sums();
	const struct kpi_request_record *g = got_of(3);
	CHECK(g->split_rule, "declined");
	CHECK(llabs(g->t_sched - r[3].t_sched) <= 200 * US, "t_sched %lld vs %lld (%s)",
	      (long long)g->t_sched, (long long)r[3].t_sched, g->split_rule);
	split_infer_free(si);
}

/* More requests than slots (6): they queue for one, first come first served,
 * while the steps around them are lengthened by the prompts of those admitted
 * before them (each closed by that request's first token). Their own prefill
 * is told from the others': whole prompts within tol of the truth; chunks of
 * 4 ms a step, exact_pct within tol (a prompt whose first chunk shared the
 * last step of the one before it may be off by that step), none off by more. */
static void queued_engine(int64_t chunk, int exact_pct)
{
	enum { N = 48 };
	struct sim_req r[N];
	struct sim s = { .step_ns = 8 * MS, .chunk_ns = chunk, .write_gap = 40 * US, .n_replicas = 1,
			 .max_run = 6, .r = r, .n = N };
	int64_t tol = 200 * US;

	memset(r, 0, sizeof(r));
	for (int i = 0; i < N; i++) {
		r[i].read = 50 * MS + i * 31 * MS + (i % 4) * 900 * US;
		r[i].prompt = (1 + (i * 5) % 11) * MS + 300 * US;
		r[i].n_out = 22 + i % 9;
	}
	sim_run(&s);
	struct split_infer *si = sim_feed(&s, 1, 1);
	int with = check_sums(), exact = 0, queued = 0, judged = 0;
	CHECK(with * 10 >= N * 8, "%d of %d split: declined wait %llu spread %llu unseen %llu", with, N,
	      (unsigned long long)split_infer_stats(si)->declined[SPLIT_D_WAIT],
	      (unsigned long long)split_infer_stats(si)->declined[SPLIT_D_SPREAD],
	      (unsigned long long)split_infer_stats(si)->declined[SPLIT_D_UNSEEN]);
	for (int i = 1; i < N; i++) {
		const struct kpi_request_record *g = got_of(i);
		if (!g->split_rule)
			continue;
		exact += near_truth(&s, &r[i], g, tol);
		judged++;
		queued += r[i].t_sched - r[i].read > 2 * s.step_ns;
	}
	CHECK(queued >= N / 3, "only %d of the split rows queued for a slot", queued);
	CHECK(exact * 100 >= judged * exact_pct, "%d of %d within %lld ns", exact, judged, (long long)tol);
	split_infer_free(si);
}

static void test_queued_for_a_slot(void)
{
	queued_engine(0, 100);
}

static void test_queued_for_a_slot_chunked(void)
{
	queued_engine(4 * MS, 80);
}

/* A steady engine whose server writes tokens_per_write events at once, each
 * carrying tokens_per_event tokens: every request declined for `why`. */
static void steady_declines(int tokens_per_write, int64_t tokens_per_event, enum split_decline why)
{
	enum { N = 12 };
	struct sim_req r[N];
	struct sim s = { .step_ns = 8 * MS, .write_gap = 40 * US, .n_replicas = 1, .r = r, .n = N };

	memset(r, 0, sizeof(r));
	for (int i = 0; i < N; i++)
		r[i] = (struct sim_req){ .read = 20 * MS + i * 17 * MS, .prompt = 5 * MS, .n_out = 30 };
	sim_run(&s);
	struct split_infer *si = sim_feed(&s, tokens_per_write, tokens_per_event);
	CHECK(check_sums() == 0, "a stream got a split");
	CHECK(split_infer_stats(si)->declined[why] == N, "%llu declined for %s",
	      (unsigned long long)split_infer_stats(si)->declined[why], split_decline_name(why));
	split_infer_free(si);
}

/* A server that writes several events at once (buffers its writes): no split. */
static void test_buffered_declines(void)
{
	steady_declines(2, 1, SPLIT_D_BUFFERED);
}

/* Events of several tokens each (speculative decoding): no split. */
static void test_multi_token_declines(void)
{
	steady_declines(1, 3, SPLIT_D_MULTI_TOKEN);
}

/* Two engines behind one port: a request gets no split from the other
 * engine's steps where the two step out of time; where they happen to step
 * together (their writes land in the same clusters), one may, off by less
 * than a step. */
static void test_replicas_decline(void)
{
	enum { N = 30 };
	struct sim_req r[N];
	struct sim s = { .step_ns = 8 * MS, .write_gap = 40 * US, .n_replicas = 2, .r = r, .n = N };

	memset(r, 0, sizeof(r));
	for (int i = 0; i < N; i++)
		r[i] = (struct sim_req){ .read = 20 * MS + i * 11 * MS + (i % 2) * 3 * MS,
					 .prompt = (2 + i % 9) * MS, .n_out = 40 };
	sim_run(&s);
	struct split_infer *si = sim_feed(&s, 1, 1);
	int with = check_sums() - (int)split_infer_stats(si)->rules[SPLIT_IDLE];
	CHECK(with <= N / 5, "%d of %d split", with, N);
	for (int i = 0; i < N; i++) {
		const struct kpi_request_record *g = got_of(i);
		if (!g->split_rule || !strcmp(g->split_rule, "idle"))
			continue;
		CHECK(llabs(g->t_sched - r[i].t_sched) < s.step_ns &&
		      llabs(g->t_first - r[i].t_first) < s.step_ns, "r%d (%s): a split off by a step", i,
		      g->split_rule);
	}
	split_infer_free(si);
}

/* A server that takes its time writing (1 ms a stream): once many streams
 * run, the writes of a step spread over most of it and run into the next
 * one's; the requests there get no split, the few before (writes still
 * tight) get a right one. */
static void test_spread_declines(void)
{
	enum { N = 20 };
	struct sim_req r[N];
	struct sim s = { .step_ns = 8 * MS, .write_gap = 1 * MS, .n_replicas = 1, .r = r, .n = N };

	memset(r, 0, sizeof(r));
	for (int i = 0; i < N; i++)
		r[i] = (struct sim_req){ .read = 20 * MS + i * 12 * MS, .prompt = 3 * MS, .n_out = 24 };
	sim_run(&s);
	struct split_infer *si = sim_feed(&s, 1, 1);
	check_sums();
	for (int i = 0; i < N; i++) {
		const struct kpi_request_record *g = got_of(i);
		if (!g->split_rule || !strcmp(g->split_rule, "idle"))
			continue;
		/* a step is seen at its first write: one write_gap after its end */
		CHECK(llabs(g->t_sched - r[i].t_sched) <= s.write_gap + 200 * US,
		      "r%d (%s): t_sched %lld vs %lld", i,
		      g->split_rule, (long long)g->t_sched, (long long)r[i].t_sched);
	}
	CHECK(split_infer_stats(si)->declined[SPLIT_D_SPREAD] >= N / 2, "%llu declined for spread",
	      (unsigned long long)split_infer_stats(si)->declined[SPLIT_D_SPREAD]);
	split_infer_free(si);
}

/* A record waits until its first token is SPLIT_SETTLE_NS old, then goes. */
static void test_hold_and_release(void)
{
	struct split_infer *si = split_infer_new();
	struct sim_req q = { .read = 10 * MS, .n_out = 2 };
	struct kpi_request_record r;

	n_got = 0;
	q.w[0] = 20 * MS;
	q.w[1] = 30 * MS;
	q.n_w = 2;
	r = record_of(&q, 0, 0);
	split_infer_open(si, 9, 1, 10 * MS, true);
	split_infer_token(si, 9, 1, 20 * MS, 0);
	split_infer_token(si, 9, 1, 30 * MS, 0);
	split_infer_done(si, 9, 1, &r);
	split_infer_release(si, 20 * MS + SPLIT_SETTLE_NS - 1, false, collect, NULL);
	CHECK(n_got == 0, "went out early");
	split_infer_release(si, 20 * MS + SPLIT_SETTLE_NS, false, collect, NULL);
	CHECK(n_got == 1 && !strcmp(got[0].split_rule, "idle"), "%d", n_got);
	/* a record of a request with no token event goes at the next release */
	struct kpi_request_record plain = record_of(&q, 1, 0);
	plain.t_first_write = KPI_NULL;
	split_infer_open(si, 9, 2, 40 * MS, false);
	split_infer_done(si, 9, 2, &plain);
	split_infer_release(si, 41 * MS, false, collect, NULL);
	CHECK(n_got == 2 && !got[1].split_rule && got[1].server_wait == plain.server_wait, "passed");
	/* a measured split (http+libllama) is never replaced */
	struct kpi_request_record joined = record_of(&q, 2, 0);
	joined.source = "http+libllama";
	joined.server_wait = KPI_NULL;
	joined.queue = 3 * MS;
	split_infer_open(si, 9, 3, 50 * MS, true);
	split_infer_token(si, 9, 3, 60 * MS, 0);
	split_infer_done(si, 9, 3, &joined);
	split_infer_release(si, UINT64_MAX, true, collect, NULL);
	CHECK(n_got == 3 && !got[2].split_rule && got[2].queue == 3 * MS, "measured");
	/* what no record needs any more is forgotten */
	split_infer_forget_pid(si, 9, collect, NULL);
	split_infer_free(si);
}

int main(void)
{
	RUN(test_idle);
	RUN(test_step);
	RUN(test_chunked);
	RUN(test_queued_behind_a_prompt);
	RUN(test_queued_for_a_slot);
	RUN(test_queued_for_a_slot_chunked);
	RUN(test_buffered_declines);
	RUN(test_multi_token_declines);
	RUN(test_replicas_decline);
	RUN(test_spread_declines);
	RUN(test_hold_and_release);
	return CHECK_DONE();
}
