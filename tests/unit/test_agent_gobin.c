/* test_agent_gobin.c - agent/host/gobin.c on the Go server tests/lib/build.mk
 * builds (Debian's Go 1.19): the functions .gopclntab names are where the
 * symbol table says, every RET found is a RET byte, and a .gopclntab whose
 * header lies is refused with a reason, never read past. */
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"
#include "agent/host/gobin.h"

static char exe[PATH_MAX], stripped[PATH_MAX + 16];
static const char *const fn[2] = { "crypto/tls.(*Conn).Read", "crypto/tls.(*Conn).Write" };

static void need_go(void)
{
	if (access(exe, R_OK) || access(stripped, R_OK))
		SKIP("%.200s is not built (make go-servers; Debian's golang-go)", exe);
}

/* The symbol table's file offset of name, from libelf alone. */
static uint64_t symtab_offset(const char *path, const char *name)
{
	int fd = open(path, O_RDONLY);
	Elf *e;
	Elf_Scn *scn = NULL;
	uint64_t off = 0, addr = 0;

	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ, NULL);
	while (e && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB)
			continue;
		Elf_Data *d = elf_getdata(scn, NULL);
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym s;
			const char *n;
			if (gelf_getsym(d, (int)i, &s) && (n = elf_strptr(e, sh.sh_link, s.st_name)) &&
			    !strcmp(n, name))
				addr = s.st_value;
		}
	}
	size_t np = 0;
	elf_getphdrnum(e, &np);
	for (size_t i = 0; addr && i < np; i++) {
		GElf_Phdr ph;
		if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD && addr >= ph.p_vaddr &&
		    addr < ph.p_vaddr + ph.p_filesz)
			off = addr - ph.p_vaddr + ph.p_offset;
	}
	elf_end(e);
	close(fd);
	return off;
}

static uint8_t byte_at(const char *path, uint64_t off)
{
	int fd = open(path, O_RDONLY);
	uint8_t b = 0;

	CHECK(fd >= 0 && pread(fd, &b, 1, (off_t)off) == 1, "%s", path);
	close(fd);
	return b;
}

static void go_exe_names_go(void)
{
	char ver[32];

	need_go();
	CHECK(go_exe(exe, ver, sizeof(ver)), "%s", exe);
	CHECK(!strncmp(ver, "go1.", 4), "version '%s'", ver);
	CHECK(go_exe(stripped, ver, sizeof(ver)) && !strncmp(ver, "go1.", 4), "stripped: '%s'", ver);
	CHECK(!go_exe("/bin/sh", ver, sizeof(ver)) && !ver[0], "/bin/sh is not Go");
}

static void funcs_where_the_symbols_say(void)
{
	struct go_func f[2], g[2];
	char why[256] = "";

	need_go();
	CHECK(!go_funcs(exe, fn, f, 2, why, sizeof(why)), "%s", why);
	CHECK(!go_funcs(stripped, fn, g, 2, why, sizeof(why)), "stripped: %s", why);
	for (int i = 0; i < 2; i++) {
		uint64_t sym = symtab_offset(exe, fn[i]);
		CHECK(sym && f[i].entry == sym, "%s: %#llx, symtab %#llx", fn[i],
		      (unsigned long long)f[i].entry, (unsigned long long)sym);
		CHECK(f[i].n_ret > 0 && f[i].n_ret == g[i].n_ret, "%s: %d RETs, stripped %d", fn[i],
		      f[i].n_ret, g[i].n_ret);
		for (int r = 0; r < f[i].n_ret; r++)
			CHECK(byte_at(exe, f[i].ret_off[r]) == 0xc3 && f[i].ret_off[r] > f[i].entry,
			      "%s: RET %d at %#llx", fn[i], r, (unsigned long long)f[i].ret_off[r]);
		/* the entry probe: Go's stack check's JBE (0f 86) a few bytes in */
		CHECK(f[i].off > f[i].entry && f[i].off - f[i].entry <= 12 &&
		      byte_at(exe, f[i].off) == 0x0f && byte_at(exe, f[i].off + 1) == 0x86,
		      "%s: entry probe at +%llu", fn[i], (unsigned long long)(f[i].off - f[i].entry));
	}
	const char *none[1] = { "crypto/tls.(*Conn).NoSuchMethod" };
	CHECK(go_funcs(exe, none, f, 1, why, sizeof(why)) && strstr(why, "has no crypto/tls"), "%s", why);
}

/* A copy of the stripped server with 8 bytes at the .gopclntab's offset rel
 * set to v: go_funcs refuses it with a reason. */
static void lying_header(size_t rel, uint64_t v, const char *expect)
{
	char tmp[] = "/tmp/kpi-gobin-XXXXXX", why[256] = "";
	int in = open(stripped, O_RDONLY), out = mkstemp(tmp);
	static char buf[1 << 16];
	ssize_t n;
	struct go_func f[2];
	uint64_t pcln = 0;

	CHECK(in >= 0 && out >= 0, "%s", tmp);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		CHECK(write(out, buf, (size_t)n) == n, "write");
	elf_version(EV_CURRENT);
	Elf *e = elf_begin(in, ELF_C_READ, NULL);
	Elf_Scn *scn = NULL;
	size_t shstr;
	elf_getshdrstrndx(e, &shstr);
	while ((scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		if (gelf_getshdr(scn, &sh) && !strcmp(elf_strptr(e, shstr, sh.sh_name), ".gopclntab"))
			pcln = sh.sh_offset;
	}
	elf_end(e);
	close(in);
	CHECK(pcln, "no .gopclntab");
	CHECK(pwrite(out, &v, rel == 0 ? 4 : 8, (off_t)(pcln + rel)) > 0, "pwrite");
	close(out);
	int rc = go_funcs(tmp, fn, f, 2, why, sizeof(why));
	unlink(tmp);
	CHECK(rc == -1 && strstr(why, expect), "rel %zu: rc %d, '%s'", rel, rc, why);
}

static void lying_pclntab_refused(void)
{
	need_go();
	lying_header(0, 0xfffffffb, "of another Go");           /* Go 1.2-1.15's magic */
	lying_header(8, 1ULL << 40, "header lies");              /* nfunc */
	lying_header(64, 1ULL << 40, "header lies");             /* pclnOffset */
	lying_header(32, 1ULL << 40, "header lies");             /* funcnameOffset */
}

int main(int argc, char **argv)
{
	char self[PATH_MAX];

	snprintf(self, sizeof(self), "%s", argv[0]);
	snprintf(exe, sizeof(exe), "%s/go-sse-server", dirname(self));
	snprintf(stripped, sizeof(stripped), "%s-stripped", exe);
	(void)argc;
	RUN(go_exe_names_go);
	RUN(funcs_where_the_symbols_say);
	RUN(lying_pclntab_refused);
	return CHECK_DONE();
}
