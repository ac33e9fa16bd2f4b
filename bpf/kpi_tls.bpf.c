// SPDX-License-Identifier: GPL-2.0
/* kpi_tls.bpf.c - uprobes on OpenSSL's SSL_read/SSL_write(_ex) in the libssl of
 * HTTP-mode targets: the plaintext of each call, as a TLS_PAYLOAD record of its socket.
 *
 * Loaded by agent/sources/tls.c with kpi.bpf.c's `events`, `targets`, `counters`,
 * `tls_calls` and `tls_last_read` maps shared (bpf_map__reuse_fd), so its records interleave in
 * order with the syscall ones.  The entry probe notes the call in tls_calls;
 * kpi.bpf.c's syscall handlers note the socket and times of the reads and
 * writes made inside it; the return probe sends what the call moved.  A call
 * that makes no syscall (a memory BIO: Node's OpenSSL, in its executable)
 * takes its socket from its SSL object's earlier calls, or, for a read, from
 * the read of a served socket its thread made just before (tls_last_read). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "kpi_maps.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* ---- this object's own ----------------------------------------------------- */

/* (SSL *, tgid) -> the socket its calls last read or wrote: for a call that
 * makes no syscall (SSL_read served from what an earlier read brought in). */
struct ssl_key {
	__u64 ssl;
	__u32 tgid;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct ssl_key);
	__type(value, int);
} ssl_fds SEC(".maps");

/* The record is built here (too big for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kpi_ev_payload);
} tls_buf SEC(".maps");

/* How long before an SSL_read's entry the read that brought its ciphertext may
 * be (a memory BIO's: Node reads the socket, then decrypts in the callback). */
#define LAST_READ_NS 10000000ULL

/* Wake the agent only once this much is waiting (the agent writes kpi.bpf.c's). */
const volatile __u64 wakeup_bytes = 0;

/* ---- the calls --------------------------------------------------------------- */

static __always_inline int tls_enter(__u64 ssl, __u64 buf, __u64 out_len, __u32 dir)
{
	__u64 pt = bpf_get_current_pid_tgid();
	__u32 tgid = pt >> 32;
	struct kpi_target *tg = bpf_map_lookup_elem(&targets, &tgid);
	struct kpi_tls_call c = { .ssl = ssl, .buf = buf, .out_len = out_len, .fd = -1, .dir = dir };

	if (!tg || !(tg->flags & KPI_TARGET_F_HTTP))
		return 0;
	c.t_enter = bpf_ktime_get_ns();
	c.task_start = task_start32();
	if (!bpf_map_update_elem(&tls_calls, &pt, &c, BPF_ANY))
		count(KPI_CNT_TLS_CALLS_INS);
	return 0;
}

/* The plaintext of a call that moved n bytes, as a TLS_PAYLOAD record of
 * c->fd timed at ts. */
static __always_inline int tls_send(__u64 pt, const struct kpi_tls_call *c, __u64 ts, __u32 flags,
				    __u64 n)
{
	struct kpi_ev_payload *e;
	__u32 zero = 0;
	__u64 ws;

	e = bpf_map_lookup_elem(&tls_buf, &zero);
	if (!e)
		return 0;
	e->h.type = KPI_EV_TLS_PAYLOAD;
	e->h.pid = pt >> 32;
	e->h.ts = ts;
	e->fd = c->fd;
	e->dir = c->dir;
	e->moved = n > 0xffffffffULL ? 0xffffffffU : (__u32)n;
	e->t_seg = c->t_seg;
	e->srtt_us = c->srtt_us;
	e->tid = (__u32)pt;
	e->role = KPI_ROLE_SERVED;      /* the target's own upstream calls are not read */
	e->flags = flags;
	ws = n < KPI_PAYLOAD_MAX ? n : KPI_PAYLOAD_MAX;
	asm volatile("" : "+r"(ws));
	if (ws > KPI_PAYLOAD_MAX)
		return 0;
	if (ws && bpf_probe_read_user(e->data, ws, (const void *)c->buf))
		ws = 0;
	e->captured = (__u32)ws;
	asm volatile("" : "+r"(ws));
	if (ws > KPI_PAYLOAD_MAX)
		return 0;
	if (bpf_ringbuf_output(&events, e, KPI_EV_PAYLOAD_HEAD + ws,
			       bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes
			       ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP))
		count(KPI_CNT_DROPS);
	else
		count(KPI_CNT_EVENTS);
	return 0;
}

/* A read call of c->fd: the read of its ciphertext this thread made in
 * [lo, hi] (tls_last_read) times it, taken once. */
static __always_inline void read_timed(__u64 pt, struct kpi_tls_call *c, __u64 lo, __u64 hi)
{
	struct kpi_tls_read *lr = bpf_map_lookup_elem(&tls_last_read, &pt);

	if (!lr || lr->fd != c->fd || lr->ts < lo || lr->ts > hi)
		return;
	c->t_io = lr->ts;
	c->t_seg = lr->t_seg;
	c->srtt_us = lr->srtt_us;
	bpf_map_delete_elem(&tls_last_read, &pt);
}

/* The call returned: n plaintext bytes moved (0: none, or it failed). */
static __always_inline int tls_exit(__u64 n)
{
	__u64 pt = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns();
	struct kpi_tls_call *p = bpf_map_lookup_elem(&tls_calls, &pt);
	struct ssl_key k = { .tgid = pt >> 32 };
	struct kpi_tls_call c;
	struct kpi_tls_read *lr;
	int *fd;

	if (!p)
		return 0;
	c = *p;
	if (!bpf_map_delete_elem(&tls_calls, &pt))
		count(KPI_CNT_TLS_CALLS_DEL);
	k.ssl = c.ssl;
	if (c.fd != -1)
		bpf_map_update_elem(&ssl_fds, &k, &c.fd, BPF_ANY);
	else if ((fd = bpf_map_lookup_elem(&ssl_fds, &k)))
		c.fd = *fd;
	else if (c.dir == KPI_PAYLOAD_IN && (lr = bpf_map_lookup_elem(&tls_last_read, &pt)) &&
		 lr->ts >= c.t_enter - LAST_READ_NS && lr->ts <= c.t_enter) {
		/* no syscall inside and none before: a memory BIO (Node) fed by
		 * the read this thread made just before; a write never guesses */
		c.fd = lr->fd;
		bpf_map_update_elem(&ssl_fds, &k, &c.fd, BPF_ANY);
	} else
		c.fd = KPI_TLS_FD_UNKNOWN;
	if (!n || c.fd == -2)   /* nothing moved, or the target's own upstream */
		return 0;
	if (c.dir == KPI_PAYLOAD_IN && !c.t_io)
		read_timed(pt, &c, c.t_enter - LAST_READ_NS, c.t_enter);       /* just before */
	/* no syscall inside: a read's bytes were already in (timed at the
	 * return), a write's record goes out after the call (a memory BIO's:
	 * Node writes it to the socket once SSL_write returns): the agent
	 * times it at that write (KPI_PAYLOAD_F_LATER) */
	return tls_send(pt, &c, c.t_io ? c.t_io : now,
			c.dir == KPI_PAYLOAD_OUT && !c.t_io ? KPI_PAYLOAD_F_LATER : 0, n);
}

/* int SSL_read(SSL *ssl, void *buf, int num), SSL_write(SSL *, const void *, int) */
SEC("uprobe")
int BPF_KPROBE(kpi_ssl_read, void *ssl, void *buf, int num)
{
	return tls_enter((__u64)ssl, (__u64)buf, 0, KPI_PAYLOAD_IN);
}

SEC("uprobe")
int BPF_KPROBE(kpi_ssl_write, void *ssl, const void *buf, int num)
{
	return tls_enter((__u64)ssl, (__u64)buf, 0, KPI_PAYLOAD_OUT);
}

SEC("uretprobe")
int BPF_KRETPROBE(kpi_ssl_ret, int ret)
{
	return tls_exit(ret > 0 ? (__u64)ret : 0);
}

/* int SSL_read_ex(SSL *, void *buf, size_t num, size_t *readbytes), and
 * SSL_write_ex(SSL *, const void *buf, size_t num, size_t *written): 1 and
 * the count through the pointer, or 0 */
SEC("uprobe")
int BPF_KPROBE(kpi_ssl_read_ex, void *ssl, void *buf, size_t num, size_t *readbytes)
{
	return tls_enter((__u64)ssl, (__u64)buf, (__u64)readbytes, KPI_PAYLOAD_IN);
}

SEC("uprobe")
int BPF_KPROBE(kpi_ssl_write_ex, void *ssl, const void *buf, size_t num, size_t *written)
{
	return tls_enter((__u64)ssl, (__u64)buf, (__u64)written, KPI_PAYLOAD_OUT);
}

SEC("uretprobe")
int BPF_KRETPROBE(kpi_ssl_ret_ex, int ret)
{
	__u64 pt = bpf_get_current_pid_tgid();
	struct kpi_tls_call *p = bpf_map_lookup_elem(&tls_calls, &pt);
	__u64 n = 0;

	if (p && ret == 1 && p->out_len &&
	    bpf_probe_read_user(&n, sizeof(n), (const void *)p->out_len))
		n = 0;
	return tls_exit(n);
}

/* ---- Go's crypto/tls --------------------------------------------------------
 * func (c *Conn) Read(b []byte) (int, error) and Write, in the executable:
 * Go 1.17's register ABI passes c in RAX, b's pointer in RBX (its length in
 * RCX) and returns n in RAX; R14 holds the goroutine's g throughout.  A
 * goroutine may park inside the call and resume on another thread, so the
 * call is keyed by (tgid, g), and its return is a uprobe on each RET the
 * agent found (agent/host/gobin.c), never a uretprobe: Go copies stacks.
 * The socket is c.conn's: an interface whose data word points at a
 * *net.TCPConn, whose first word is its *netFD, whose poll.FD holds Sysfd
 * after the 16 bytes of its fdMutex; the same in every Go from 1.9 to now.
 * An fd read there counts only if the target accepted that socket (conns):
 * a tls.Conn over another net.Conn is never read as a wrong one. */
#define GO_IFACE_DATA   8       /* net.Conn: (itab, data) */
#define GO_TCPCONN_FD   0       /* net.TCPConn{conn{fd *netFD}} */
#define GO_NETFD_SYSFD  16      /* netFD{pfd poll.FD{fdmu fdMutex (16); Sysfd int}} */

struct go_key {
	__u64 g;
	__u32 tgid;
	__u32 _pad;
};

struct go_call {
	__u64 conn;                     /* the *tls.Conn */
	__u64 buf;
	__u64 t_enter;
	__u32 dir;
	int fd;                         /* its socket as the entry read it, -1 none */
	__u64 sk;                       /* its struct sock, when the target had accepted it then */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct go_key);
	__type(value, struct go_call);
} go_calls SEC(".maps");

/* The socket of a *tls.Conn as its structs say, -1 when they cannot be read. */
static __always_inline int go_conn_fd(__u64 conn)
{
	__u64 data = 0, netfd = 0;
	__s64 fd = -1;

	if (bpf_probe_read_user(&data, sizeof(data), (const void *)(conn + GO_IFACE_DATA)) || !data ||
	    bpf_probe_read_user(&netfd, sizeof(netfd), (const void *)(data + GO_TCPCONN_FD)) || !netfd ||
	    bpf_probe_read_user(&fd, sizeof(fd), (const void *)(netfd + GO_NETFD_SYSFD)) ||
	    fd < 0 || fd > 0x7fffffff)
		return -1;
	return (int)fd;
}

/* The struct sock of fd when it is a socket the target accepted (and has
 * not closed), else 0. */
static __always_inline __u64 go_served(__u32 tgid, int fd)
{
	__u64 key = conn_key(tgid, fd);
	struct kpi_conn *c = bpf_map_lookup_elem(&conns, &key);

	return c && c->is_sock && c->role == KPI_ROLE_SERVED && c->sk ? c->sk : 0;
}

/* The socket is read at the entry, while it is surely open: another
 * goroutine may close it before this one reaches its RET (Go sets Sysfd to
 * -1 then); it is checked against conns there, or at the RET (a Read that
 * does the handshake makes the socket's first syscalls inside the call). */
static __always_inline int go_enter(struct pt_regs *ctx, __u32 dir)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct kpi_target *tg = bpf_map_lookup_elem(&targets, &tgid);
	struct go_key k = { .g = ctx->r14, .tgid = tgid };
	struct go_call c = { .conn = ctx->ax, .buf = ctx->bx, .dir = dir };

	if (!tg || !(tg->flags & KPI_TARGET_F_HTTP))
		return 0;
	c.t_enter = bpf_ktime_get_ns();
	c.fd = go_conn_fd(c.conn);
	c.sk = c.fd >= 0 ? go_served(tgid, c.fd) : 0;
	bpf_map_update_elem(&go_calls, &k, &c, BPF_ANY);
	return 0;
}

SEC("uprobe")
int kpi_go_tls_read(struct pt_regs *ctx)
{
	return go_enter(ctx, KPI_PAYLOAD_IN);
}

SEC("uprobe")
int kpi_go_tls_write(struct pt_regs *ctx)
{
	return go_enter(ctx, KPI_PAYLOAD_OUT);
}

/* A write call of c->fd: the last write of a TLS record to its socket in
 * [c->t_enter, hi] (tls_last_write); else its entry. */
static __always_inline __u64 write_time(__u64 pt, const struct kpi_tls_call *c, __u64 hi)
{
	__u64 key = conn_key(pt >> 32, c->fd);
	struct kpi_tls_read *lw = bpf_map_lookup_elem(&tls_last_write, &key);

	if (!lw || lw->fd != c->fd || lw->ts < c->t_enter || lw->ts > hi)
		return c->t_enter;
	return lw->ts;
}

/* At a RET of either: n in RAX.  Its records were read or written inside
 * the call: a read is timed at its ciphertext's read by the thread that
 * returns (unless the goroutine parked and moved), else at the return; a
 * write at its socket's last record write since the entry, else at its
 * entry. */
SEC("uprobe")
int kpi_go_tls_ret(struct pt_regs *ctx)
{
	__u64 pt = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns();
	struct go_key k = { .g = ctx->r14, .tgid = pt >> 32 };
	struct go_call *p = bpf_map_lookup_elem(&go_calls, &k);
	struct kpi_tls_call c = {};
	__s64 n = (__s64)ctx->ax;
	__u64 sk, now_sk;

	if (!p)
		return 0;
	c.buf = p->buf;
	c.dir = p->dir;
	c.t_enter = p->t_enter;
	c.ssl = p->conn;
	c.fd = p->fd;
	sk = p->sk;
	bpf_map_delete_elem(&go_calls, &k);
	if (n <= 0)
		return 0;
	now_sk = c.fd >= 0 ? go_served(k.tgid, c.fd) : 0;
	if (sk && now_sk != sk) {
		/* closed (and the fd perhaps given to a new connection) while the
		 * call went on: its bytes belonged to a connection the agent has
		 * finished with, and are never put on another */
		count(KPI_CNT_GO_TLS_CLOSED);
		return 0;
	}
	if (!now_sk)
		c.fd = KPI_TLS_FD_UNKNOWN;      /* counted by the agent as unplaced */
	if (c.dir == KPI_PAYLOAD_IN)
		read_timed(pt, &c, c.t_enter - LAST_READ_NS, now);
	return tls_send(pt, &c, c.dir == KPI_PAYLOAD_IN ? (c.t_io ? c.t_io : now) :
			write_time(pt, &c, now), 0, (__u64)n);
}
