/* kpi_maps.bpf.h - the maps kpi.bpf.c and kpi_tls.bpf.c share (the agent loads the
 * second on the first's, bpf_map__reuse_fd): one definition, so they cannot differ. */
#ifndef KPI_MAPS_BPF_H
#define KPI_MAPS_BPF_H

#include <bpf/bpf_core_read.h>
#include "kpi_event.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);   /* resized from --ringbuf-mb */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KPI_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* (tgid << 32 | fd) -> connection state: kpi.bpf.c's; kpi_tls.bpf.c checks
 * that a socket Go's crypto/tls names is one the target accepted. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KPI_MAX_CONNS);
	__type(key, __u64);
	__type(value, struct kpi_conn);
} conns SEC(".maps");

static __always_inline __u64 conn_key(__u32 tgid, int fd)
{
	return ((__u64)tgid << 32) | (__u32)fd;
}

/* tgid -> the processes we trace (struct kpi_target): written by the agent
 * for a process it finds in /proc, by kpi_proc_exec at the exec of a traced
 * executable; removed by kpi_proc_exit and by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KPI_MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct kpi_target);
} targets SEC(".maps");

/* pid_tgid -> the SSL_read/SSL_write the thread is in (struct kpi_tls_call):
 * written at the call's entry by kpi_tls.bpf.c, attached to the targets that
 * map libssl.  kpi.bpf.c's reads and writes made inside the call name its
 * socket and its times, and send no ciphertext.  LRU: a thread that dies in
 * a call never returns. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct kpi_tls_call);
} tls_calls SEC(".maps");

/* pid_tgid -> the last read of a served socket the thread made outside an
 * SSL call (struct kpi_tls_read): names the socket of an SSL_read that makes
 * no syscall of its own (a memory BIO, as Node's), and times it.  LRU: one
 * per thread that reads a served socket. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct kpi_tls_read);
} tls_last_read SEC(".maps");

/* (tgid << 32 | fd) -> the last write of a TLS record to that served socket
 * made outside an SSL call (struct kpi_tls_read, t_seg 0): times the Write
 * of Go's crypto/tls, which writes its records inside the call.  Kept by
 * socket, not by thread: a goroutine that leaves a syscall may go on on
 * another thread (its P handed off meanwhile).  LRU: one per served socket
 * that carries TLS. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct kpi_tls_read);
} tls_last_write SEC(".maps");

/* The value kpi_tls_call.task_start holds for the current thread. */
static __always_inline unsigned int task_start32(void)
{
	return (unsigned int)BPF_CORE_READ((struct task_struct *)bpf_get_current_task(), start_time);
}

/* Adds one to the per-CPU counter idx (enum kpi_counter). */
static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		(*v)++;
}

#endif
