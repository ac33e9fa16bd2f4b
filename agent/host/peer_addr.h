/* peer_addr.h - how a connection's end is written into the trace: in full for
 * an address of this host (loopback, its own interfaces), as a keyed hash for
 * any other unless --store-peer-addrs (docs/security.md, What is stored). */
#ifndef KPI_PEER_ADDR_H
#define KPI_PEER_ADDR_H

#include <stdbool.h>
#include <stddef.h>

/* The key's file: the trace's path with this appended, root's, mode 0400. */
#define PEER_ADDR_KEY_SUFFIX ".peerkey"
#define PEER_ADDR_KEY_LEN 32

/* Before the privilege drop, once the trace's directory exists: reads the
 * trace's key (db + PEER_ADDR_KEY_SUFFIX), or makes it (random, 0400) for a
 * new trace; store_full (--store-peer-addrs) keeps every address in full.
 * Reads this host's addresses.  0; or -1 with err set when the key can be
 * neither read nor made: remote ends are then hashed under a key of this run
 * only (they link within the run, not across runs of the trace). */
int peer_addr_open(const char *db, bool store_full, char *err, size_t len);
/* This host's addresses again (interfaces come and go); at every rescan. */
void peer_addr_refresh(void);
/* One end of a TCP connection into out: "a.b.c.d:port" or "[v6]:port" when
 * the address is this host's (an IPv4-mapped v6 address as v4, so that both
 * ends of a connection spell it alike), else "~" and 16 hex digits of
 * HMAC-SHA256(key, address) then ":port": the same client gives the same
 * digits within a trace, which tells nothing of who it is without the key. */
void peer_addr_format(char *out, size_t len, unsigned family, const unsigned char *addr,
		      unsigned port);

#endif
