/* fuzz_piece.h - how the HTTP trackers' fuzzers read one feed from an op
 * byte: its low bit the direction, its high nibble how much of the n bytes
 * the kernel side copied (0-11 all, 12 half, 13 none and no buffer, 14 all of
 * a larger move, 15 one byte at most). The corpora of fuzz_agent_http_track
 * and fuzz_agent_http2 are written in it. */
#ifndef KPI_FUZZ_PIECE_H
#define KPI_FUZZ_PIECE_H

#include <stddef.h>
#include <stdint.h>
#include "agent/track/http/http_track.h"

struct fuzz_piece {
	enum http_dir dir;
	const uint8_t *data;
	size_t captured, moved;
};

static inline struct fuzz_piece fuzz_piece(uint8_t op, const uint8_t *p, size_t n)
{
	unsigned cap = op >> 4;
	struct fuzz_piece f = {
		.dir = (op & 1) ? HTTP_OUT : HTTP_IN,
		.data = cap == 13 ? NULL : p,
		.captured = cap <= 11 ? n : cap == 12 ? n / 2 : cap == 13 ? 0 : cap == 14 ? n : n > 0,
		.moved = cap == 14 ? n + 4096 : n,
	};
	return f;
}

#endif
