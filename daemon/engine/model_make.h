/* model_make.h - the built-in model: a deterministic, seeded llama GGUF
 * (byte vocabulary, random weights, any weight type kpi-infer reads) that
 * llama.cpp's loader also accepts. */
#ifndef KPI_ENGINE_MODEL_MAKE_H
#define KPI_ENGINE_MODEL_MAKE_H

#include <stddef.h>
#include <stdint.h>

/* Writes the preset ("tiny" or "small") with weights drawn from seed to path,
 * atomically (a temporary file renamed into place). Same preset and seed give
 * the same bytes. Returns 0, or -1 with one line in err. */
int model_make(const char *path, const char *preset, uint64_t seed, char *err, size_t errlen);
/* The same with every matrix of one type: GGML_F32, GGML_F16 (model_make),
 * GGML_Q8_0, GGML_Q4_0 or GGML_Q4_K (quant.h's quantizers); norms stay F32.
 * The weights are the same draws whatever the type: the F32 file is the
 * model the others approximate. */
int model_make_type(const char *path, const char *preset, uint64_t seed, uint32_t type, char *err,
		    size_t errlen);
/* An F32 file holding exactly the values the type's file holds (each
 * matrix quantized to type, then dequantized): the float model a quantized
 * one is. The same model without activation quantization, so a comparison
 * with it shows what rounding the activations to 8 bits alone costs. */
int model_make_dequantized(const char *path, const char *preset, uint64_t seed, uint32_t type, char *err,
			   size_t errlen);
/* A weight type by name ("F32", "f16", "Q4_K", ...: case ignored) for
 * model_make_type; -1 if it cannot write it. */
int model_make_parse_type(const char *name);

/* The default model: the tiny preset with seed 0, generated once into
 * $XDG_CACHE_HOME/kpiscope/tiny-s0.gguf (or ~/.cache/kpiscope/...) and
 * reused afterwards. Writes its path into buf; returns 0 or -1 with err. */
int model_default_path(char *buf, size_t n, char *err, size_t errlen);

#endif
