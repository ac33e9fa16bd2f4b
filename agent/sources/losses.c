/* losses.c - what the kernel side lost, for the loss ledger: the per-CPU
 * counters summed, and the LRU tables' evictions worked out from their counts. */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "kpi.skel.h"
#include "losses.h"

#define SCAN_NS 5000000000ull   /* LRU tables are counted every 5 s */

uint64_t losses_percpu_sum(const struct bpf_map *map, unsigned int idx, int n_cpus)
{
	__u64 vals[1024];
	uint64_t sum = 0;

	if (n_cpus <= 0 || n_cpus > 1024 ||
	    bpf_map__lookup_elem(map, &idx, sizeof(idx), vals, sizeof(__u64) * n_cpus, 0))
		return 0;
	for (int i = 0; i < n_cpus; i++)
		sum += vals[i];
	return sum;
}

uint64_t losses_bpf_counter(const struct loss_probe *lp, unsigned int idx)
{
	return losses_percpu_sum(lp->skel->maps.counters, idx, lp->n_cpus);
}

/* Entries now in a hash table with 8-byte keys; -1 when it cannot be read. */
static long map_entries(const struct bpf_map *m)
{
	__u64 key, next;
	long n = 0;
	int fd = bpf_map__fd(m);

	if (fd < 0)
		return -1;
	for (int rc = bpf_map_get_next_key(fd, NULL, &next); !rc;
	     rc = bpf_map_get_next_key(fd, &key, &next)) {
		key = next;
		n++;
	}
	return n;
}

/* An LRU table evicts without telling anyone: what went in, less what the
 * programs took out, less what is still there, is what it evicted. The
 * counters move while the keys are walked, so a reading can be off by the
 * entries added meanwhile; the total keeps the largest reading. */
static void count_evicted(struct loss_probe *lp, int k, const struct bpf_map *m,
			  unsigned int ins_idx, unsigned int del_idx)
{
	uint64_t del = losses_bpf_counter(lp, del_idx);
	long live = map_entries(m);
	uint64_t ins = losses_bpf_counter(lp, ins_idx);

	if (live < 0 || ins < del + (uint64_t)live)
		return;
	if (ins - del - (uint64_t)live > lp->evicted[k])
		lp->evicted[k] = ins - del - (uint64_t)live;
}

void losses_collect(struct loss_probe *lp, uint64_t now, struct kpi_loss_record *out)
{
	out->total[KPI_LOSS_RINGBUF_DROPS] = losses_bpf_counter(lp, KPI_CNT_DROPS);
	out->total[KPI_LOSS_CONN_UNTRACKED] = losses_bpf_counter(lp, KPI_CNT_CONN_FULL);
	if (now >= lp->next_scan) {
		count_evicted(lp, 0, lp->skel->maps.socks, KPI_CNT_SOCKS_INS, KPI_CNT_SOCKS_DEL);
		if (bpf_map__autocreate(lp->skel->maps.sys_args))
			count_evicted(lp, 1, lp->skel->maps.sys_args, KPI_CNT_SYS_ARGS_INS,
				      KPI_CNT_SYS_ARGS_DEL);
		/* an SSL call whose thread died inside it, or one of more calls
		 * in flight at once than the table holds */
		count_evicted(lp, 2, lp->skel->maps.tls_calls, KPI_CNT_TLS_CALLS_INS, KPI_CNT_TLS_CALLS_DEL);
		lp->next_scan = now + SCAN_NS;
	}
	out->total[KPI_LOSS_MAP_EVICTIONS] = lp->evicted[0] + lp->evicted[1] + lp->evicted[2];
}
