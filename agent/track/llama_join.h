/* llama_join.h - one llama.cpp process's engine, seen through its llama_decode
 * calls: batch steps, each sequence's generations and their marks, and the
 * join of those generations to the process's HTTP requests. Pure user space. */
#ifndef KPI_LLAMA_JOIN_H
#define KPI_LLAMA_JOIN_H

#include <stdint.h>
#include "agent/record.h"
#include "bpf/kpi_llama_event.h"

/* A held request is handed out once its t_done is this old: every step of its
 * sequence has been drained from the ring by then. */
#define LLAMA_JOIN_SETTLE_NS (200ULL * 1000000ULL)
/* Generations no request took are forgotten this long after their last step. */
#define LLAMA_JOIN_GEN_TTL_NS (120ULL * 1000000000ULL)
/* Requests held at most per process; beyond, the oldest go out unjoined. */
#define LLAMA_JOIN_MAX_HELD 4096

struct llama_join_stats {
	uint64_t calls;                 /* llama_decode calls seen */
	uint64_t failed_calls;          /* of them, returned != 0 (nothing computed) */
	uint64_t partial;               /* of them, with KPI_LLAMA_F_CUT / READ_FAIL / BAD */
	uint64_t generations;           /* new generations on a sequence */
	uint64_t joined;                /* requests that got engine marks */
	uint64_t ties;                  /* of them, matched among equals (read-order+tie) */
	uint64_t check_failed;          /* the read-order match failed its check: no marks */
	uint64_t no_generation;         /* no generation was left for the request */
	uint64_t forgotten;             /* generations no request took (GEN_TTL), or cut off */
};

struct llama_join;

struct llama_join *llama_join_new(uint32_t pid);
void llama_join_free(struct llama_join *j);

/* One llama_decode call: updates the generations of its sequences and fills
 * step (a 'libllama' steps row). */
void llama_join_call(struct llama_join *j, const struct kpi_llama_ev *e, struct kpi_step_record *step);

/* Keeps a copy of rec (an 'http' record of this process) until it can be
 * joined. */
void llama_join_hold(struct llama_join *j, const struct kpi_request_record *rec);

/* Hands out, in the order their requests were read, the held records whose
 * t_done + LLAMA_JOIN_SETTLE_NS <= now (every one when final), each with the
 * engine's marks when its generation was found and checked. */
void llama_join_release(struct llama_join *j, uint64_t now, bool final,
			void (*out)(void *ctx, const struct kpi_request_record *rec), void *ctx);

const struct llama_join_stats *llama_join_stats(const struct llama_join *j);

#endif
