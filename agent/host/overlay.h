/* overlay.h - where a file that a process sees through an overlay mount (a
 * container's root file system, stacked from its image's layers) lives on
 * the host: the layer's own file, whose inode every container of that image
 * maps, so that a uprobe attached there once serves them all. */
#ifndef KPI_OVERLAY_H
#define KPI_OVERLAY_H

#include <stddef.h>

/* For path as the agent names a target's file (/proc/PID/root/REL), the host
 * path of the layer's file that the overlay shows at REL, into real: 0 when
 * found and the same inode the overlay shows; -1 when path is not under a
 * /proc/PID/root, REL's mount is no overlay, or the layer's file cannot be
 * reached or verified from here (an agent in a container of its own without
 * the runtime's storage mounted): the caller keeps path. */
int overlay_real_path(const char *path, char *real, size_t len);

/* The lookup itself, on a mountinfo file of the caller's choosing (the unit
 * test's): rel is a path in that mount namespace, ino the inode number the
 * overlay shows for it. */
int overlay_find(const char *mountinfo, const char *rel, unsigned long ino, char *real, size_t len);

#endif
