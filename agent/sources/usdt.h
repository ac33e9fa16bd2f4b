/* usdt.h - kpi-infer's USDT probes (abi/kpi_probes.d) attached to the agent's
 * handlers: in one process, or in an executable for every process that runs it. */
#ifndef KPI_USDT_H
#define KPI_USDT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define USDT_N_PROBES 17
#define USDT_ADMITTED 0         /* indexes of the two a target cannot do without */
#define USDT_RESPONSE_END 9
#define USDT_MAX_FILES 16

struct kpi_bpf;
struct bpf_link;

struct usdt_links {
	struct bpf_link *l[USDT_N_PROBES];
};

/* Attaches every kpi probe of exe for pid, or for every process that runs exe
 * (pid -1: those that start later too; the kernel sets the probes'
 * semaphores in each of them).  Returns 0, with the probes exe has no call
 * site for in missing ("" when none); -1 when the process or file cannot be
 * traced, nothing left attached: request__admitted or response__end is
 * missing (missing says which), or a probe could not be attached (*failed
 * names it, errno says why; NULL otherwise). */
int usdt_attach(struct kpi_bpf *skel, struct usdt_links *ln, pid_t pid, const char *exe,
		char *missing, size_t len, const char **failed);
void usdt_detach(struct usdt_links *ln);

/* An executable whose probes are attached for every process that runs it. */
enum usdt_file_state {
	USDT_FILE_TRACED,       /* attached: its processes are traced from their exec */
	USDT_FILE_NO_PROBES,    /* not a kpi-infer with its probes: never traced */
	USDT_FILE_PER_PROCESS,  /* the attach for every process failed: attach to each */
};

struct usdt_file {
	bool used;              /* slot taken (entries never move: targets point at them) */
	dev_t dev;
	ino_t ino;
	char path[PATH_MAX];
	enum usdt_file_state state;
	char missing[256];      /* probes it has no call site for */
	struct usdt_links ln;
};

struct usdt_files {
	struct usdt_file f[USDT_MAX_FILES];
};

/* The entry of exe's file, attached now when it is new (once per file,
 * whatever comes of it; *fresh says it was this call).  A file a container
 * sees through an overlay is its image layer's file (agent/host/overlay.h),
 * the entry's path.  NULL when exe cannot
 * be read or USDT_MAX_FILES are attached already (usdt_files_prune frees
 * those of rebuilt or deleted binaries). */
struct usdt_file *usdt_file_get(struct usdt_files *fs, struct kpi_bpf *skel, const char *exe,
				bool *fresh);
/* Detaches and forgets the files no live target runs whose path now names
 * another file or none (a rebuilt or deleted binary); gone(ctx, file) is
 * told first. */
void usdt_files_prune(struct usdt_files *fs, bool (*in_use)(void *ctx, const struct usdt_file *f),
		      void (*gone)(void *ctx, const struct usdt_file *f), void *ctx);
void usdt_files_free(struct usdt_files *fs);

#endif
