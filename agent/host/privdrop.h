/* privdrop.h - least privilege for kpi-agent: once the BPF programs are
 * loaded and attached it keeps only the capabilities that attaching to
 * kpi-infer processes started later needs, and runs as an unprivileged user. */
#ifndef KPI_PRIVDROP_H
#define KPI_PRIVDROP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PRIVDROP_DEFAULT_USER "kpiscope"

struct privdrop {
	bool switch_user;       /* setresuid/setresgid to uid/gid */
	uid_t uid;
	gid_t gid;
	char user[64];
	uint64_t keep;          /* capability bits kept (permitted = effective) */
};

/* Decides what to drop.  user: the --user value, or NULL for the default
 * (PRIVDROP_DEFAULT_USER when that user exists and the agent runs as root;
 * "root" keeps uid 0).  bind_low_port: --metrics asks for a port below 1024.
 * Returns 0, or -1 with a message saying what to do in err. */
int privdrop_plan(struct privdrop *pd, const char *user, bool bind_low_port, char *err, size_t len);
/* Keeps CAP_KILL too: the exec hold continues (SIGCONT) kpi-infer processes
 * of any user that it stopped at their exec. */
void privdrop_keep_kill(struct privdrop *pd);
/* Gives the database file (and its -wal/-shm) to the user, and its directory
 * when the agent made it (root-owned, 0750) so SQLite can still create and
 * remove the WAL there.  No-op without a user switch. */
int privdrop_own_db(const struct privdrop *pd, const char *db, char *err, size_t len);
/* Drops the bounding set and ambient capabilities, switches user, keeps
 * pd->keep (what the process holds of it) and sets no_new_privs.  Must run
 * before any thread is started (capabilities are per thread).  said gets
 * the line to print: the user and the capabilities kept. */
int privdrop_apply(const struct privdrop *pd, char *said, size_t saidlen, char *err, size_t len);
/* Keeps only the capabilities in caps of those the process holds (what a
 * helper process forked after privdrop_apply needs). 0, or -1 (errno). */
int privdrop_narrow(uint64_t caps);
/* "CAP_BPF, CAP_PERFMON" for the bits in caps. */
void privdrop_cap_names(uint64_t caps, char *buf, size_t len);

#endif
