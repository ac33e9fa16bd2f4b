/* gpu_store.c - GPU rows into the trace store: prepared statements on the side
 * connection (side_store.h). */
#include <stdio.h>
#include <stdlib.h>
#include "gpu_store.h"
#include "side_store.h"

struct gpu_store {
	struct side_store *s;
	sqlite3_stmt *ins_kernel, *upd_step, *upd_req;
	int64_t run_id;
};

struct gpu_store *gpu_store_open(struct side_store *s, char *err, size_t errlen)
{
	struct gpu_store *g = calloc(1, sizeof(*g));

	if (!g)
		abort();
	g->s = s;
	g->run_id = side_store_run_id(s);
	if (side_store_prepare(s, &g->ins_kernel,
			       "INSERT INTO gpu_kernels(pid, run_id, step_id, name, kind, start_ns, end_ns, "
			       "device, stream, grid_x, grid_y, grid_z, block_x, block_y, block_z, bytes, "
			       "copy_kind, flags) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
			       "GPU", 2, err, errlen) ||
	    side_store_prepare(s, &g->upd_step,
			       "UPDATE steps SET gpu_busy_ns = ?1 WHERE pid = ?2 AND step_id = ?3 AND run_id = ?4",
			       "GPU", 2, err, errlen) ||
	    side_store_prepare(s, &g->upd_req,
			       "UPDATE requests SET prefill_gpu_ns = ?1, decode_gpu_ns = ?2 "
			       "WHERE pid = ?3 AND seq_id = ?4 AND run_id = ?5", "GPU", 2, err, errlen)) {
		gpu_store_close(g);
		return NULL;
	}
	return g;
}

void gpu_store_close(struct gpu_store *g)
{
	if (!g)
		return;
	sqlite3_finalize(g->ins_kernel);
	sqlite3_finalize(g->upd_step);
	sqlite3_finalize(g->upd_req);
	free(g);
}

int gpu_store_begin(struct gpu_store *g) { return side_store_begin(g->s); }
int gpu_store_commit(struct gpu_store *g) { return side_store_commit(g->s); }
void gpu_store_rollback(struct gpu_store *g) { side_store_rollback(g->s); }
const char *gpu_store_errmsg(struct gpu_store *g) { return side_store_errmsg(g->s); }

int gpu_store_kernel(struct gpu_store *g, const struct gpu_store_row *row)
{
	static const char *const kinds[] = { "other", "kernel", "memcpy", "memset" };
	const struct kpi_gpu_rec *r = &row->r;
	sqlite3_stmt *st = g->ins_kernel;

	sqlite3_bind_int64(st, 1, row->pid);
	sqlite3_bind_int64(st, 2, g->run_id);
	sqlite3_bind_int64(st, 3, (int64_t)r->step);
	if (row->name)
		sqlite3_bind_text(st, 4, row->name, -1, SQLITE_STATIC);
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
	return side_store_run(st);
}

int gpu_store_step_busy(struct gpu_store *g, uint32_t pid, uint64_t step, uint64_t busy_ns)
{
	sqlite3_stmt *st = g->upd_step;

	sqlite3_bind_int64(st, 1, (int64_t)busy_ns);
	sqlite3_bind_int64(st, 2, pid);
	sqlite3_bind_int64(st, 3, (int64_t)step);
	sqlite3_bind_int64(st, 4, g->run_id);
	if (side_store_run(st))
		return -1;
	return side_store_changes(g->s) > 0;
}

int gpu_store_request_gpu(struct gpu_store *g, uint32_t pid, uint64_t seq_id, uint64_t prefill_ns,
			  uint64_t decode_ns)
{
	sqlite3_stmt *st = g->upd_req;

	sqlite3_bind_int64(st, 1, (int64_t)prefill_ns);
	sqlite3_bind_int64(st, 2, (int64_t)decode_ns);
	sqlite3_bind_int64(st, 3, pid);
	sqlite3_bind_int64(st, 4, (int64_t)seq_id);
	sqlite3_bind_int64(st, 5, g->run_id);
	if (side_store_run(st))
		return -1;
	return side_store_changes(g->s) > 0;
}
