/* test_agent_peer_addr.c - how a connection's ends are written into the trace
 * (agent/host/peer_addr.c): this host's in full, others as a keyed hash that
 * is stable within a trace, differs across traces, and never spells them. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"
#include "agent/host/peer_addr.h"

static char dir[] = "/tmp/kpi-peer-addr-XXXXXX";

static void fmt4(char *out, const char *a, unsigned port)
{
	unsigned char b[16] = { 0 };

	inet_pton(AF_INET, a, b);
	peer_addr_format(out, 64, AF_INET, b, port);
}

static void fmt6(char *out, const char *a, unsigned port)
{
	unsigned char b[16];

	inet_pton(AF_INET6, a, b);
	peer_addr_format(out, 64, AF_INET6, b, port);
}

static void db_path(char *out, const char *name)
{
	snprintf(out, 256, "%s/%s", dir, name);
}

static void this_host_in_full(void)
{
	char db[256], err[256], s[64];

	db_path(db, "a.db");
	CHECK(peer_addr_open(db, false, err, sizeof(err)) == 0, "%s", err);
	fmt4(s, "127.0.0.1", 8080);
	CHECK(!strcmp(s, "127.0.0.1:8080"), "%s", s);
	fmt4(s, "127.3.2.1", 1);
	CHECK(!strcmp(s, "127.3.2.1:1"), "%s", s);
	fmt6(s, "::1", 443);
	CHECK(!strcmp(s, "[::1]:443"), "%s", s);
	fmt6(s, "::ffff:127.0.0.1", 9000);      /* a dual-stack listener's view of a v4 client */
	CHECK(!strcmp(s, "127.0.0.1:9000"), "%s", s);
}

static void remote_peers_hashed(void)
{
	char db[256], err[256], key[300], a[64], b[64], c[64], v6[64];
	struct stat st;

	db_path(db, "a.db");
	CHECK(peer_addr_open(db, false, err, sizeof(err)) == 0, "%s", err);
	fmt4(a, "203.0.113.7", 40000);
	fmt4(b, "203.0.113.7", 40001);
	fmt4(c, "203.0.113.8", 40000);
	fmt6(v6, "2001:db8::7", 40000);
	CHECK(a[0] == '~' && strlen(a) == 1 + 16 + 1 + 5 && !strchr(a, '.'), "%s", a);
	CHECK(!strncmp(a, b, 17) && strcmp(a, b), "one client, two connections: %s %s", a, b);
	CHECK(strncmp(a, c, 17), "two clients: %s %s", a, c);
	CHECK(v6[0] == '~' && !strstr(v6, "db8"), "%s", v6);
	/* the key: root's file, 0400, the same hash on the next start */
	snprintf(key, sizeof(key), "%s%s", db, PEER_ADDR_KEY_SUFFIX);
	CHECK(stat(key, &st) == 0 && (st.st_mode & 0777) == 0400, "%o", st.st_mode & 0777);
	CHECK(peer_addr_open(db, false, err, sizeof(err)) == 0, "%s", err);
	fmt4(b, "203.0.113.7", 40000);
	CHECK(!strcmp(a, b), "after a restart: %s %s", a, b);
	/* another trace, another key */
	db_path(db, "b.db");
	CHECK(peer_addr_open(db, false, err, sizeof(err)) == 0, "%s", err);
	fmt4(b, "203.0.113.7", 40000);
	CHECK(strncmp(a, b, 17), "two traces: %s %s", a, b);
}

static void asked_for_in_full(void)
{
	char db[256], err[256], key[300], s[64];

	db_path(db, "c.db");
	CHECK(peer_addr_open(db, true, err, sizeof(err)) == 0, "%s", err);
	fmt4(s, "203.0.113.7", 40000);
	CHECK(!strcmp(s, "203.0.113.7:40000"), "%s", s);
	snprintf(key, sizeof(key), "%s%s", db, PEER_ADDR_KEY_SUFFIX);
	CHECK(access(key, F_OK) != 0, "--store-peer-addrs made a key: %s", key);
}

static void a_bad_key_file_is_refused(void)
{
	char db[256], err[256], key[300];
	FILE *f;

	db_path(db, "d.db");
	snprintf(key, sizeof(key), "%s%s", db, PEER_ADDR_KEY_SUFFIX);
	f = fopen(key, "w");
	CHECK(f != NULL, "%s", key);
	fputs("short", f);
	fclose(f);
	CHECK(peer_addr_open(db, false, err, sizeof(err)) == -1, "a 5-byte key was taken");
	CHECK(strstr(err, "not a 32-byte key"), "%s", err);
}

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	RUN(this_host_in_full);
	RUN(remote_peers_hashed);
	RUN(asked_for_in_full);
	RUN(a_bad_key_file_is_refused);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd)) {}
	return CHECK_DONE();
}
