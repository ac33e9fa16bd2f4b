/* test_agent_overlay.c - the layer file behind a path seen through an overlay
 * (agent/host/overlay.c), on layers made in a temporary directory and a
 * mountinfo written for them: the first layer holding the name decides (the
 * upper one, then the lowers in order), a whiteout hides, the inode must be
 * the one the overlay shows, and mounts that are no overlay, data-only
 * layers and layers out of sight give no answer. */
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include "check.h"
#include "agent/host/overlay.h"

static char dir[] = "/tmp/kpi-overlay-XXXXXX";
static char mountinfo[PATH_MAX];
static int whiteout_made;

static void put(const char *rel)
{
	char path[PATH_MAX], cmd[PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	if (system(cmd)) {}
	FILE *f = fopen(path, "w");
	if (f) {
		fputs(rel, f);
		fclose(f);
	}
}

static unsigned long ino_of(const char *rel)
{
	char path[PATH_MAX];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	return stat(path, &st) ? 0 : (unsigned long)st.st_ino;
}

/* The real path overlay_find gives rel (seen with the inode of layer file
 * want), checked against that file; want NULL: no answer expected. */
static void expect(const char *rel, const char *ino_from, const char *want)
{
	char real[PATH_MAX], full[PATH_MAX];
	int rc = overlay_find(mountinfo, rel, ino_of(ino_from), real, sizeof(real));

	if (!want) {
		CHECK(rc == -1, "%s: found %s, want none", rel, real);
		return;
	}
	snprintf(full, sizeof(full), "%s/%s", dir, want);
	CHECK(rc == 0, "%s: no answer, want %s", rel, full);
	CHECK(!strcmp(real, full), "%s: %s, want %s", rel, real, full);
}

static void setup(void)
{
	char path[PATH_MAX];

	put("upper/usr/lib/c");
	put("low1/usr/bin/a");
	put("low1/usr/lib/c");
	put("low 2,x/usr/bin/a");
	put("low 2,x/usr/lib/b");
	put("ext/sub/f");
	snprintf(path, sizeof(path), "%s/upper/usr/lib/b", dir);
	whiteout_made = mknod(path, S_IFCHR | 0600, makedev(0, 0)) == 0;
	snprintf(mountinfo, sizeof(mountinfo), "%s/mountinfo", dir);
	FILE *f = fopen(mountinfo, "w");
	/* the escapes are mountinfo's: \040 a space, \054 a comma */
	fprintf(f, "100 1 0:50 / / rw,relatime - overlay overlay rw,lowerdir=%s/low1:%s/low\\0402\\054x,"
		"upperdir=%s/upper,workdir=%s/work,uuid=on\n", dir, dir, dir, dir);
	fprintf(f, "101 100 8:1 /sub /data rw,relatime - ext4 /dev/sda1 rw\n");
	fprintf(f, "102 100 0:51 /usr /opt rw shared:4 - overlay overlay rw,lowerdir+=%s/low1,"
		"lowerdir+=%s/low\\0402\\054x,datadir+=%s/data\n", dir, dir, dir);
	fprintf(f, "103 100 0:52 / /srv rw - overlay overlay rw,lowerdir=%s/low1::%s/low\\0402\\054x\n",
		dir, dir);
	fprintf(f, "104 100 0:53 / /gone rw - overlay overlay rw,lowerdir=%s/low1,upperdir=%s/missing,"
		"workdir=%s/work\n", dir, dir, dir);
	fclose(f);
}

static void first_layer_with_the_name_decides(void)
{
	expect("/usr/bin/a", "low1/usr/bin/a", "low1/usr/bin/a");
	/* the lower copy is hidden by low1's: its inode is not what the overlay shows */
	expect("/usr/bin/a", "low 2,x/usr/bin/a", NULL);
	expect("/usr/lib/c", "upper/usr/lib/c", "upper/usr/lib/c");
	expect("/usr/bin/none", "low1/usr/bin/a", NULL);
}

static void a_whiteout_hides_the_lower_file(void)
{
	if (!whiteout_made)
		SKIP("mknod of a whiteout needs CAP_MKNOD");
	expect("/usr/lib/b", "low 2,x/usr/lib/b", NULL);
}

static void escaped_layer_paths_and_mount_roots(void)
{
	/* /opt shows the overlay's /usr; its layers named one by one (lowerdir+=) */
	expect("/opt/bin/a", "low1/usr/bin/a", "low1/usr/bin/a");
	expect("/opt/lib/b", "low 2,x/usr/lib/b", "low 2,x/usr/lib/b");
}

static void no_answer_off_an_overlay_or_its_named_layers(void)
{
	/* another file system mounted over the overlay */
	expect("/data/f", "ext/sub/f", NULL);
	/* after "::" come data-only layers: no name is looked up there */
	expect("/srv/usr/lib/b", "low 2,x/usr/lib/b", NULL);
	expect("/srv/usr/bin/a", "low1/usr/bin/a", "low1/usr/bin/a");
	/* an upper layer out of this agent's sight could hold a newer copy */
	expect("/gone/usr/bin/a", "low1/usr/bin/a", NULL);
	/* not a mount namespace's path at all */
	char real[PATH_MAX];
	CHECK(overlay_find(mountinfo, "usr/bin/a", ino_of("low1/usr/bin/a"), real, sizeof(real)) == -1,
	      "a relative path was looked up");
	CHECK(overlay_real_path("/usr/bin/env", real, sizeof(real)) == -1, "not under /proc/PID/root");
}

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	setup();
	RUN(first_layer_with_the_name_decides);
	RUN(a_whiteout_hides_the_lower_file);
	RUN(escaped_layer_paths_and_mount_roots);
	RUN(no_answer_off_an_overlay_or_its_named_layers);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd)) {}
	return CHECK_DONE();
}
