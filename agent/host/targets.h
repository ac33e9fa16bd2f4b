/* targets.h - finding kpi-infer processes in /proc and what the agent needs
 * to know about them (listening ports, threads, identity across pid reuse). */
#ifndef KPI_TARGETS_H
#define KPI_TARGETS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define TARGET_DEFAULT_NAME "kpi-infer"

/* Pids whose executable is exe (a path; NULL: any file named kpi-infer),
 * excluding the caller.  Returns how many were stored in out (<= max). */
int targets_scan(const char *exe, pid_t *out, int max);
/* Whether pid runs exe (NULL: a file named kpi-infer), by the scan's rule. */
bool target_matches(pid_t pid, const char *exe);
/* pid's comm (its thread name), "?" when it is gone. */
void target_comm(pid_t pid, char *out, size_t len);
/* Start time of pid in clock ticks since boot (0: gone); pid + start time
 * names a process even after its pid is reused. */
unsigned long long target_start_time(pid_t pid);
/* The process is ending: a zombie, inside its exit (PF_EXITING), or killed
 * (SIGKILL pending, which it cannot survive); false when it runs, or is gone
 * (target_start_time says that). */
bool target_ending(pid_t pid);
/* The executable's path as this process can open it (for ELF reads and
 * uprobes): target_path of what /proc/PID/exe names, or /proc/PID/exe itself
 * for a deleted (rebuilt) file. */
int target_exe_path(pid_t pid, char *buf, size_t len);
/* path, as pid sees it, named so that this process opens the same file: as it
 * is when pid shares the agent's mount namespace, else through /proc/PID/root
 * (a container's own files).  The one place that joins /proc/PID/root.  0, or -1
 * when buf is too small. */
int target_path(pid_t pid, const char *path, char *buf, size_t len);
/* TCP ports pid listens on (host order).  Returns the count. */
int target_listen_ports(pid_t pid, uint16_t *ports, int max);
/* The processes holding a socket that listens on TCP port, in every network
 * namespace: the agent's own by NETLINK_SOCK_DIAG, any other (a container's,
 * an `ip netns`) from /proc/PID/net/tcp{,6} of a process in it, each read once
 * a call; then every /proc/PID/fd (a server's forked workers share the
 * socket).  Two processes on one port in two namespaces are both found.  At
 * most max in out, the count returned. */
int target_port_owners(uint16_t port, pid_t *out, int max);
/* Path of the first file pid maps whose name starts with name (from
 * /proc/PID/maps: "libkpi_cupti.so", "libssl.so"), usable by this process
 * (target_path: through /proc/PID/root in another mount namespace).  Returns
 * 0, or -1 when pid maps none. */
int target_lib_path(pid_t pid, const char *name, char *buf, size_t len);
/* Calls fn(ctx, tid) for each thread of pid until fn returns false. */
void target_each_thread(pid_t pid, bool (*fn)(void *ctx, int tid), void *ctx);

#endif
