/* elf.c - symbol and machine look-ups in a mapped file, with libelf: which
 * file of a process to attach a uprobe to, and whether its ABI is the one the
 * probe reads. */
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <string.h>
#include <unistd.h>
#include "elf.h"

bool elf_defines(const char *path, const char *symbol)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	bool found = false;
	Elf_Scn *scn = NULL;
	Elf *e;

	if (fd < 0)
		return false;
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	while (e && !found && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB) ||
		    !sh.sh_entsize)
			continue;
		Elf_Data *d = elf_getdata(scn, NULL);
		for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize && !found; i++) {
			GElf_Sym sym;
			if (!gelf_getsym(d, (int)i, &sym) || sym.st_shndx == SHN_UNDEF ||
			    GELF_ST_TYPE(sym.st_info) != STT_FUNC)
				continue;
			const char *name = elf_strptr(e, sh.sh_link, sym.st_name);
			found = name && !strcmp(name, symbol);
		}
	}
	elf_end(e);
	close(fd);
	return found;
}

bool elf_is_x86_64(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	GElf_Ehdr eh;
	bool ok;

	if (fd < 0)
		return false;
	elf_version(EV_CURRENT);
	Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	ok = e && gelf_getehdr(e, &eh) && eh.e_machine == EM_X86_64 && gelf_getclass(e) == ELFCLASS64;
	elf_end(e);
	close(fd);
	return ok;
}
