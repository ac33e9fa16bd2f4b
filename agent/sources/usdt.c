/* usdt.c - kpi-infer's USDT probes attached to bpf/kpi.bpf.c's handlers, in one
 * process or in an executable for every process, and the files so attached. */
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "agent/host/overlay.h"
#include "kpi.skel.h"
#include "links.h"
#include "usdt.h"

/* USDT probe name -> its handler, in kpi_probes.d order. */
static const struct {
	const char *name;
	size_t prog_off;
	bool optional;          /* fired by some roles only: not reported when a binary lacks it */
} usdt_probes[USDT_N_PROBES] = {
#define P(probe, prog) { probe, offsetof(struct kpi_bpf, progs.prog), false }
#define O(probe, prog) { probe, offsetof(struct kpi_bpf, progs.prog), true }
	P("request__admitted", kpi_request_admitted),
	P("request__rejected", kpi_request_rejected),
	P("request__scheduled", kpi_request_scheduled),
	P("step__begin", kpi_step_begin),
	P("step__end", kpi_step_end),
	P("request__first_token", kpi_request_first_token),
	P("request__preempted", kpi_request_preempted),
	P("request__finished", kpi_request_finished),
	P("request__cancelled", kpi_request_cancelled),
	P("response__end", kpi_response_end),
	/* disaggregated prefill and decode: only the roles that have them fire them */
	O("route__decision", kpi_route_decision),
	O("kv__send_start", kpi_kv_send_start),
	O("kv__send_end", kpi_kv_send_end),
	O("kv__recv_start", kpi_kv_recv_start),
	O("kv__recv_end", kpi_kv_recv_end),
	O("kv__slot_wait", kpi_kv_slot_wait),
	O("request__prefix_hit", kpi_request_prefix_hit),
#undef P
#undef O
};

static struct bpf_program *usdt_prog(struct kpi_bpf *skel, int i)
{
	return *(struct bpf_program **)((char *)skel + usdt_probes[i].prog_off);
}

void usdt_detach(struct usdt_links *ln)
{
	links_destroy(ln->l, USDT_N_PROBES);
}

int usdt_attach(struct kpi_bpf *skel, struct usdt_links *ln, pid_t pid, const char *exe,
		char *missing, size_t len, const char **failed)
{
	int err = 0;

	missing[0] = 0;
	*failed = NULL;
	for (int i = 0; i < USDT_N_PROBES; i++) {
		ln->l[i] = bpf_program__attach_usdt(usdt_prog(skel, i), pid, exe, "kpi",
						    usdt_probes[i].name, NULL);
		if (ln->l[i])
			continue;
		if (errno == ENOENT) {
			/* a probe the build compiled out or never fires: the rest still work */
			size_t l = strlen(missing);
			if (!usdt_probes[i].optional)
				snprintf(missing + l, len - l, "%s%s", l ? ", " : "", usdt_probes[i].name);
			continue;
		}
		err = errno;
		*failed = usdt_probes[i].name;
		break;
	}
	/* without admitted/response__end there is no request to record */
	if (*failed || !ln->l[USDT_ADMITTED] || !ln->l[USDT_RESPONSE_END]) {
		usdt_detach(ln);
		errno = err;
		return -1;
	}
	return 0;
}

/* ---- files attached for every process ------------------------------------ */

struct usdt_file *usdt_file_get(struct usdt_files *fs, struct kpi_bpf *skel, const char *exe,
				bool *fresh)
{
	struct usdt_file *f = NULL;
	const char *failed;
	struct stat st;

	*fresh = false;
	/* a container's file, from an image's layer: the layer's file, which
	 * every container of that image maps (one attach serves them all) */
	char real[PATH_MAX];
	if (!overlay_real_path(exe, real, sizeof(real)))
		exe = real;
	if (stat(exe, &st))
		return NULL;
	for (int i = 0; i < USDT_MAX_FILES; i++)
		if (fs->f[i].used && fs->f[i].dev == st.st_dev && fs->f[i].ino == st.st_ino)
			return &fs->f[i];
	for (int i = 0; i < USDT_MAX_FILES && !f; i++)
		if (!fs->f[i].used)
			f = &fs->f[i];
	if (!f)
		return NULL;
	memset(f, 0, sizeof(*f));
	*fresh = true;
	f->used = true;
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	snprintf(f->path, sizeof(f->path), "%s", exe);
	if (usdt_attach(skel, &f->ln, -1, exe, f->missing, sizeof(f->missing), &failed) == 0)
		f->state = USDT_FILE_TRACED;
	else if (failed)
		/* the kernel or our privileges refuse the attach for every process:
		 * each process of the file is attached to as it is found */
		f->state = USDT_FILE_PER_PROCESS;
	else
		f->state = USDT_FILE_NO_PROBES;
	return f;
}

void usdt_files_prune(struct usdt_files *fs, bool (*in_use)(void *ctx, const struct usdt_file *f),
		      void (*gone)(void *ctx, const struct usdt_file *f), void *ctx)
{
	for (int i = 0; i < USDT_MAX_FILES; i++) {
		struct usdt_file *f = &fs->f[i];
		struct stat st;
		if (!f->used || in_use(ctx, f))
			continue;
		if (!stat(f->path, &st) && st.st_dev == f->dev && st.st_ino == f->ino)
			continue;
		gone(ctx, f);
		usdt_detach(&f->ln);
		f->used = false;
	}
}

void usdt_files_free(struct usdt_files *fs)
{
	for (int i = 0; i < USDT_MAX_FILES; i++)
		if (fs->f[i].used)
			usdt_detach(&fs->f[i].ln);
}
