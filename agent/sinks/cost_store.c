/* cost_store.c - cost and energy rows into the trace store: prepared statements
 * on the side connection (side_store.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cost_store.h"
#include "side_store.h"

struct cost_store {
	struct side_store *side;
	sqlite3_stmt *ins_iv, *ins_rd, *upd_req, *upd_http, *set_meta;
	int64_t run_id, mono_to_wall;
	double price;                  /* per hour; < 0: none */
};

static int prepare(struct cost_store *s, sqlite3_stmt **st, const char *sql, char *err, size_t errlen)
{
	return side_store_prepare(s->side, st, sql, "cost", 5, err, errlen);
}

struct cost_store *cost_store_open(struct side_store *side, double price_per_hour, char *err,
				   size_t errlen)
{
	struct cost_store *s = calloc(1, sizeof(*s));
	sqlite3_stmt *q = NULL;

	if (!s)
		abort();
	s->side = side;
	s->run_id = side_store_run_id(side);
	s->price = price_per_hour;
	if (prepare(s, &q, "SELECT mono_to_wall_ns FROM agent_runs WHERE run_id = ?", err, errlen))
		goto fail;
	sqlite3_bind_int64(q, 1, s->run_id);
	if (sqlite3_step(q) == SQLITE_ROW)
		s->mono_to_wall = sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	if (prepare(s, &s->ins_iv,
		    "INSERT INTO cost_samples(run_id, wall_ns, t_ns, interval_ns, busy_ns, idle_ns, "
		    "unattributed_ns, steps, step_tokens, energy_uj, idle_energy_uj, "
		    "unattributed_energy_uj, price_per_hour, cost_usd, idle_cost_usd) "
		    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", err, errlen) ||
	    prepare(s, &s->ins_rd,
		    "INSERT INTO energy_readings(run_id, wall_ns, t_ns, domain, reading_uj, delta_uj) "
		    "VALUES (?,?,?,?,?,?)", err, errlen) ||
	    prepare(s, &s->upd_req,
		    "UPDATE requests SET machine_ns = ?1, energy_j = ?2, cost_usd = ?3 "
		    "WHERE pid = ?4 AND seq_id = ?5 AND run_id = ?6", err, errlen) ||
	    prepare(s, &s->upd_http,
		    "UPDATE requests SET machine_ns = ?1, energy_j = ?2, cost_usd = ?3 "
		    "WHERE pid = ?4 AND t_arrive_ns = ?5 AND run_id = ?6 AND seq_id IS NULL "
		    "AND COALESCE(h2_stream, 0) = ?7", err, errlen) ||
	    prepare(s, &s->set_meta, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", err,
		    errlen))
		goto fail;
	return s;
fail:
	cost_store_close(s);
	return NULL;
}

void cost_store_close(struct cost_store *s)
{
	if (!s)
		return;
	sqlite3_finalize(s->ins_iv);
	sqlite3_finalize(s->ins_rd);
	sqlite3_finalize(s->upd_req);
	sqlite3_finalize(s->upd_http);
	sqlite3_finalize(s->set_meta);
	free(s);
}

/* ---- the queue ------------------------------------------------------------ */

#define PUSH(arr, n, cap, v)                                                  \
	do {                                                                  \
		if ((n) == (cap)) {                                           \
			(cap) = (cap) ? 2 * (cap) : 64;                       \
			(arr) = realloc((arr), (cap) * sizeof(*(arr)));       \
			if (!(arr))                                           \
				abort();                                      \
		}                                                             \
		(arr)[(n)++] = *(v);                                          \
	} while (0)

void cost_queue_interval(struct cost_queue *q, const struct cost_interval *i)
{
	PUSH(q->iv, q->n_iv, q->cap_iv, i);
}

void cost_queue_req(struct cost_queue *q, const struct cost_req *r)
{
	PUSH(q->req, q->n_req, q->cap_req, r);
}

void cost_queue_reading(struct cost_queue *q, const struct cost_reading *r)
{
	PUSH(q->rd, q->n_rd, q->cap_rd, r);
}

void cost_queue_free(struct cost_queue *q)
{
	free(q->iv);
	free(q->req);
	free(q->rd);
	memset(q, 0, sizeof(*q));
}

/* ---- writes --------------------------------------------------------------- */

static void bind_opt_int(sqlite3_stmt *st, int col, int64_t v)
{
	if (v >= 0)
		sqlite3_bind_int64(st, col, v);
}

static void bind_cost(sqlite3_stmt *st, int col, double price, uint64_t ns)
{
	if (price >= 0)
		sqlite3_bind_double(st, col, price * (double)ns / 3.6e12);
}

static int put_interval(struct cost_store *s, const struct cost_interval *c)
{
	sqlite3_stmt *st = s->ins_iv;
	sqlite3_bind_int64(st, 1, s->run_id);
	sqlite3_bind_int64(st, 2, (int64_t)c->t_end + s->mono_to_wall);
	sqlite3_bind_int64(st, 3, (int64_t)c->t_end);
	sqlite3_bind_int64(st, 4, (int64_t)c->interval_ns);
	sqlite3_bind_int64(st, 5, (int64_t)c->busy_ns);
	sqlite3_bind_int64(st, 6, (int64_t)c->idle_ns);
	sqlite3_bind_int64(st, 7, (int64_t)c->unattributed_ns);
	sqlite3_bind_int64(st, 8, (int64_t)c->steps);
	sqlite3_bind_int64(st, 9, (int64_t)c->step_tokens);
	bind_opt_int(st, 10, c->energy_uj);
	bind_opt_int(st, 11, c->idle_energy_uj);
	bind_opt_int(st, 12, c->unattributed_energy_uj);
	if (s->price >= 0)
		sqlite3_bind_double(st, 13, s->price);
	bind_cost(st, 14, s->price, c->interval_ns);
	bind_cost(st, 15, s->price, c->idle_ns);
	return side_store_run(st);
}

static int put_reading(struct cost_store *s, const struct cost_reading *r, const char *domain)
{
	sqlite3_stmt *st = s->ins_rd;
	sqlite3_bind_int64(st, 1, s->run_id);
	sqlite3_bind_int64(st, 2, (int64_t)r->t + s->mono_to_wall);
	sqlite3_bind_int64(st, 3, (int64_t)r->t);
	sqlite3_bind_text(st, 4, domain, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 5, (int64_t)r->reading_uj);
	bind_opt_int(st, 6, r->delta_uj);
	return side_store_run(st);
}

/* 1: updated, 0: the row is not in the store yet, -1: error */
static int put_req(struct cost_store *s, const struct cost_req *r)
{
	/* a request of a target with no steps: by its arrival and stream */
	sqlite3_stmt *st = r->http ? s->upd_http : s->upd_req;
	sqlite3_bind_int64(st, 1, (int64_t)r->machine_ns);
	if (r->energy_uj >= 0)
		sqlite3_bind_double(st, 2, (double)r->energy_uj / 1e6);
	bind_cost(st, 3, s->price, r->machine_ns);
	sqlite3_bind_int64(st, 4, r->pid);
	sqlite3_bind_int64(st, 5, r->http ? r->t_arrive : (int64_t)r->seq_id);
	sqlite3_bind_int64(st, 6, s->run_id);
	if (r->http)
		sqlite3_bind_int64(st, 7, r->stream);
	if (side_store_run(st))
		return -1;
	return side_store_changes(s->side) > 0;
}

int cost_store_meta(struct cost_store *s, const char *const *kv, int n, char *err, size_t errlen)
{
	if (side_store_begin(s->side))
		goto fail;
	for (int i = 0; i < n; i++) {
		sqlite3_bind_text(s->set_meta, 1, kv[2 * i], -1, SQLITE_STATIC);
		sqlite3_bind_text(s->set_meta, 2, kv[2 * i + 1], -1, SQLITE_STATIC);
		if (side_store_run(s->set_meta))
			goto fail;
	}
	if (!side_store_commit(s->side))
		return 0;
fail:
	snprintf(err, errlen, "writing the cost method into meta failed: %s", side_store_errmsg(s->side));
	side_store_rollback(s->side);
	return -1;
}

int cost_store_flush(struct cost_store *s, struct cost_queue *q, const char *const *domains,
		     uint64_t now, bool final, uint64_t *not_found, char *err, size_t errlen)
{
	const char *what = "BEGIN";
	size_t kept = 0, dropped = 0;
	unsigned char *keep;

	if (!q->n_iv && !q->n_rd && !q->n_req)
		return 0;
	keep = calloc(q->n_req ? q->n_req : 1, 1);
	if (!keep)
		abort();
	if (side_store_begin(s->side))
		goto fail;
	what = "insert into cost_samples";
	for (size_t i = 0; i < q->n_iv; i++)
		if (put_interval(s, &q->iv[i]))
			goto fail;
	what = "insert into energy_readings";
	for (size_t i = 0; i < q->n_rd; i++)
		if (put_reading(s, &q->rd[i], domains[q->rd[i].domain]))
			goto fail;
	what = "update the cost columns of requests";
	for (size_t i = 0; i < q->n_req; i++) {
		int r = put_req(s, &q->req[i]);
		if (r < 0)
			goto fail;
		/* 0: the store has not written its row yet */
		keep[i] = r == 0 && !final && now - q->req[i].t_done < COST_KEEP_NS;
		dropped += r == 0 && !keep[i];
	}
	what = "COMMIT";
	if (side_store_commit(s->side))
		goto fail;
	for (size_t i = 0; i < q->n_req; i++)
		if (keep[i])
			q->req[kept++] = q->req[i];
	free(keep);
	q->n_iv = q->n_rd = 0;
	q->n_req = kept;
	*not_found += dropped;
	return 0;
fail:
	free(keep);
	snprintf(err, errlen, "writing cost rows failed (%s: %s); they are kept for the next flush",
		 what, side_store_errmsg(s->side));
	side_store_rollback(s->side);
	return -1;
}
