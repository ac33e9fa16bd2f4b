/* test_cupti_lib.c - build/libkpi_cupti.so as shipped: its USDT notes, its one
 * export, and loading it the way the CUDA driver does (dlopen, then
 * InitializeInjection) in a child process, with and without a listener. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "abi/kpi_step.h"

KPI_CUPTI_STEP_DEFINE();

#define LIB "build/libkpi_cupti.so"

static const char *probes[] = { "activity__batch", "kernel__name", "clock__sync", "stats",
				"state" };

/* Runs a shell command; returns its stdout (static buffer). */
static const char *cmd_out(const char *cmd)
{
	static char out[1 << 16];
	size_t n = 0;
	FILE *f = popen(cmd, "r");
	CHECK(f, "popen %s", cmd);
	while (n < sizeof(out) - 1) {
		size_t r = fread(out + n, 1, sizeof(out) - 1 - n, f);
		if (!r)
			break;
		n += r;
	}
	out[n] = 0;
	int st = pclose(f);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "'%s' exit status %d", cmd, st);
	return out;
}

/* The note's semaphore address (link-time) for one probe, 0 if none. */
static uint64_t semaphore_of(const char *notes, const char *probe)
{
	char key[64];
	snprintf(key, sizeof(key), "Name: %s\n", probe);
	const char *p = strstr(notes, key);
	if (!p || !(p = strstr(p, "Semaphore: ")))
		return 0;
	return strtoull(p + strlen("Semaphore: "), NULL, 16);
}

static void test_usdt_notes(void)
{
	const char *notes = cmd_out("readelf -n " LIB);
	CHECK(strstr(notes, "Provider: kpi_cupti"), "no kpi_cupti provider in the notes of " LIB);
	for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
		char key[64];
		snprintf(key, sizeof(key), "Name: %s\n", probes[i]);
		const char *p = strstr(notes, key);
		CHECK(p, "probe kpi_cupti:%s missing", probes[i]);
		CHECK(!strstr(p + 1, key), "probe kpi_cupti:%s has more than one call site", probes[i]);
		CHECK(semaphore_of(notes, probes[i]), "probe %s has no semaphore", probes[i]);
	}
}

/* libbpf and bpftrace read arguments from registers, constants and
 * register-relative memory; "8@sym+off(%rip)" (a global) they cannot. */
static void test_probe_arguments_readable(void)
{
	const char *notes = cmd_out("readelf -n " LIB);
	for (const char *p = notes; (p = strstr(p, "Arguments: ")); p++) {
		const char *end = strchr(p, '\n');
		int len = end ? (int)(end - p) : (int)strlen(p);
		CHECK(!memmem(p, (size_t)len, "(%rip)", 6), "RIP-relative probe argument: %.*s", len, p);
	}
}

static void test_exports_only_injection_entry(void)
{
	const char *syms = cmd_out("nm -D --defined-only " LIB);
	CHECK(strstr(syms, " T InitializeInjection\n"), "InitializeInjection not exported:\n%s", syms);
	int lines = 0;
	for (const char *p = syms; *p; p++)
		lines += *p == '\n';
	CHECK(lines == 1, "exports more than InitializeInjection:\n%s", syms);
	const char *dyn = cmd_out("readelf -d " LIB);
	CHECK(strstr(dyn, "libcupti.so"), "not linked against libcupti:\n%s", dyn);
}

/* Child: load, initialise, optionally pretend a listener attached by raising
 * the activity__batch semaphore (what uprobe ref_ctr does), publish steps,
 * exit normally. Its stderr comes back through err_fd. */
static int run_child(uint64_t sem_addr, int bad_slot, char *err, size_t errlen, int *status)
{
	int fds[2];
	CHECK(pipe(fds) == 0, "pipe: %s", strerror(errno));
	pid_t pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		dup2(fds[1], 2);
		close(fds[0]);
		setenv("KPI_CUPTI_POLL_MS", "5", 1);
		setenv("KPI_CUPTI_VERBOSE", "1", 1);
		if (bad_slot)
			kpi_cupti_step_slot.magic = 0; /* a host built against another kpi_step.h */
		void *h = dlopen(LIB, RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			fprintf(stderr, "dlopen: %s\n", dlerror());
			_exit(3);
		}
		int (*init)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
		if (!init || init() != 1)
			_exit(4);
		if (sem_addr) {
			struct link_map *lm;
			if (dlinfo(h, RTLD_DI_LINKMAP, &lm))
				_exit(5);
			volatile unsigned short *sem = (unsigned short *)(lm->l_addr + sem_addr);
			*sem = 1;
			for (uint64_t s = 1; s <= 20; s++) {
				kpi_cupti_step_begin(s);
				usleep(5000);
				kpi_cupti_step_end();
			}
			*sem = 0;
			usleep(50000);
		}
		exit(0); /* atexit handlers run: the library's flush must not hang or crash */
	}
	close(fds[1]);
	size_t n = 0;
	ssize_t r;
	while (n < errlen - 1 && (r = read(fds[0], err + n, errlen - 1 - n)) > 0)
		n += (size_t)r;
	err[n] = 0;
	close(fds[0]);
	CHECK(waitpid(pid, status, 0) == pid, "waitpid: %s", strerror(errno));
	return 0;
}

static int count(const char *s, const char *needle)
{
	int c = 0;
	for (const char *p = s; (p = strstr(p, needle)); p++)
		c++;
	return c;
}

static void check_child(const char *err, int status)
{
	CHECK(!WIFSIGNALED(status), "host killed by signal %d; stderr:\n%s", WTERMSIG(status), err);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "host exit %d; stderr:\n%s",
	      WEXITSTATUS(status), err);
	CHECK(strstr(err, "kpi_cupti: loaded in pid"), "no load line; stderr:\n%s", err);
	/* a CUPTI failure (normal without a GPU driver) is one line, and says so */
	int fails = count(err, " failed: ");
	CHECK(fails <= 1, "%d failure lines (one at most):\n%s", fails, err);
	if (fails)
		CHECK(strstr(err, "collection is off for this process"), "failure line says not what happens:\n%s", err);
}

static void test_inject_without_listener(void)
{
	char err[8192];
	int status;
	run_child(0, 0, err, sizeof(err), &status);
	check_child(err, status);
	CHECK(!strstr(err, "exports no"), "the step slot exported by this test was not found:\n%s", err);
	CHECK(!strstr(err, "collection on"), "collecting with no listener:\n%s", err);
}

static void test_inject_with_listener(void)
{
	char err[8192];
	int status;
	uint64_t sem = semaphore_of(cmd_out("readelf -n " LIB), "activity__batch");
	CHECK(sem, "no activity__batch semaphore");
	run_child(sem, 0, err, sizeof(err), &status);
	check_child(err, status);
	CHECK(!strstr(err, "exports no"), "the step slot exported by this test was not found:\n%s", err);
	if (access("/dev/nvidiactl", F_OK) != 0)
		CHECK(count(err, " failed: ") == 1 || strstr(err, "collection on"),
		      "neither collecting nor one failure line:\n%s", err);
}

/* Without a step source the library subscribes to no callback, and a listener
 * makes it enable the activity kinds: without a GPU driver that fails, in one
 * line, and the host runs on. */
static void test_listener_without_step_source(void)
{
	char err[8192];
	int status;
	uint64_t sem = semaphore_of(cmd_out("readelf -n " LIB), "activity__batch");
	run_child(sem, 1, err, sizeof(err), &status);
	check_child(err, status);
	CHECK(strstr(err, "has magic 0"), "a wrong slot must be named:\n%s", err);
	if (access("/dev/nvidiactl", F_OK) != 0)
		CHECK(strstr(err, "cuptiActivityEnable failed") && strstr(err, "collection off"),
		      "enabling without a driver must fail in one line and switch off:\n%s", err);
	else
		CHECK(strstr(err, "collection on"), "a listener must switch collection on:\n%s", err);
}

/* The probes for real: bpftrace -p on a host that loaded the library sets the
 * semaphores, the library switches on (a GPU) or fails in one line (none),
 * and docs/cupti.bt prints the state change and the calibration point. */
static void test_probes_fire_under_bpftrace(void)
{
	if (geteuid() != 0)
		SKIP("attaching bpftrace needs root");
	if (system("command -v bpftrace >/dev/null 2>&1") != 0)
		SKIP("bpftrace is not installed (make deps installs it)");
	int ready[2];
	CHECK(pipe(ready) == 0, "pipe");
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		close(ready[0]);
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, 2);
		setenv("KPI_CUPTI_POLL_MS", "10", 1);
		/* no step source: nothing to subscribe, so without a driver setup
		 * succeeds and the failure comes when the listener switches it on */
		kpi_cupti_step_slot.magic = 0;
		void *h = dlopen(LIB, RTLD_NOW | RTLD_LOCAL);
		int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
		if (!init || init() != 1)
			_exit(4);
		if (write(ready[1], "r", 1) != 1)
			_exit(5);
		sleep(60); /* killed by the test once bpftrace has seen what it needs */
		exit(0);
	}
	close(ready[1]);
	char c;
	CHECK(read(ready[0], &c, 1) == 1, "host did not start");
	close(ready[0]);
	char cmd[256];
	/* Read until both the state change and a calibration point were printed
	 * (bpftrace's start-up can take seconds on a loaded machine), then end
	 * the host: bpftrace -p exits with it. The timeout bounds a failure. */
	snprintf(cmd, sizeof(cmd), "timeout -s INT 45 bpftrace -B line -p %d docs/cupti.bt 2>&1",
		 (int)pid);
	FILE *f = popen(cmd, "r");
	CHECK(f, "popen bpftrace");
	static char out[1 << 16];
	size_t n = 0;
	char line[512];
	bool state = false, sync = false;
	while (!(state && sync) && fgets(line, sizeof(line), f)) {
		size_t l = strlen(line);
		if (n + l < sizeof(out)) {
			memcpy(out + n, line, l);
			n += l;
		}
		sync |= strstr(line, "clock__sync cupti=") != NULL;
		state |= strstr(line, "state -1 ") != NULL || strstr(line, "state 1 ") != NULL;
	}
	out[n] = 0;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	pclose(f);
	CHECK(strstr(out, "Attaching 5 probes"), "bpftrace did not attach the 5 probes:\n%s", out);
	CHECK(strstr(out, "clock__sync cupti="), "no calibration point seen:\n%s", out);
	if (access("/dev/nvidiactl", F_OK) != 0)
		CHECK(strstr(out, "state -1 cuptiActivityEnable failed"), "no disabled state seen:\n%s", out);
	else
		CHECK(strstr(out, "state 1 listener attached"), "collection did not switch on:\n%s", out);
}

int main(void)
{
	RUN(test_usdt_notes);
	RUN(test_probe_arguments_readable);
	RUN(test_exports_only_injection_entry);
	RUN(test_inject_without_listener);
	RUN(test_inject_with_listener);
	RUN(test_listener_without_step_source);
	RUN(test_probes_fire_under_bpftrace);
	return CHECK_DONE();
}
