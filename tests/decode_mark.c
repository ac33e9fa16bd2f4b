/* decode_mark.c - an LD_PRELOAD shim for tests/test_agent_llama.py: wraps
 * llama.cpp's llama_decode and appends "t_entry t_exit tid waited" of every call
 * to the file named by DECODE_MARKS (CLOCK_MONOTONIC ns; waited: how long the
 * thread waited on a run queue from just before t_entry to just after t_exit).
 *
 * The reference the agent's uprobes on llama_decode are timed against. Taken
 * in the calling thread right around the call, nothing is scheduled between a
 * mark and the uprobe's: the JavaScript fixture's own marks are a wake-up away
 * (a promise resolved on another thread), late by milliseconds on a busy
 * machine. The one scheduling point left between them is the return to user
 * space after the uprobes' traps; `waited` (the kernel's run_delay, from
 * /proc/thread-self/schedstat) says when a thread was kept waiting there, or
 * anywhere inside the call. Its file name holds no "llama", so the agent never
 * mistakes it for the library (agent/llama.c looks for llama in the name). */
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "bpf/kpi_llama_event.h"

typedef int32_t (*decode_fn)(void *ctx, struct kpi_llama_batch batch);

static decode_fn real_decode;
static pthread_once_t real_once = PTHREAD_ONCE_INIT;
static int marks_fd = -1;

int32_t llama_decode(void *ctx, struct kpi_llama_batch batch);

/* libllama arrives with a dlopen()ed addon, in that object's own scope, where
 * dlsym(RTLD_NEXT) does not look: every loaded object is asked instead. */
static int find_decode(struct dl_phdr_info *info, size_t size, void *data)
{
	void *h, *sym;

	(void)size;
	(void)data;
	if (!info->dlpi_name[0] || !(h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD)))
		return 0;
	sym = dlsym(h, "llama_decode");
	dlclose(h);
	if (sym && sym != (void *)llama_decode) {
		real_decode = (decode_fn)sym;
		return 1;
	}
	return 0;
}

static void find_real_decode(void)
{
	dl_iterate_phdr(find_decode, NULL);
}

__attribute__((constructor)) static void decode_mark_init(void)
{
	const char *path = getenv("DECODE_MARKS");

	if (path && *path)
		marks_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (path && *path && marks_fd < 0)
		fprintf(stderr, "decode_mark: cannot open %s: no marks will be written\n", path);
}

/* The calling thread's run_delay (ns waited on a run queue, all its life);
 * 0 where schedstat cannot be read. */
static uint64_t run_delay_ns(void)
{
	static __thread int fd = -1;
	char buf[96];
	unsigned long long run, delay;
	ssize_t n;

	if (fd < 0)
		fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	if (fd < 0 || (n = pread(fd, buf, sizeof(buf) - 1, 0)) <= 0)
		return 0;
	buf[n] = 0;
	return sscanf(buf, "%llu %llu", &run, &delay) == 2 ? delay : 0;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The same signature as llama.h's: the batch by value (bpf/kpi_llama_event.h
 * pins its layout), passed on unchanged. */
int32_t llama_decode(void *ctx, struct kpi_llama_batch batch)
{
	pthread_once(&real_once, find_real_decode);
	if (!real_decode) {
		fprintf(stderr, "decode_mark: no loaded library but this one defines llama_decode\n");
		abort();
	}
	uint64_t w0 = run_delay_ns();
	uint64_t t0 = mono_ns();
	int32_t rc = real_decode(ctx, batch);
	uint64_t t1 = mono_ns();
	uint64_t w1 = run_delay_ns();
	if (marks_fd >= 0) {
		char line[128];
		int n = snprintf(line, sizeof(line), "%llu %llu %ld %llu\n", (unsigned long long)t0,
				 (unsigned long long)t1, (long)syscall(SYS_gettid),
				 (unsigned long long)(w1 - w0));
		if (write(marks_fd, line, (size_t)n) != n)
			fprintf(stderr, "decode_mark: short write of a mark\n");
	}
	return rc;
}
