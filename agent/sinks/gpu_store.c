/* gpu_store.c - GPU rows into the trace store: prepared statements on the
 * agent's second connection (WAL: the two take turns, same thread). */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include "gpu_store.h"

struct gpu_store {
	sqlite3 *db;
	sqlite3_stmt *ins_kernel, *upd_step, *upd_req;
	int64_t run_id;
};

static int prepare(struct gpu_store *s, sqlite3_stmt **st, const char *sql, char *err, size_t errlen)
{
	if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) == SQLITE_OK)
		return 0;
	snprintf(err, errlen, "cannot prepare the GPU statements (%s): is the trace store at schema "
		 "version 2 (schema/002_gpu.sql)?", sqlite3_errmsg(s->db));
	return -1;
}

struct gpu_store *gpu_store_open(const char *path, int64_t run_id, char *err, size_t errlen)
{
	struct gpu_store *s = calloc(1, sizeof(*s));
	if (!s)
		abort();
	s->run_id = run_id;
	if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "cannot open %s for the GPU tables: %s", path,
			 s->db ? sqlite3_errmsg(s->db) : "out of memory");
		goto fail;
	}
	sqlite3_busy_timeout(s->db, 2000);
	if (prepare(s, &s->ins_kernel,
		    "INSERT INTO gpu_kernels(pid, run_id, step_id, name, kind, start_ns, end_ns, device, "
		    "stream, grid_x, grid_y, grid_z, block_x, block_y, block_z, bytes, copy_kind, flags) "
		    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", err, errlen) ||
	    prepare(s, &s->upd_step,
		    "UPDATE steps SET gpu_busy_ns = ?1 WHERE pid = ?2 AND step_id = ?3 AND run_id = ?4",
		    err, errlen) ||
	    prepare(s, &s->upd_req,
		    "UPDATE requests SET prefill_gpu_ns = ?1, decode_gpu_ns = ?2 "
		    "WHERE pid = ?3 AND seq_id = ?4 AND run_id = ?5", err, errlen))
		goto fail;
	return s;
fail:
	gpu_store_close(s);
	return NULL;
}

void gpu_store_close(struct gpu_store *s)
{
	if (!s)
		return;
	sqlite3_finalize(s->ins_kernel);
	sqlite3_finalize(s->upd_step);
	sqlite3_finalize(s->upd_req);
	if (s->db)
		sqlite3_close(s->db);
	free(s);
}

int gpu_store_begin(struct gpu_store *s)
{
	return sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

int gpu_store_commit(struct gpu_store *s)
{
	return sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

void gpu_store_rollback(struct gpu_store *s)
{
	sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

const char *gpu_store_errmsg(struct gpu_store *s)
{
	return sqlite3_errmsg(s->db);
}

static int run(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

int gpu_store_kernel(struct gpu_store *s, uint32_t pid, const struct kpi_gpu_rec *r, const char *name)
{
	static const char *const kinds[] = { "other", "kernel", "memcpy", "memset" };
	sqlite3_stmt *st = s->ins_kernel;

	sqlite3_bind_int64(st, 1, pid);
	sqlite3_bind_int64(st, 2, s->run_id);
	sqlite3_bind_int64(st, 3, (int64_t)r->step);
	if (name)
		sqlite3_bind_text(st, 4, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, kinds[r->kind <= 3 ? r->kind : 0], -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 6, (int64_t)r->start_ns);
	sqlite3_bind_int64(st, 7, (int64_t)r->end_ns);
	sqlite3_bind_int64(st, 8, r->device_id);
	sqlite3_bind_int64(st, 9, r->stream_id);
	if (r->kind == KPI_GPU_REC_KERNEL) {
		sqlite3_bind_int64(st, 10, r->grid_x);
		sqlite3_bind_int64(st, 11, r->grid_y);
		sqlite3_bind_int64(st, 12, r->grid_z);
		sqlite3_bind_int64(st, 13, r->block_x);
		sqlite3_bind_int64(st, 14, r->block_y);
		sqlite3_bind_int64(st, 15, r->block_z);
	} else {
		sqlite3_bind_int64(st, 16, (int64_t)r->bytes);
		if (r->kind == KPI_GPU_REC_MEMCPY)
			sqlite3_bind_int64(st, 17, r->copy_kind);
	}
	sqlite3_bind_int64(st, 18, r->flags);
	return run(st);
}

int gpu_store_step_busy(struct gpu_store *s, const struct gpu_attr_step *x)
{
	sqlite3_stmt *st = s->upd_step;
	sqlite3_bind_int64(st, 1, (int64_t)x->busy_ns);
	sqlite3_bind_int64(st, 2, x->pid);
	sqlite3_bind_int64(st, 3, (int64_t)x->step);
	sqlite3_bind_int64(st, 4, s->run_id);
	if (run(st))
		return -1;
	return sqlite3_changes(s->db) > 0;
}

int gpu_store_request_gpu(struct gpu_store *s, const struct gpu_attr_req *x)
{
	sqlite3_stmt *st = s->upd_req;
	sqlite3_bind_int64(st, 1, (int64_t)x->prefill_ns);
	sqlite3_bind_int64(st, 2, (int64_t)x->decode_ns);
	sqlite3_bind_int64(st, 3, x->pid);
	sqlite3_bind_int64(st, 4, (int64_t)x->id);
	sqlite3_bind_int64(st, 5, s->run_id);
	if (run(st))
		return -1;
	return sqlite3_changes(s->db) > 0;
}

struct drain_ctx {
	struct gpu_store *s;
	int rc;
};

static bool drain_step(void *ctx, const struct gpu_attr_step *x)
{
	struct drain_ctx *c = ctx;
	int r = gpu_store_step_busy(c->s, x);
	if (r < 0)
		c->rc = -1;
	return r > 0; /* 0: the step's row is not written yet */
}

static bool drain_req(void *ctx, const struct gpu_attr_req *x)
{
	struct drain_ctx *c = ctx;
	int r = gpu_store_request_gpu(c->s, x);
	if (r < 0)
		c->rc = -1;
	return r > 0; /* 0: the request is still in flight */
}

int gpu_store_flush(struct gpu_store *s, struct gpu_attr *a, uint64_t now,
		    const struct gpu_store_row *rows, size_t n, char *err, size_t errlen)
{
	struct drain_ctx c = { s, 0 };
	const char *what = "BEGIN";

	if (gpu_store_begin(s))
		goto fail;
	what = "insert into gpu_kernels";
	for (size_t i = 0; i < n; i++)
		if (gpu_store_kernel(s, rows[i].pid, &rows[i].r, rows[i].name))
			goto fail;
	what = "update the GPU columns of steps and requests";
	gpu_attr_drain(a, now, drain_step, drain_req, &c);
	if (c.rc)
		goto fail;
	what = "COMMIT";
	if (gpu_store_commit(s))
		goto fail;
	return 0;
fail:
	snprintf(err, errlen, "writing GPU records failed (%s: %s); %zu kernel rows kept for the "
		 "next flush", what, gpu_store_errmsg(s), n);
	gpu_store_rollback(s);
	return -1;
}
