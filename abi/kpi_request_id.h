/* kpi_request_id.h - how much of a request's id crosses a process boundary: the
 * x-request-id string of the kpi:request__admitted/rejected probes, as the
 * daemon caps it and the BPF side copies it. */
#ifndef KPI_REQUEST_ID_H
#define KPI_REQUEST_ID_H

#define KPI_REQID_LEN 64 /* x-request-id bytes kept (NUL included) */

#endif
