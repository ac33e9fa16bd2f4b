/* loader.h - the one way a side BPF object (TLS, llama.cpp, CUPTI) comes up
 * next to bpf/kpi.bpf.c and follows the targets: open, share the main object's
 * maps, load, add its ring to the agent's poll, and keep per-target links in
 * step with the live targets, which attach.c tells every side object at once. */
#ifndef KPI_LOADER_H
#define KPI_LOADER_H

#include <bpf/libbpf.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include "bpf/kpi_event.h"

#define SIDE_MAX_TARGETS KPI_MAX_TARGETS
#define SIDE_MAX_LINKS   36      /* Go's TLS: 2 entries and up to 2 x 16 RETs */

/* A live target, as attach.c tells it. */
struct side_live {
	pid_t pid;
	bool http;                      /* followed in HTTP mode: no kpi probes */
};

/* One process a side object follows. */
struct side_target {
	pid_t pid;
	unsigned long long start_time;  /* tells a reused pid */
	bool http;
	struct bpf_link *links[SIDE_MAX_LINKS];
	void *data;                     /* the side's own state for it */
};

/* What a side object does with its targets. */
struct side_ops {
	/* t (pid, start_time, http set) is live and not followed yet: attach,
	 * fill links and data; true keeps it (attached, or refused for good:
	 * not retried), false looks again at the next sync */
	bool (*add)(void *ctx, struct side_target *t);
	/* optional: a sync on the rescan's clock met t again (a library it
	 * lacked may be mapped by now) */
	void (*recheck)(void *ctx, struct side_target *t);
	/* optional: t leaves (exited, restarted, no longer a target, or the
	 * side closes); its links are destroyed right after */
	void (*drop)(void *ctx, struct side_target *t);
};

struct side {
	const char *what;               /* "TLS", "llama.cpp", "CUPTI": named in messages */
	struct bpf_object_skeleton *skeleton;
	void *skel;                     /* the generated struct the skeleton belongs to */
	bool http_only;                 /* follows the HTTP-mode targets alone */
	struct side_ops ops;
	void *ctx;
	struct side_target t[SIDE_MAX_TARGETS];
	int n_t;
};

/* skel: what <name>__open() returned, skeleton its ->skeleton (NULL when the
 * open failed: the message says why, from errno). 0, or -1 with err. */
int side_open(struct side *s, const char *what, void *skel, struct bpf_object_skeleton *skeleton,
	      char *err, size_t errlen);
/* Before side_load: mine[i] becomes the main object's theirs[i] (one ring,
 * one target list, one set of counters for both). 0, or -1 with err. */
int side_share_maps(struct side *s, struct bpf_map *const *mine, struct bpf_map *const *theirs,
		    int n, char *err, size_t errlen);
int side_load(struct side *s, char *err, size_t errlen);
/* Adds the object's ring to the agent's, so one poll drains both. */
int side_add_ring(struct side *s, struct ring_buffer *rb, const struct bpf_map *ring,
		  ring_buffer_sample_fn fn, void *ctx, char *err, size_t errlen);
/* How it follows targets; http_only: the HTTP-mode ones alone. */
void side_follow(struct side *s, bool http_only, const struct side_ops *ops, void *ctx);

/* The live targets now (recheck: on the rescan's clock, where a pid's start
 * time is read again and ops->recheck runs): drops those gone, adds the new. */
void side_sync(struct side *s, const struct side_live *live, int n, bool recheck);
struct side_target *side_find(struct side *s, pid_t pid);
/* Follows pid now (a question about it came before the sync did); NULL when
 * full or ops->add did not keep it. */
struct side_target *side_add(struct side *s, pid_t pid, bool http);
/* Destroys t's links (it stays followed). */
void side_unlink(struct side_target *t);
/* Drops every target, destroys the object (as its skeleton's __destroy). NULL-safe. */
void side_close(struct side *s);

#endif
