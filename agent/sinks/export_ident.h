/* export_ident.h - who a traced process is, for the exporters' labels: the
 * model it serves and the port it listens on, read once per pid from /proc. */
#ifndef KPI_EXPORT_IDENT_H
#define KPI_EXPORT_IDENT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "agent/host/container.h"

struct export_ident {
	char model[128];        /* GGUF general.name, else the model file's name */
	char weight_type[32];   /* its matrices' types ("Q4_K", "F16", "Q4_K+Q6_K"); "" unknown */
	int port;               /* lowest TCP port the process listens on; 0: none */
	bool in_container;      /* container holds its container and pod (host/container.h) */
	struct container_info container;
};

/* The identity of pid, cached after the first successful look-up (a port of
 * 0 is looked up again next time: the daemon may not listen yet).  Main
 * thread only. */
const struct export_ident *export_ident_get(uint32_t pid);

/* The model to name a request by: the process's own (its model file) when
 * known, else the one the request asked for ("model" of an OpenAI request
 * seen on the wire), else "unknown". */
static inline const char *export_ident_model(const struct export_ident *id, const char *asked)
{
	if (id->model[0] && strcmp(id->model, "unknown"))
		return id->model;
	return asked && asked[0] ? asked : "unknown";
}

/* general.name from a GGUF file's header; 0 on success. */
int export_ident_gguf_name(const char *path, char *out, size_t len);
/* The weight type of a GGUF file from its tensor infos, named as kpi-infer
 * names it (abi/kpi_ggml_types.h); 0 on success. */
int export_ident_gguf_weight_type(const char *path, char *out, size_t len);

#endif
