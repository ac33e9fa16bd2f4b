/* hold.h - the processes kpi-agent's programs stop at their exec or listen()
 * until they are traced (the `held` map, pinned): continued by the agent once
 * attached, by its watchdog, by its teardown, and after it is gone by the next
 * agent or `kpi-agent --release-held` (docs/agent.md, Targets). */
#ifndef KPI_HOLD_H
#define KPI_HOLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct kpi_bpf;
struct hold;

/* How long a held process waits at most, whatever the agent is doing: the
 * attach takes 10-20 ms, but a main loop held up elsewhere (a slow disk, a
 * machine short of CPU) must not hold up a daemon's start with it. */
#define HOLD_MAX_MS 250

/* Continues the processes held by agents that are gone (their pid no longer
 * runs with the start time they had), from the pinned map; each one said on
 * stdout ("continued pid N ..."). The number continued, or -1 with err set
 * when the map exists but cannot be read.  No pinned map: 0. */
int hold_release_orphans(char *err, size_t len);

/* Between kpi_bpf__open and load: the programs know this agent as the holder
 * and `held` is pinned at KPI_HELD_PIN (bpffs mounted at /sys/fs/bpf when it
 * is not). NULL on no memory; a map that cannot be pinned is said on stderr
 * and kept unpinned (a hold then ends with the agent's own teardown or
 * watchdog only). */
struct hold *hold_new(struct kpi_bpf *skel, bool enabled);
/* pid is held (by this agent or another). */
bool hold_is_held(const struct hold *h, pid_t pid);
/* This agent is done with pid (attached, refused, gone): if it holds it,
 * the hold ends and the process runs on. True when it was continued. */
bool hold_release(struct hold *h, pid_t pid);
/* After the privilege drop, before any other thread: a thread that every
 * 50 ms continues what this agent has held for over HOLD_MAX_MS and what
 * agents that are gone held, and the guard, a process (kpi-hold-guard,
 * CAP_BPF and CAP_KILL only) that outlives the agent and continues what it
 * held once it is killed (hold.c). */
void hold_watchdog_start(struct hold *h);
/* The agent ends: its programs hold nothing more, then every hold of its own
 * ends (twice, around a program's run, for one that was inside when the stop
 * came). Idempotent; the watchdog stops and the guard exits. */
void hold_end(struct hold *h);
void hold_free(struct hold *h);

#endif
