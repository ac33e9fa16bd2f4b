/* peer_addr.c - a connection's ends as the trace keeps them: this host's
 * addresses in full, every other one as a keyed hash (HMAC-SHA256, OpenSSL's
 * libcrypto) under the trace's own key, unless --store-peer-addrs. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include "peer_addr.h"

#define MAX_HOST_ADDRS 64

static struct {
	bool store_full;
	unsigned char key[PEER_ADDR_KEY_LEN];
	int n;                                  /* this host's addresses */
	struct { unsigned family; unsigned char a[16]; } addrs[MAX_HOST_ADDRS];
} pa;

void peer_addr_refresh(void)
{
	struct ifaddrs *ifs, *i;

	if (getifaddrs(&ifs))
		return;                 /* the last list stands */
	pa.n = 0;
	for (i = ifs; i && pa.n < MAX_HOST_ADDRS; i = i->ifa_next) {
		if (!i->ifa_addr)
			continue;
		if (i->ifa_addr->sa_family == AF_INET) {
			pa.addrs[pa.n].family = AF_INET;
			memcpy(pa.addrs[pa.n++].a, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
		} else if (i->ifa_addr->sa_family == AF_INET6) {
			pa.addrs[pa.n].family = AF_INET6;
			memcpy(pa.addrs[pa.n++].a, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
		}
	}
	freeifaddrs(ifs);
}

/* The key in path, or a new one written there (0400, created exclusively:
 * two agents starting on one trace read the one that won). */
static int key_load(const char *path, char *err, size_t len)
{
	int fd;
	ssize_t n;

	for (int tries = 0; tries < 2; tries++) {
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd >= 0) {
			n = read(fd, pa.key, sizeof(pa.key));
			close(fd);
			if (n == (ssize_t)sizeof(pa.key))
				return 0;
			snprintf(err, len, "%s holds %zd bytes, not a %d-byte key: remove it (the trace's "
				 "remote peers then hash anew)", path, n, PEER_ADDR_KEY_LEN);
			return -1;
		}
		if (errno != ENOENT)
			break;
		if (getrandom(pa.key, sizeof(pa.key), 0) != (ssize_t)sizeof(pa.key))
			break;
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0400);
		if (fd < 0 && errno == EEXIST)
			continue;       /* another agent made it first: read theirs */
		if (fd < 0)
			break;
		n = write(fd, pa.key, sizeof(pa.key));
		if (fchmod(fd, 0400) || close(fd) || n != (ssize_t)sizeof(pa.key)) {
			unlink(path);
			break;
		}
		return 0;
	}
	snprintf(err, len, "cannot read or make the trace's peer key %s (%s): remote peers are "
		 "hashed under a key of this run only", path, strerror(errno));
	return -1;
}

int peer_addr_open(const char *db, bool store_full, char *err, size_t len)
{
	char path[4096];

	pa.store_full = store_full;
	peer_addr_refresh();
	if (store_full)
		return 0;
	if (snprintf(path, sizeof(path), "%s%s", db, PEER_ADDR_KEY_SUFFIX) >= (int)sizeof(path)) {
		snprintf(err, len, "the trace's path is too long for its peer key's");
		return -1;
	}
	if (key_load(path, err, len)) {
		if (getrandom(pa.key, sizeof(pa.key), 0) != (ssize_t)sizeof(pa.key))
			memset(pa.key, 0, sizeof(pa.key));      /* never: getrandom blocks until seeded */
		return -1;
	}
	return 0;
}

static bool host_addr(unsigned family, const unsigned char *a)
{
	static const unsigned char any6[16], lo6[16] = { [15] = 1 };

	if (family == AF_INET && (a[0] == 127 || !memcmp(a, any6, 4)))
		return true;            /* loopback, or not bound yet */
	if (family == AF_INET6 && (!memcmp(a, lo6, 16) || !memcmp(a, any6, 16)))
		return true;
	for (int i = 0; i < pa.n; i++)
		if (pa.addrs[i].family == family && !memcmp(pa.addrs[i].a, a, family == AF_INET ? 4 : 16))
			return true;
	return false;
}

void peer_addr_format(char *out, size_t len, unsigned family, const unsigned char *addr,
		      unsigned port)
{
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	char a[INET6_ADDRSTRLEN] = "";

	if (family == AF_INET6 && !memcmp(addr, mapped, 12)) {
		family = AF_INET;
		addr += 12;
	}
	if (!pa.store_full && !host_addr(family, addr)) {
		unsigned char msg[17], md[EVP_MAX_MD_SIZE];
		unsigned int n = 0;
		msg[0] = (unsigned char)family;
		memcpy(msg + 1, addr, family == AF_INET ? 4 : 16);
		HMAC(EVP_sha256(), pa.key, sizeof(pa.key), msg, family == AF_INET ? 5 : 17, md, &n);
		snprintf(out, len, "~%02x%02x%02x%02x%02x%02x%02x%02x:%u", md[0], md[1], md[2], md[3],
			 md[4], md[5], md[6], md[7], port);
		OPENSSL_cleanse(md, sizeof(md));
		return;
	}
	inet_ntop(family == AF_INET ? AF_INET : AF_INET6, addr, a, sizeof(a));
	snprintf(out, len, family == AF_INET ? "%s:%u" : "[%s]:%u", a, port);
}
