/* links.h - BPF links destroyed at once. Each tracepoint or uprobe detach
 * waits for RCU grace periods of its own (40-60 ms each on a busy 2-core
 * machine); waits that overlap share them, so n links detached on n threads
 * take about one detach where one after the other took n. */
#ifndef KPI_LINKS_H
#define KPI_LINKS_H

#include <bpf/libbpf.h>

/* Destroys links[0..n) (NULL entries skipped) and sets them to NULL. */
void links_destroy(struct bpf_link **links, int n);

#endif
