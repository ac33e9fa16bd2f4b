/* kpi_ggml_types.h - the tensor types a GGUF file stores (ggml's type ids),
 * their one names table, and how a model's weight type is named from them.
 * kpi-infer (start-up line, /metrics) and kpi-agent (the trace's weight_type)
 * both name a file through kpi_weight_type_name(), so the two always agree.
 * The ids are ggml's (ggml.h enum ggml_type): an on-disk format, append only. */
#ifndef KPI_GGML_TYPES_H
#define KPI_GGML_TYPES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The types named here; every other id is "unknown". */
#define KPI_GGML_TYPE_COUNT 40

static inline const char *kpi_ggml_type_name(uint32_t type)
{
	/* ids 4, 5 (Q4_2, Q4_3) and 31..33, 36..38 (the old repacked
	 * Q4_0_4_4 / IQ4_NL_4_4 families) are gone upstream: kept so an old
	 * file is named, not called unknown */
	static const char *const names[KPI_GGML_TYPE_COUNT] = {
		"F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
		"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS",
		"IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64",
		"IQ1_M", "BF16", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0",
		"IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",
	};
	return type < KPI_GGML_TYPE_COUNT ? names[type] : "unknown";
}

/* A model's weight type from the parameters its matrices (the tensors of 2
 * or more dimensions: norms and biases do not count) hold per type id:
 * the type with the most first, then "+" and the others in decreasing order
 * ("Q4_K", "Q4_K+Q6_K" for a Q4_K_M file, "F16"); "none" without matrices.
 * params has KPI_GGML_TYPE_COUNT + 1 entries, the last for unknown ids. */
static inline void kpi_weight_type_name(const uint64_t *params, char *out, size_t len)
{
	int used[KPI_GGML_TYPE_COUNT + 1] = { 0 };
	size_t n = 0;
	if (len)
		out[0] = 0;
	for (;;) {
		int best = -1;
		for (int t = 0; t <= KPI_GGML_TYPE_COUNT; t++)
			if (params[t] && !used[t] && (best < 0 || params[t] > params[best]))
				best = t;
		if (best < 0)
			break;
		used[best] = 1;
		int w = snprintf(out + n, n < len ? len - n : 0, "%s%s", n ? "+" : "",
				 kpi_ggml_type_name((uint32_t)best));
		n += w > 0 ? (size_t)w : 0;
	}
	if (n == 0 && len)
		snprintf(out, len, "none");
}

#endif
