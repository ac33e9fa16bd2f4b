/* gobin.c - Go executables' function table (.gopclntab, Go 1.18 on) and the
 * RET instructions of a function (libcapstone), for the TLS side's uprobes.
 *
 * The pclntab of Go 1.18+ begins with runtime's pcHeader: magic 0xfffffff0
 * (1.18, 1.19) or 0xfffffff1 (1.20 on), minLC, ptrSize, then eight words:
 * nfunc, nfiles, textStart, funcnameOffset, cuOffset, filetabOffset,
 * pctabOffset, pclnOffset.  At pclnOffset, the functab: nfunc pairs of
 * (entry offset from textStart, offset of its _func from the functab), then
 * the end's entry offset; a _func begins with its entry offset and the
 * offset of its name in the funcnametab (runtime/symtab.go, debug/gosym). */
#include <capstone/capstone.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gobin.h"

#define PCLN_HEADER 72          /* magic, 4 bytes, 8 words */
#define FUNC_MAX_BYTES (1 << 20)

struct gofile {
	int fd;
	Elf *e;
};

static int gofile_open(struct gofile *g, const char *path)
{
	g->e = NULL;
	g->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (g->fd < 0)
		return -1;
	elf_version(EV_CURRENT);
	g->e = elf_begin(g->fd, ELF_C_READ_MMAP, NULL);
	return g->e ? 0 : -1;
}

static void gofile_close(struct gofile *g)
{
	elf_end(g->e);
	if (g->fd >= 0)
		close(g->fd);
}

/* The named section's bytes (mapped: valid until gofile_close), NULL none. */
static const uint8_t *section(struct gofile *g, const char *name, size_t *size, uint64_t *addr)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;

	if (elf_getshdrstrndx(g->e, &shstrndx))
		return NULL;
	while ((scn = elf_nextscn(g->e, scn))) {
		GElf_Shdr sh;
		const char *n;
		if (!gelf_getshdr(scn, &sh) || !(n = elf_strptr(g->e, shstrndx, sh.sh_name)) ||
		    strcmp(n, name) || sh.sh_type == SHT_NOBITS)
			continue;
		Elf_Data *d = elf_getdata(scn, NULL);
		if (!d || !d->d_buf)
			return NULL;
		*size = d->d_size;
		if (addr)
			*addr = sh.sh_addr;
		return d->d_buf;
	}
	return NULL;
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static uint32_t rd32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

bool go_exe(const char *path, char *ver, size_t len)
{
	struct gofile g;
	const uint8_t *b;
	size_t n = 0;
	bool is_go = false;

	ver[0] = 0;
	if (gofile_open(&g, path))
		goto out;
	is_go = section(&g, ".gopclntab", &n, NULL) != NULL;
	/* .go.buildinfo: "\xff Go buildinf:", ptrSize, flags; flags bit 2: the
	 * version follows at 32 as a uvarint length and its bytes (Go 1.18 on) */
	b = section(&g, ".go.buildinfo", &n, NULL);
	if (is_go && b && n > 33 && !memcmp(b, "\xff Go buildinf:", 14) && (b[15] & 2)) {
		size_t l = 0, i = 32;
		for (int shift = 0; i < n && shift < 28; shift += 7, i++) {
			l |= (size_t)(b[i] & 0x7f) << shift;
			if (!(b[i] & 0x80)) {
				i++;
				break;
			}
		}
		if (l && l < len && i + l <= n && l < 32) {
			memcpy(ver, b + i, l);
			ver[l] = 0;
		}
	}
out:
	gofile_close(&g);
	return is_go;
}

/* The file offset of the executable code at vaddr, 0 none. */
static uint64_t file_offset(struct gofile *g, uint64_t vaddr)
{
	size_t n;

	if (elf_getphdrnum(g->e, &n))
		return 0;
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;
		if (gelf_getphdr(g->e, (int)i, &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X) &&
		    vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz)
			return vaddr - ph.p_vaddr + ph.p_offset;
	}
	return 0;
}

/* Whether insn leaves the registers an entry probe reads (the receiver and
 * buffer in RAX, RBX, RCX, the goroutine in R14) as they were. */
static bool keeps_args(csh cs, const cs_insn *insn)
{
	cs_regs rd, wr;
	uint8_t n_rd, n_wr;

	if (cs_regs_access(cs, insn, rd, &n_rd, wr, &n_wr) != CS_ERR_OK)
		return false;
	for (int i = 0; i < n_wr; i++)
		if (wr[i] == X86_REG_RAX || wr[i] == X86_REG_RBX || wr[i] == X86_REG_RCX ||
		    wr[i] == X86_REG_R14 || wr[i] == X86_REG_RSP || wr[i] == X86_REG_RIP)
			return false;
	return true;
}

/* The code [off, off + size) of the file: its entry probe's place and its
 * RETs, every instruction decoded in order; one that does not decode fails
 * it (never a guess). */
static int find_rets(struct gofile *g, uint64_t off, size_t size, struct go_func *f,
		     const char *name, char *why, size_t len)
{
	uint8_t *code = malloc(size);
	const uint8_t *p = code;
	uint64_t addr = off;
	size_t left = size;
	bool prologue = true;   /* still in the stack check: no instruction written an argument */
	int k = 0;
	csh cs;
	cs_insn *insn;
	int rc = -1;

	if (!code)
		abort();
	if (pread(g->fd, code, size, (off_t)off) != (ssize_t)size) {
		snprintf(why, len, "could not read the code of %s", name);
		free(code);
		return -1;
	}
	if (cs_open(CS_ARCH_X86, CS_MODE_64, &cs) != CS_ERR_OK) {
		snprintf(why, len, "libcapstone could not open its x86-64 decoder");
		free(code);
		return -1;
	}
	cs_option(cs, CS_OPT_DETAIL, CS_OPT_ON);
	insn = cs_malloc(cs);
	f->entry = f->off = off;
	f->n_ret = 0;
	for (; left && cs_disasm_iter(cs, &p, &left, &addr, insn); k++) {
		/* Go's prologue: [LEAQ -N(SP), R12;] CMPQ 16(R14), SP|R12; JBE morestack */
		if (prologue && k < 3 && insn->id == X86_INS_JBE) {
			f->off = insn->address;
			prologue = false;
		} else if (prologue && (k >= 2 || !keeps_args(cs, insn))) {
			prologue = false;
		}
		if (insn->id != X86_INS_RET)
			continue;
		if (f->n_ret == GO_MAX_RETS) {
			snprintf(why, len, "%s has more than %d RET instructions", name, GO_MAX_RETS);
			goto out;
		}
		f->ret_off[f->n_ret++] = insn->address;
	}
	if (left)
		snprintf(why, len, "an instruction of %s at +%#zx does not decode", name, size - left);
	else if (!f->n_ret)
		snprintf(why, len, "%s has no RET instruction", name);
	else
		rc = 0;
out:
	cs_free(insn, 1);
	cs_close(&cs);
	free(code);
	return rc;
}

int go_funcs(const char *path, const char *const *names, struct go_func *f, int n,
	     char *why, size_t len)
{
	struct gofile g;
	const uint8_t *pcln;
	size_t size = 0;
	uint64_t text_addr = 0;
	int found = 0, rc = -1;

	if (gofile_open(&g, path)) {
		snprintf(why, len, "%s cannot be read as ELF", path);
		goto out;
	}
	if (!(pcln = section(&g, ".gopclntab", &size, NULL)) || size < PCLN_HEADER) {
		snprintf(why, len, "has no .gopclntab");
		goto out;
	}
	uint32_t magic = rd32(pcln);
	if ((magic != 0xfffffff0 && magic != 0xfffffff1) || pcln[7] != 8) {
		snprintf(why, len, "has a .gopclntab of another Go (magic %#x, pointers of %u "
			 "bytes): Go 1.18 or later on 64 bits is read", magic, pcln[7]);
		goto out;
	}
	uint64_t nfunc = rd64(pcln + 8), text = rd64(pcln + 24), nameoff = rd64(pcln + 32);
	uint64_t tab = rd64(pcln + 64);
	if (!text) {            /* not set by the linker: the text section's start */
		size_t ts;
		if (section(&g, ".text", &ts, &text_addr))
			text = text_addr;
	}
	if (nameoff >= size || tab >= size || nfunc > (size - tab) / 8 - 1) {
		snprintf(why, len, "has a .gopclntab whose header lies");
		goto out;
	}
	const uint8_t *ft = pcln + tab;
	for (int k = 0; k < n; k++)
		f[k].n_ret = -1;
	for (uint64_t i = 0; i < nfunc && found < n; i++) {
		uint32_t entry = rd32(ft + 8 * i), funcoff = rd32(ft + 8 * i + 4);
		uint32_t next = rd32(ft + 8 * (i + 1));
		if (funcoff > size - tab - 8)
			continue;
		uint32_t name_at = rd32(ft + funcoff + 4);
		if (name_at >= size - nameoff)
			continue;
		const char *name = (const char *)pcln + nameoff + name_at;
		size_t room = size - nameoff - name_at;
		for (int k = 0; k < n; k++) {
			size_t l = strlen(names[k]);
			if (f[k].n_ret != -1 || l >= room || memcmp(name, names[k], l + 1))
				continue;
			uint64_t off = file_offset(&g, text + entry);
			if (!off || next <= entry || next - entry > FUNC_MAX_BYTES) {
				snprintf(why, len, "%s lies outside the executable's code", names[k]);
				goto out;
			}
			if (find_rets(&g, off, next - entry, &f[k], names[k], why, len))
				goto out;
			found++;
		}
	}
	for (int k = 0; k < n; k++)
		if (f[k].n_ret == -1) {
			snprintf(why, len, "has no %s", names[k]);
			goto out;
		}
	rc = 0;
out:
	gofile_close(&g);
	return rc;
}
