/* elf.h - what the agent reads of a file's ELF before it attaches a uprobe
 * there: whether it defines a function, and its machine. */
#ifndef KPI_ELF_H
#define KPI_ELF_H

#include <stdbool.h>

/* Whether the ELF file at path defines the function symbol (in its dynamic
 * or static symbol table; an import does not count). */
bool elf_defines(const char *path, const char *symbol);
/* Whether it is a 64-bit x86-64 ELF. */
bool elf_is_x86_64(const char *path);

#endif
