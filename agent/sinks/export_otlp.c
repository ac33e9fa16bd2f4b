/* export_otlp.c - OTLP/HTTP trace export: the sink copies each request into a
 * bounded queue (never blocking the main loop); a sender thread batches,
 * encodes (export_otlp_json.c) and POSTs over one kept-alive libcurl
 * connection (http or https), retrying with jittered exponential backoff (or
 * the receiver's Retry-After) on the answers the OTLP spec calls retryable,
 * and counts every request it drops and every span the receiver rejected. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include "export_otlp.h"

#define OTLP_BACKOFF_MAX_MS 16000
/* a longer Retry-After drops the batch rather than stall the sender that long */
#define OTLP_RETRY_AFTER_MAX_MS 60000
/* partial successes are logged at most this often (they are counted always) */
#define OTLP_PARTIAL_LOG_MS 60000

/* ---- configuration ------------------------------------------------------------------ */

static int env_int(const char *name, int *out, int lo, int hi, char *err, size_t errlen)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		snprintf(err, errlen, "%s wants an integer from %d to %d, got '%s'", name, lo, hi, s);
		return -1;
	}
	*out = (int)v;
	return 0;
}

int otlp_config_from_env(struct otlp_config *c, char *err, size_t errlen)
{
	const char *svc = getenv("OTEL_SERVICE_NAME");
	const char *ca_var = "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", *ca = getenv(ca_var);

	*c = (struct otlp_config){ .max_queue = 2048, .max_batch = 512, .delay_ms = 5000,
				   .timeout_ms = 10000, .max_attempts = 6, .backoff_ms = 500 };
	snprintf(c->service_name, sizeof(c->service_name), "%s", svc && *svc ? svc : "kpi-infer");
	/* the spec: the signal's own variable wins over the general one */
	if (!ca || !*ca) {
		ca_var = "OTEL_EXPORTER_OTLP_CERTIFICATE";
		ca = getenv(ca_var);
	}
	if (ca && *ca && (size_t)snprintf(c->certificate, sizeof(c->certificate), "%s", ca) >=
	    sizeof(c->certificate)) {
		snprintf(err, errlen, "%s is longer than %zu bytes", ca_var, sizeof(c->certificate) - 1);
		return -1;
	}
	if (env_int("OTEL_BSP_MAX_QUEUE_SIZE", &c->max_queue, 1, 1 << 20, err, errlen) ||
	    env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", &c->max_batch, 1, 1 << 20, err, errlen) ||
	    env_int("OTEL_BSP_SCHEDULE_DELAY", &c->delay_ms, 1, 3600000, err, errlen) ||
	    env_int("OTEL_EXPORTER_OTLP_TIMEOUT", &c->timeout_ms, 1, 600000, err, errlen))
		return -1;
	if (c->max_batch > c->max_queue)
		c->max_batch = c->max_queue;
	return 0;
}

/* ---- the queue and the sender ------------------------------------------------------------ */

struct otlp_exporter {
	struct otlp_config cfg;
	char url[2048], hostname[256];
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct otlp_item *q;            /* ring of cfg.max_queue */
	size_t head, len;
	bool stopping, joined;
	struct otlp_stats st;
	/* the sender thread's alone from here on */
	CURL *curl;                     /* one handle, so its connection is kept alive */
	struct curl_slist *headers;
	char curl_err[CURL_ERROR_SIZE];
	char resp[16384];               /* the answer's body, cut to fit */
	size_t resp_len;
	unsigned seed;                  /* the backoff jitter's, from getrandom */
	bool warned;
	uint64_t last_drop_log;         /* mono ms */
	uint64_t last_partial_log, rejected_unlogged;
};

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int64_t realtime_offset(void)
{
	struct timespec m, r;
	clock_gettime(CLOCK_MONOTONIC, &m);
	clock_gettime(CLOCK_REALTIME, &r);
	return ((int64_t)r.tv_sec - m.tv_sec) * 1000000000ll + (r.tv_nsec - m.tv_nsec);
}

static void on_request(void *ctx, const struct kpi_request_record *r)
{
	struct otlp_exporter *e = ctx;
	const struct export_ident *id = export_ident_get(r->pid);

	pthread_mutex_lock(&e->lock);
	if (e->len == (size_t)e->cfg.max_queue) {
		e->st.dropped_full++;
	} else {
		struct otlp_item *it = &e->q[(e->head + e->len) % (size_t)e->cfg.max_queue];
		otlp_item_fill(it, r);
		it->id = *id;
		e->len++;
		e->st.queued++;
		if (e->len >= (size_t)e->cfg.max_batch)
			pthread_cond_signal(&e->cond);
	}
	pthread_mutex_unlock(&e->lock);
}

struct kpi_sink otlp_sink(struct otlp_exporter *e)
{
	return (struct kpi_sink){ .ctx = e, .request = on_request };
}

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
	struct otlp_exporter *e = ctx;
	size_t len = size * n, room = sizeof(e->resp) - 1 - e->resp_len;

	if (len < room)
		room = len;
	memcpy(e->resp + e->resp_len, p, room);
	e->resp_len += room;
	e->resp[e->resp_len] = 0;
	return len;     /* the rest is read and let go: the connection stays usable */
}

/* What one POST came to. */
struct otlp_answer {
	int status;             /* HTTP status; -1: none (err says why) */
	bool retry;             /* another try may do better */
	int64_t retry_after_ms; /* the receiver's Retry-After; 0: none */
	char err[768];
};

/* curl errors that no retry mends: the URL or the TLS setup is wrong */
static bool curl_config_error(CURLcode rc)
{
	return rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT ||
	       rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE ||
	       rc == CURLE_SSL_CERTPROBLEM;
}

/* One POST on the kept-alive connection; the answer's body is left in e->resp. */
static void post(struct otlp_exporter *e, const char *body, size_t len, struct otlp_answer *a)
{
	long status = 0;
	curl_off_t retry_after = 0;
	CURLcode rc;

	e->resp_len = 0;
	e->resp[0] = 0;
	e->curl_err[0] = 0;
	curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(e->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	rc = curl_easy_perform(e->curl);
	*a = (struct otlp_answer){ .status = -1 };
	if (rc != CURLE_OK) {
		a->retry = !curl_config_error(rc);
		snprintf(a->err, sizeof(a->err), "%s%s", e->curl_err[0] ? e->curl_err : curl_easy_strerror(rc),
			 rc == CURLE_PEER_FAILED_VERIFICATION ? " (set OTEL_EXPORTER_OTLP_CERTIFICATE to "
			 "the CA file that signed the receiver's certificate)" : "");
		return;
	}
	curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(e->curl, CURLINFO_RETRY_AFTER, &retry_after);
	a->status = (int)status;
	a->retry = status == 429 || status == 502 || status == 503 || status == 504;
	a->retry_after_ms = (int64_t)retry_after * 1000;
	snprintf(a->err, sizeof(a->err), "the receiver answered %d", a->status);
	if (status / 100 != 2) {
		/* the OTLP error body: a google.rpc.Status, whose message says why */
		json_t *root = json_loadb(e->resp, e->resp_len, 0, NULL);
		const char *msg = json_string_value(json_object_get(root, "message"));
		if (msg && *msg)
			snprintf(a->err, sizeof(a->err), "the receiver answered %d: %.600s", a->status, msg);
		json_decref(root);
	}
}

/* A 2xx answer's partialSuccess (ExportTraceServiceResponse in JSON): the spans
 * the receiver dropped and why.  False when it has none to report. */
static bool partial_success(const char *body, size_t len, long long *rejected, char *msg,
			    size_t msglen)
{
	json_t *root = json_loadb(body, len, 0, NULL);
	json_t *ps = json_object_get(root, "partialSuccess");
	json_t *n = json_object_get(ps, "rejectedSpans");
	const char *m = json_string_value(json_object_get(ps, "errorMessage"));

	/* proto3 JSON writes int64 as a string; some receivers write a number */
	*rejected = json_is_integer(n) ? (long long)json_integer_value(n) :
		    json_is_string(n) ? strtoll(json_string_value(n), NULL, 10) : 0;
	if (*rejected < 0)
		*rejected = 0;
	snprintf(msg, msglen, "%s", m ? m : "");
	json_decref(root);
	return *rejected > 0 || msg[0];
}

/* Sleeps ms unless stopping; returns true when stopping. */
static bool nap(struct otlp_exporter *e, int64_t ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000l;
	if (ts.tv_nsec >= 1000000000l) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000l;
	}
	pthread_mutex_lock(&e->lock);
	while (!e->stopping && pthread_cond_timedwait(&e->cond, &e->lock, &ts) != ETIMEDOUT)
		;
	bool s = e->stopping;
	pthread_mutex_unlock(&e->lock);
	return s;
}

/* Counts a batch's fate and says so in the log, rate-limited. */
static void account(struct otlp_exporter *e, size_t n, const struct otlp_answer *a)
{
	long long rejected = 0;
	char msg[512] = "";
	bool partial = a->status / 100 == 2 &&
		       partial_success(e->resp, e->resp_len, &rejected, msg, sizeof(msg));
	uint64_t now = mono_ms();

	pthread_mutex_lock(&e->lock);
	if (a->status / 100 == 2) {
		e->st.exported += n;
		e->st.batches++;
		e->st.rejected_spans += (uint64_t)rejected;
		if (e->warned) {
			fprintf(stderr, "kpi-agent: OTLP export to %s works again\n", e->url);
			e->warned = false;
		}
		e->rejected_unlogged += (uint64_t)rejected;
		/* a receiver that rejects part of every batch must not flood the log */
		if (partial && (!e->last_partial_log || now - e->last_partial_log >= OTLP_PARTIAL_LOG_MS)) {
			fprintf(stderr, "kpi-agent: the OTLP receiver at %s rejected %llu spans since the "
				"last such message (%llu in all; kpi_otlp_spans_rejected_total): %s\n",
				e->url, (unsigned long long)e->rejected_unlogged,
				(unsigned long long)e->st.rejected_spans, msg[0] ? msg : "(no message)");
			e->last_partial_log = now;
			e->rejected_unlogged = 0;
		}
	} else {
		e->st.dropped_failed += n;
		/* once per 10 s at most: an outage must not flood the agent's log */
		if (!e->last_drop_log || now - e->last_drop_log >= 10000) {
			fprintf(stderr, "kpi-agent: OTLP export dropped %zu requests (%llu so far; the "
				"SQLite trace keeps them): %s%s\n", n,
				(unsigned long long)e->st.dropped_failed, a->err,
				a->retry ? "" : " (not retryable: check the URL and the receiver's log)");
			e->last_drop_log = now;
		}
	}
	pthread_mutex_unlock(&e->lock);
}

static void send_batch(struct otlp_exporter *e, const struct otlp_item *items, size_t n)
{
	uint8_t *ids = malloc(24 * n);
	char *body = NULL;
	size_t len = 0;
	FILE *f;
	struct otlp_answer a;
	int delay = e->cfg.backoff_ms;

	if (!ids || getrandom(ids, 24 * n, 0) != (ssize_t)(24 * n) || !(f = open_memstream(&body, &len))) {
		free(ids);
		pthread_mutex_lock(&e->lock);
		e->st.dropped_failed += n;
		pthread_mutex_unlock(&e->lock);
		return;
	}
	otlp_encode(f, items, n, realtime_offset(), ids, e->cfg.service_name, e->hostname);
	fclose(f);
	free(ids);

	for (int attempt = 1;; attempt++) {
		post(e, body, len, &a);
		pthread_mutex_lock(&e->lock);
		e->st.posts++;
		bool stopping = e->stopping;
		pthread_mutex_unlock(&e->lock);
		if (a.status / 100 == 2 || !a.retry || attempt >= e->cfg.max_attempts || stopping)
			break;
		/* jitter: 75..100% of the delay, so agents restarted together spread out;
		 * the receiver's Retry-After, when longer, is what it asked for */
		int64_t wait = delay - (int)(rand_r(&e->seed) % (unsigned)(delay / 4 + 1));
		if (a.retry_after_ms > OTLP_RETRY_AFTER_MAX_MS) {
			size_t l = strlen(a.err);
			snprintf(a.err + l, sizeof(a.err) - l, ", Retry-After %lld s: longer than %d s, "
				 "not waited for", (long long)(a.retry_after_ms / 1000),
				 OTLP_RETRY_AFTER_MAX_MS / 1000);
			break;
		}
		if (a.retry_after_ms > wait)
			wait = a.retry_after_ms;
		if (!e->warned) {
			fprintf(stderr, "kpi-agent: OTLP export to %s failed (%s); retrying with "
				"backoff, requests queue meanwhile (up to %d)\n", e->url, a.err,
				e->cfg.max_queue);
			e->warned = true;
		}
		pthread_mutex_lock(&e->lock);
		e->st.retries++;
		pthread_mutex_unlock(&e->lock);
		nap(e, wait);   /* stopping cuts it short: one last try, then give up */
		delay = delay * 2 > OTLP_BACKOFF_MAX_MS ? OTLP_BACKOFF_MAX_MS : delay * 2;
	}
	account(e, n, &a);
	free(body);
}

static void *sender_thread(void *arg)
{
	struct otlp_exporter *e = arg;
	struct otlp_item *batch = malloc(sizeof(*batch) * (size_t)e->cfg.max_batch);
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	if (!batch)
		return NULL;
	for (;;) {
		uint64_t due = mono_ms() + (uint64_t)e->cfg.delay_ms;
		pthread_mutex_lock(&e->lock);
		while (!e->stopping && e->len < (size_t)e->cfg.max_batch && mono_ms() < due) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			uint64_t left = due - mono_ms();
			ts.tv_sec += (time_t)(left / 1000);
			ts.tv_nsec += (long)(left % 1000) * 1000000l;
			if (ts.tv_nsec >= 1000000000l) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000l;
			}
			pthread_cond_timedwait(&e->cond, &e->lock, &ts);
		}
		size_t n = e->len < (size_t)e->cfg.max_batch ? e->len : (size_t)e->cfg.max_batch;
		for (size_t i = 0; i < n; i++)
			batch[i] = e->q[(e->head + i) % (size_t)e->cfg.max_queue];
		e->head = (e->head + n) % (size_t)e->cfg.max_queue;
		e->len -= n;
		bool stop = e->stopping && e->len == 0;
		pthread_mutex_unlock(&e->lock);
		if (n)
			send_batch(e, batch, n);
		if (stop)
			break;
	}
	free(batch);
	return NULL;
}

/* Checks url and writes it to e->url with the signal path added when it has
 * none, as for OTEL_EXPORTER_OTLP_ENDPOINT. */
static int parse_url(struct otlp_exporter *e, const char *url, char *err, size_t errlen)
{
	static const char form[] = "expected http[s]://HOST[:PORT][/PATH]";
	CURLU *u = curl_url();
	char *scheme = NULL, *port = NULL, *path = NULL, *full = NULL;
	const char *sep = strstr(url, "://");
	CURLUcode rc;
	int ret = -1;

	if (!u) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	/* curl would read http:///v1/traces as the host "v1" */
	rc = sep && sep[3] == '/' ? CURLUE_NO_HOST : curl_url_set(u, CURLUPART_URL, url, 0);
	if (!rc && !curl_url_get(u, CURLUPART_PORT, &port, 0) && atoi(port) == 0)
		rc = CURLUE_BAD_PORT_NUMBER;
	if (rc) {
		snprintf(err, errlen, "--otlp %s: %s; %s", url,
			 rc == CURLUE_BAD_PORT_NUMBER ? "bad port (1 to 65535)" :
			 rc == CURLUE_NO_HOST ? "no host" : curl_url_strerror(rc), form);
		goto out;
	}
	curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
	if (!scheme || (strcmp(scheme, "http") && strcmp(scheme, "https"))) {
		snprintf(err, errlen, "--otlp %s: only http:// and https:// URLs are supported "
			 "(OTLP/HTTP)", url);
		goto out;
	}
	if (curl_url_get(u, CURLUPART_PATH, &path, 0) || !strcmp(path, "/"))
		curl_url_set(u, CURLUPART_PATH, "/v1/traces", 0);
	if (curl_url_get(u, CURLUPART_URL, &full, 0) ||
	    (size_t)snprintf(e->url, sizeof(e->url), "%s", full) >= sizeof(e->url)) {
		snprintf(err, errlen, "--otlp %s: longer than %zu bytes", url, sizeof(e->url) - 1);
		goto out;
	}
	ret = 0;
out:
	curl_free(scheme);
	curl_free(port);
	curl_free(path);
	curl_free(full);
	curl_url_cleanup(u);
	return ret;
}

/* The easy handle every POST reuses. */
static int curl_setup(struct otlp_exporter *e, char *err, size_t errlen)
{
	const char *ca = e->cfg.certificate;
	int fd = ca[0] ? open(ca, O_RDONLY | O_CLOEXEC) : -1;

	/* libcurl reads it at each new connection; say now if that will fail */
	if (ca[0] && fd < 0) {
		snprintf(err, errlen, "OTEL_EXPORTER_OTLP_CERTIFICATE %s: %s (it is read after the "
			 "agent dropped privileges: make it readable by the --user account)", ca,
			 strerror(errno));
		return -1;
	}
	if (fd >= 0)
		close(fd);
	e->curl = curl_easy_init();
	e->headers = curl_slist_append(NULL, "Content-Type: application/json");
	struct curl_slist *h = e->headers ? curl_slist_append(e->headers, "Expect:") : NULL;
	if (!e->curl || !h) {
		snprintf(err, errlen, "cannot set up libcurl (out of memory)");
		return -1;
	}
	/* no 100-continue round trip before a large batch: receivers answer at once */
	e->headers = h;
	curl_easy_setopt(e->curl, CURLOPT_URL, e->url);
	curl_easy_setopt(e->curl, CURLOPT_POST, 1L);
	curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, e->headers);
	curl_easy_setopt(e->curl, CURLOPT_USERAGENT, "kpi-agent");
	curl_easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L);        /* we are a thread */
	curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)e->cfg.timeout_ms);
	curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, e);
	curl_easy_setopt(e->curl, CURLOPT_ERRORBUFFER, e->curl_err);
	if (ca[0])
		curl_easy_setopt(e->curl, CURLOPT_CAINFO, ca);
	return 0;
}

static void curl_teardown(struct otlp_exporter *e)
{
	curl_easy_cleanup(e->curl);
	curl_slist_free_all(e->headers);
	curl_global_cleanup();
}

struct otlp_exporter *otlp_start(const char *url, const struct otlp_config *cfg,
				 char *err, size_t errlen)
{
	struct otlp_exporter *e = calloc(1, sizeof(*e));
	if (!e) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	e->cfg = *cfg;
	if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
		snprintf(err, errlen, "cannot initialise libcurl");
		free(e);
		return NULL;
	}
	if (parse_url(e, url, err, errlen) || curl_setup(e, err, errlen))
		goto fail;
	e->q = calloc((size_t)cfg->max_queue, sizeof(*e->q));
	if (!e->q) {
		snprintf(err, errlen, "cannot allocate the OTLP queue (%d requests)", cfg->max_queue);
		goto fail;
	}
	if (gethostname(e->hostname, sizeof(e->hostname)))
		snprintf(e->hostname, sizeof(e->hostname), "unknown");
	if (getrandom(&e->seed, sizeof(e->seed), 0) != sizeof(e->seed))
		e->seed = (unsigned)getpid();
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->cond, NULL);
	int rc = pthread_create(&e->thread, NULL, sender_thread, e);
	if (rc) {
		snprintf(err, errlen, "cannot start the OTLP sender thread: %s", strerror(rc));
		goto fail;
	}
	return e;
fail:
	curl_teardown(e);
	free(e->q);
	free(e);
	return NULL;
}

void otlp_stop_keep(struct otlp_exporter *e)
{
	if (!e || e->joined)
		return;
	pthread_mutex_lock(&e->lock);
	e->stopping = true;
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
	pthread_join(e->thread, NULL);
	e->joined = true;
}

void otlp_free(struct otlp_exporter *e)
{
	if (!e)
		return;
	otlp_stop_keep(e);
	curl_teardown(e);
	pthread_mutex_destroy(&e->lock);
	pthread_cond_destroy(&e->cond);
	free(e->q);
	free(e);
}

void otlp_stats(struct otlp_exporter *e, struct otlp_stats *out)
{
	pthread_mutex_lock(&e->lock);
	*out = e->st;
	pthread_mutex_unlock(&e->lock);
}

void otlp_prom_collect(void *ctx, FILE *out)
{
	struct otlp_exporter *e = ctx;
	struct otlp_stats s;
	size_t len;

	pthread_mutex_lock(&e->lock);
	s = e->st;
	len = e->len;
	pthread_mutex_unlock(&e->lock);
	fprintf(out, "# HELP kpi_otlp_requests_exported_total Requests exported as OTLP traces "
		"and accepted by the receiver.\n# TYPE kpi_otlp_requests_exported_total counter\n"
		"kpi_otlp_requests_exported_total %llu\n", (unsigned long long)s.exported);
	fprintf(out, "# HELP kpi_otlp_requests_dropped_total Requests whose trace was not exported "
		"(the SQLite trace still has them).\n# TYPE kpi_otlp_requests_dropped_total counter\n"
		"kpi_otlp_requests_dropped_total{reason=\"queue_full\"} %llu\n"
		"kpi_otlp_requests_dropped_total{reason=\"export_failed\"} %llu\n",
		(unsigned long long)s.dropped_full, (unsigned long long)s.dropped_failed);
	fprintf(out, "# HELP kpi_otlp_export_retries_total OTLP POSTs retried after a retryable "
		"failure.\n# TYPE kpi_otlp_export_retries_total counter\n"
		"kpi_otlp_export_retries_total %llu\n", (unsigned long long)s.retries);
	fprintf(out, "# HELP kpi_otlp_batches_exported_total OTLP POSTs the receiver accepted.\n"
		"# TYPE kpi_otlp_batches_exported_total counter\n"
		"kpi_otlp_batches_exported_total %llu\n", (unsigned long long)s.batches);
	fprintf(out, "# HELP kpi_otlp_spans_rejected_total Spans the receiver accepted a batch "
		"without (its partialSuccess answer).\n# TYPE kpi_otlp_spans_rejected_total counter\n"
		"kpi_otlp_spans_rejected_total %llu\n", (unsigned long long)s.rejected_spans);
	fprintf(out, "# HELP kpi_otlp_queue_length Requests waiting for the OTLP sender.\n"
		"# TYPE kpi_otlp_queue_length gauge\nkpi_otlp_queue_length %zu\n", len);
}
