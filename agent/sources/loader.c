/* loader.c - open, share, load, ring and the per-target link table of the side
 * BPF objects, worded once for all of them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "links.h"
#include "loader.h"
#include "agent/host/targets.h"

int side_open(struct side *s, const char *what, void *skel, struct bpf_object_skeleton *skeleton,
	      char *err, size_t errlen)
{
	int e = errno;

	memset(s, 0, sizeof(*s));
	s->what = what;
	if (!skel || !skeleton) {
		snprintf(err, errlen, "cannot open the %s BPF object: %s", what, strerror(e));
		return -1;
	}
	s->skel = skel;
	s->skeleton = skeleton;
	return 0;
}

int side_share_maps(struct side *s, struct bpf_map *const *mine, struct bpf_map *const *theirs,
		    int n, char *err, size_t errlen)
{
	for (int i = 0; i < n; i++) {
		int r = bpf_map__reuse_fd(mine[i], bpf_map__fd(theirs[i]));
		if (r) {
			snprintf(err, errlen, "cannot share the map %s with the %s BPF object: %s",
				 bpf_map__name(theirs[i]), s->what, strerror(-r));
			return -1;
		}
	}
	return 0;
}

int side_load(struct side *s, char *err, size_t errlen)
{
	int r = bpf_object__load_skeleton(s->skeleton);

	if (r) {
		snprintf(err, errlen, "loading the %s BPF programs failed (%s); run with -v for the "
			 "verifier's log", s->what, strerror(-r));
		return -1;
	}
	return 0;
}

int side_add_ring(struct side *s, struct ring_buffer *rb, const struct bpf_map *ring,
		  ring_buffer_sample_fn fn, void *ctx, char *err, size_t errlen)
{
	int r = ring_buffer__add(rb, bpf_map__fd(ring), fn, ctx);

	if (r) {
		snprintf(err, errlen, "cannot add the %s ring buffer: %s", s->what, strerror(-r));
		return -1;
	}
	return 0;
}

void side_follow(struct side *s, bool http_only, const struct side_ops *ops, void *ctx)
{
	s->http_only = http_only;
	s->ops = *ops;
	s->ctx = ctx;
}

/* ---- targets --------------------------------------------------------------- */

void side_unlink(struct side_target *t)
{
	links_destroy(t->links, SIDE_MAX_LINKS);
}

static void target_drop(struct side *s, int i)
{
	struct side_target *t = &s->t[i];

	if (s->ops.drop)
		s->ops.drop(s->ctx, t);
	side_unlink(t);
	s->t[i] = s->t[--s->n_t];
}

struct side_target *side_find(struct side *s, pid_t pid)
{
	for (int i = 0; i < s->n_t; i++)
		if (s->t[i].pid == pid)
			return &s->t[i];
	return NULL;
}

struct side_target *side_add(struct side *s, pid_t pid, bool http)
{
	struct side_target *t;

	if (s->n_t == SIDE_MAX_TARGETS)
		return NULL;
	t = &s->t[s->n_t];
	memset(t, 0, sizeof(*t));
	t->pid = pid;
	t->http = http;
	t->start_time = target_start_time(pid);
	if (!s->ops.add(s->ctx, t)) {
		side_unlink(t);
		return NULL;
	}
	s->n_t++;
	return t;
}

static const struct side_live *listed(const struct side_live *live, int n, pid_t pid)
{
	for (int k = 0; k < n; k++)
		if (live[k].pid == pid)
			return &live[k];
	return NULL;
}

void side_sync(struct side *s, const struct side_live *live, int n, bool recheck)
{
	if (!s || !s->skel)
		return;
	/* a pid reused by another process is told by its start time, read on
	 * the rescan's clock only (a /proc read per target) */
	for (int i = s->n_t - 1; i >= 0; i--) {
		const struct side_live *l = listed(live, n, s->t[i].pid);
		if (!l || (s->http_only && !l->http) ||
		    (recheck && target_start_time(s->t[i].pid) != s->t[i].start_time))
			target_drop(s, i);
	}
	for (int k = 0; k < n; k++) {
		if (s->http_only && !live[k].http)
			continue;
		struct side_target *t = side_find(s, live[k].pid);
		if (!t)
			side_add(s, live[k].pid, live[k].http);
		else if (recheck && s->ops.recheck)
			s->ops.recheck(s->ctx, t);
	}
}

void side_close(struct side *s)
{
	if (!s || !s->skel)
		return;
	while (s->n_t)
		target_drop(s, s->n_t - 1);
	bpf_object__destroy_skeleton(s->skeleton);
	free(s->skel);          /* as <name>__destroy() does */
	s->skel = NULL;
	s->skeleton = NULL;
}
