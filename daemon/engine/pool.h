/* pool.h - a persistent worker pool for the forward pass: the calling thread
 * and n-1 workers pull task indices from one counter until a job is done.
 * Workers spin briefly between jobs (a step dispatches dozens back to back),
 * then sleep on a futex. */
#ifndef KPI_ENGINE_POOL_H
#define KPI_ENGINE_POOL_H

/* Runs task (0 <= task < n_tasks) on thread (0 = caller, < pool_threads). */
typedef void (*pool_fn)(void *arg, int task, int thread);

struct pool;
/* n_threads counts the caller; NULL when a thread cannot be started. */
struct pool *pool_create(int n_threads);
void pool_destroy(struct pool *p);
int pool_threads(const struct pool *p);
/* Returns when every task has run. Not reentrant: one caller thread. */
void pool_run(struct pool *p, pool_fn fn, void *arg, int n_tasks);

#endif
