/* gobin.h - what the agent reads of a Go executable before it probes its
 * crypto/tls: a function's place from .gopclntab (a stripped build keeps
 * it), the toolchain's version from .go.buildinfo, and every RET instruction
 * of the function, found by decoding its code with libcapstone.  Go moves a
 * goroutine's stack as it grows, so a uretprobe (which rewrites the return
 * address on the stack) would corrupt it: a Go function's return is caught by
 * a uprobe on each RET instead. */
#ifndef KPI_GOBIN_H
#define KPI_GOBIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GO_MAX_RETS 16  /* RETs probed a function (Go 1.19's tls Read: 7, Write: 8) */

struct go_func {
	uint64_t off;                   /* file offset of its entry probe: the function's
					 * first instruction, or the conditional jump of its
					 * stack check when what comes before it writes no
					 * argument register nor R14 (x86 uprobes emulate a
					 * jump, and step out of line over most else: one
					 * trap a call saved) */
	uint64_t entry;                 /* file offset of its first instruction */
	uint64_t ret_off[GO_MAX_RETS];  /* and of each RET in it */
	int n_ret;
};

/* Whether the ELF file at path is a Go executable (it has .gopclntab); its
 * toolchain's version ("go1.19.8") in ver, "" when .go.buildinfo does not
 * say it inline (Go before 1.18). */
bool go_exe(const char *path, char *ver, size_t len);
/* Finds each of names[0..n) (exact Go names, "crypto/tls.(*Conn).Read") in
 * the .gopclntab of Go 1.18 or later on x86-64: f[i] its entry and RETs.
 * 0, or -1 with why ("has no crypto/tls.(*Conn).Read", "has 17 RETs", ...). */
int go_funcs(const char *path, const char *const *names, struct go_func *f, int n,
	     char *why, size_t len);

#endif
