/* metrics.c - kpi-ship's /metrics (Prometheus text format 0.0.4) on a thread
 * of its own, so that a scrape never waits for a POST to ClickHouse. */
#include "tools/kpi-ship/ship.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int listen_fd = -1;
static pthread_t thread;
static volatile int stopping;
static struct shipper *shp;

static void render(struct buf *b)
{
	struct ship_stats *st = &shp->st;
	int64_t now = ship_wall_ns();
	pthread_mutex_lock(&st->mu);
	buf_printf(b, "# HELP kpi_ship_rows_total Rows ClickHouse acknowledged, by trace table.\n"
		      "# TYPE kpi_ship_rows_total counter\n");
	for (int i = 0; i < SHIP_TABLES; i++)
		if (st->t[i].present)
			buf_printf(b, "kpi_ship_rows_total{table=\"%s\"} %llu\n", st->t[i].name,
				      (unsigned long long)st->t[i].rows);
	buf_printf(b, "# HELP kpi_ship_backlog_rows Rows of the trace not yet shipped, by table.\n"
		      "# TYPE kpi_ship_backlog_rows gauge\n");
	for (int i = 0; i < SHIP_TABLES; i++)
		if (st->t[i].present)
			buf_printf(b, "kpi_ship_backlog_rows{table=\"%s\"} %lld\n", st->t[i].name,
				      (long long)st->t[i].backlog);
	buf_printf(b, "# HELP kpi_ship_minutes_total Per-minute aggregates ClickHouse acknowledged (request_minutes): "
		      "minutes, of them shipped again for rows that came late, and their rows.\n"
		      "# TYPE kpi_ship_minutes_total counter\nkpi_ship_minutes_total %llu\n"
		      "# TYPE kpi_ship_minutes_again_total counter\nkpi_ship_minutes_again_total %llu\n"
		      "# TYPE kpi_ship_minute_rows_total counter\nkpi_ship_minute_rows_total %llu\n"
		      "# HELP kpi_ship_minutes_pending Closed minutes with rows not yet in their aggregates.\n"
		      "# TYPE kpi_ship_minutes_pending gauge\nkpi_ship_minutes_pending %lld\n",
		      (unsigned long long)st->minutes, (unsigned long long)st->minutes_again,
		      (unsigned long long)st->minute_rows, (long long)st->minutes_pending);
	double lag = st->caught_up_wall_ns ? (double)(now - st->caught_up_wall_ns) / 1e9 : -1;
	buf_printf(b, "# HELP kpi_ship_lag_seconds How old the newest row may be that ClickHouse lacks: time since the "
		      "start of the last round that shipped every row (-1: none yet).\n# TYPE kpi_ship_lag_seconds gauge\nkpi_ship_lag_seconds %.3f\n", lag);
	buf_printf(b, "# HELP kpi_ship_batches_total Batches ClickHouse acknowledged.\n"
		      "# TYPE kpi_ship_batches_total counter\nkpi_ship_batches_total %llu\n"
		      "# HELP kpi_ship_bytes_total JSONEachRow bytes ClickHouse acknowledged.\n"
		      "# TYPE kpi_ship_bytes_total counter\nkpi_ship_bytes_total %llu\n"
		      "# HELP kpi_ship_failures_total POSTs that failed (each is retried).\n"
		      "# TYPE kpi_ship_failures_total counter\nkpi_ship_failures_total %llu\n"
		      "# HELP kpi_ship_up 1 when the last POST to ClickHouse worked.\n"
		      "# TYPE kpi_ship_up gauge\nkpi_ship_up %d\n",
		      (unsigned long long)st->batches, (unsigned long long)st->bytes,
		      (unsigned long long)st->failures, st->up ? 1 : 0);
	pthread_mutex_unlock(&st->mu);
}

static void serve(int fd)
{
	char req[2048];
	size_t n = 0;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	/* the head, within 5 s: enough for any scraper */
	while (n < sizeof(req) - 1 && !memmem(req, n, "\r\n\r\n", 4) && poll(&p, 1, 5000) == 1) {
		ssize_t r = read(fd, req + n, sizeof(req) - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	req[n] = 0;
	struct buf body = { 0 }, out = { 0 };
	const char *status = "200 OK", *type = "text/plain; version=0.0.4; charset=utf-8";
	int head = !strncmp(req, "HEAD ", 5);
	if (strncmp(req, "GET ", 4) && !head) {
		status = "405 Method Not Allowed";
		type = "application/json";
		buf_printf(&body, "{\"error\":\"use GET /metrics\"}\n");
	} else if (strncmp(req + (head ? 5 : 4), "/metrics", 8) || !strchr(" ?", req[(head ? 5 : 4) + 8])) {
		status = "404 Not Found";
		type = "application/json";
		buf_printf(&body, "{\"error\":\"kpi-ship serves /metrics only\"}\n");
	} else {
		render(&body);
	}
	buf_printf(&out, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
		      status, type, body.len);
	if (!head && body.len)
		buf_append(&out, body.p, body.len);
	for (size_t off = 0; off < out.len;) {
		ssize_t w = write(fd, out.p + off, out.len - off);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	buf_free(&body);
	buf_free(&out);
}

static void *loop(void *arg)
{
	(void)arg;
	while (!stopping) {
		struct pollfd p = { .fd = listen_fd, .events = POLLIN };
		if (poll(&p, 1, 200) != 1)
			continue;
		int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		serve(fd);
		close(fd);
	}
	return NULL;
}

int ship_metrics_start(struct shipper *s, const char *listen_s, char *err, size_t errlen)
{
	char addr[64] = "127.0.0.1";
	const char *colon = strrchr(listen_s, ':');
	const char *port_s = colon ? colon + 1 : listen_s;
	char *end;
	long port = strtol(port_s, &end, 10);
	if (colon && (size_t)(colon - listen_s) < sizeof(addr))
		snprintf(addr, sizeof(addr), "%.*s", (int)(colon - listen_s), listen_s);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (end == port_s || *end || port < 0 || port > 65535 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
		snprintf(err, errlen, "--metrics '%s': give PORT or ADDR:PORT, e.g. 9465 or 0.0.0.0:9465", listen_s);
		return -1;
	}
	int one = 1;
	listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (listen_fd < 0 || setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(listen_fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(listen_fd, 16)) {
		snprintf(err, errlen, "--metrics %s: cannot listen there: %s (pick another port)", listen_s,
			 strerror(errno));
		if (listen_fd >= 0)
			close(listen_fd);
		listen_fd = -1;
		return -1;
	}
	shp = s;
	if (pthread_create(&thread, NULL, loop, NULL)) {
		snprintf(err, errlen, "cannot start the /metrics thread");
		return -1;
	}
	printf("serving metrics on http://%s:%ld/metrics\n", addr, port);
	fflush(stdout);
	return 0;
}

void ship_metrics_stop(void)
{
	if (listen_fd < 0)
		return;
	stopping = 1;
	pthread_join(thread, NULL);
	close(listen_fd);
	listen_fd = -1;
}
