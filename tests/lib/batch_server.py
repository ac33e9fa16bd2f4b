"""batch_server.py - an OpenAI-style streaming server that batches like vLLM, for the
tests of the engine split kpi-agent infers from stream timing (issue 33).

An engine thread runs a step loop as vLLM's scheduler does (continuous batching):
each step, every running sequence that is decoding gets one token, sequences still
prefilling get their next chunk, and waiting requests are admitted first come, first
served while there is a free slot (--max-seqs) and budget (--token-budget tokens a
step, prefill and decode together). With --chunked a prompt that does not fit the
budget left is cut into chunks over several steps; without it a prompt is never cut
and waits for a step whose budget left holds it whole (a step with no other prompt
takes one of any length). A step takes (it sleeps) --step-us + --decode-us per
decoding sequence + --prefill-us per prefill token, then hands one token to every
sequence that decoded or finished its prompt in it; the asyncio thread writes each
as one SSE event (a chat stream's role-only chunk goes with its first token, as
vLLM sends it).

The server logs its own marks (CLOCK_MONOTONIC ns, the clock kpi-agent's BPF uses)
as JSON lines to LOG, and they are the truth the agent's inference is measured
against: one "step" per step (t0, t1, prefill tokens, decoding sequences, the
requests that got a prefill chunk) and one "req" per request: t_read (its body
read), t_admit (the engine took it into its waiting queue), t_sched (start of the
first step that held a chunk of its prompt), t_first (end of the step that finished
its prompt: its first token), t_last, emits (the end of each step that gave it
tokens: one event each), prompt_tokens (a token per byte of the prompt, plus one: the
byte tokenizer of the tiny model that kpi-infer and llama.cpp serve, so kpi-bench's
--prompt-len means the same for all three), n_out, prefill_steps.

Modes that break the assumptions the agent's rules rest on, where it must decline:
--buffer-ms MS  a stream's events are written together every MS ms (several in one
                write), not as the engine emits them;
--replicas N    N engines behind the one port, requests dealt round robin;
--spec K        speculative decoding: a decode step gives each sequence up to K
                tokens, written as one event.

Run: python3 batch_server.py PORT LOG [--max-seqs N] [--token-budget N] [--chunked]
[--step-us US] [--decode-us US] [--prefill-us US] [--buffer-ms MS] [--replicas N]
[--spec K]; it prints 'listening on PORT' when ready.  Standard library only."""
import argparse, asyncio, collections, itertools, json, random, threading, time

now = time.monotonic_ns       # CLOCK_MONOTONIC on Linux, as bpf_ktime_get_ns


class Request:
    def __init__(self, rid, prompt_tokens, max_tokens, t_read, emit):
        self.rid, self.prompt_tokens, self.max_tokens = rid, prompt_tokens, max_tokens
        self.t_read, self.emit = t_read, emit
        self.t_admit = self.t_sched = self.t_first = self.t_last = None
        self.prefilled = 0          # prompt tokens computed so far
        self.n_out = 0
        self.prefill_steps = 0
        self.emits = []             # the end of every step that gave it tokens


class Engine(threading.Thread):
    """One engine: a waiting queue and a step loop (its own thread)."""

    def __init__(self, cfg, replica, log, loop):
        super().__init__(daemon=True, name=f"engine-{replica}")
        self.cfg, self.replica, self.log, self.loop = cfg, replica, log, loop
        self.cv = threading.Condition()
        self.incoming = []
        self.waiting = collections.deque()
        self.running = []
        self.rnd = random.Random(replica)

    def submit(self, req):
        with self.cv:
            self.incoming.append(req)
            self.cv.notify()

    def _take_incoming(self):
        with self.cv:
            while not self.incoming and not self.waiting and not self.running:
                self.cv.wait()
            t = now()
            for r in self.incoming:
                r.t_admit = t
                self.waiting.append(r)
            self.incoming.clear()

    def _schedule(self):
        """The step's batch: [(request, prefill tokens or 0 for a decode)]."""
        cfg, budget, batch = self.cfg, self.cfg.token_budget, []
        for r in self.running:                      # decodes first, oldest first
            if r.prefilled == r.prompt_tokens and budget > 0:
                batch.append((r, 0))
                budget -= 1
        for r in self.running:                      # then prompts already started
            left = r.prompt_tokens - r.prefilled
            if left and budget > 0:
                n = min(left, budget)
                batch.append((r, n))
                budget -= n
        while self.waiting and len(self.running) < cfg.max_seqs and budget > 0:
            r = self.waiting[0]
            if not cfg.chunked and r.prompt_tokens > budget and any(n for _, n in batch):
                break                               # waits until it fits whole
            n = min(r.prompt_tokens, budget) if cfg.chunked else r.prompt_tokens
            self.waiting.popleft()
            self.running.append(r)
            batch.append((r, n))
            budget -= n
        return batch

    def run(self):
        while True:
            self._take_incoming()
            batch = self._schedule()
            if not batch:
                continue
            t0 = now()
            time.sleep(self._step_s(batch))
            t1 = now()
            # every stream's token of this step is handed to the writers at once
            self.loop.call_soon_threadsafe(_emit_all, self._step_done(batch, t0, t1))

    def _step_s(self, batch):
        """How long the step of batch takes: a fixed part, each decode, each
        prefill token."""
        cfg = self.cfg
        n_dec = sum(1 for _, n in batch if n == 0)
        n_pre = sum(n for _, n in batch)
        return (cfg.step_us + cfg.decode_us * n_dec + cfg.prefill_us * n_pre) / 1e6

    def _step_done(self, batch, t0, t1):
        """The step [t0, t1] of batch ran: its marks, its log line, the
        [(request, tokens, last)] it gives."""
        cfg = self.cfg
        emitted, done = [], []
        for r, n in batch:
            if n:
                if r.t_sched is None:
                    r.t_sched = t0
                r.prefill_steps += 1
                r.prefilled += n
                if r.prefilled < r.prompt_tokens:
                    continue                    # more chunks to come: no token yet
                r.t_first = t1
                k = 1
            else:
                k = self.rnd.randint(1, cfg.spec) if cfg.spec > 1 else 1
            k = min(k, r.max_tokens - r.n_out)
            r.n_out += k
            r.t_last = t1
            r.emits.append(t1)
            last = r.n_out >= r.max_tokens
            emitted.append((r, k, last))
            if last:
                done.append(r)
        for r in done:
            self.running.remove(r)
            self._log_req(r)
        self._log({"kind": "step", "replica": self.replica, "t0": t0, "t1": t1,
                   "prefill_tokens": sum(n for _, n in batch),
                   "decode_seqs": sum(1 for _, n in batch if n == 0),
                   "prefill": [r.rid for r, n in batch if n]})
        return emitted

    def _log_req(self, r):
        self._log({"kind": "req", "id": r.rid, "replica": self.replica, "t_read": r.t_read,
                   "t_admit": r.t_admit, "t_sched": r.t_sched, "t_first": r.t_first,
                   "t_last": r.t_last, "prompt_tokens": r.prompt_tokens, "n_out": r.n_out,
                   "prefill_steps": r.prefill_steps, "emits": r.emits})

    def _log(self, obj):
        self.log.write(json.dumps(obj) + "\n")


def _emit_all(emitted):
    for r, k, last in emitted:
        r.emit(k, last)


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(obj):
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


class Server:
    def __init__(self, cfg, log):
        self.cfg, self.log = cfg, log
        self.ids = itertools.count(1)
        self.deal = itertools.cycle(range(cfg.replicas))
        self.engines = []

    def start_engines(self, loop):
        self.engines = [Engine(self.cfg, i, self.log, loop) for i in range(self.cfg.replicas)]
        for e in self.engines:
            e.start()

    async def handle(self, reader, writer):
        try:
            while await self._one(reader, writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _one(self, reader, writer):
        """One request on the connection; False when it is to close."""
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path = lines[0].split(" ")[:2]
        headers = {k.strip().lower(): v.strip() for k, v in
                   (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        t_read = now()
        rid = headers.get("x-request-id") or f"srv-{next(self.ids)}"
        close = headers.get("connection", "").lower() == "close"
        route = path.split("?")[0]
        if method != "POST" or route not in ("/v1/completions", "/v1/chat/completions"):
            await self._plain(writer, 404, rid, {"error": {"message": "not found", "code": 404}})
            return not close
        try:
            req = json.loads(body or b"{}")
            text = req["prompt"] if route == "/v1/completions" else \
                "\n".join(str(m.get("content", "")) for m in req["messages"])
            max_tokens = int(req.get("max_tokens", 16))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            await self._plain(writer, 400, rid, {"error": {"message": f"bad request: {e}",
                                                            "code": 400}})
            return False
        chat = route.endswith("/chat/completions")
        stream = bool(req.get("stream"))
        usage = stream and bool((req.get("stream_options") or {}).get("include_usage"))
        await self._generate(writer, rid, chat, stream, usage, len(text.encode()) + 1,
                             max(1, max_tokens), t_read)
        return not close

    async def _plain(self, writer, status, rid, obj):
        data = json.dumps(obj).encode()
        writer.write(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"x-request-id: %s\r\n\r\n%s" % (status, len(data), rid.encode(), data))
        await writer.drain()

    async def _generate(self, writer, rid, chat, stream, usage, n_prompt, max_tokens, t_read):
        cfg, q = self.cfg, asyncio.Queue()
        req = Request(rid, n_prompt, max_tokens, t_read, lambda k, last: q.put_nowait((k, last)))
        cid, obj = (f"chatcmpl-{rid}", "chat.completion.chunk") if chat else \
            (f"cmpl-{rid}", "text_completion")
        words = iter(itertools.count())

        def event(k, finish=None):
            text = "".join(f" w{next(words)}" for _ in range(k))
            choice = {"index": 0, "finish_reason": finish}
            choice.update({"delta": {"content": text} if k else {}} if chat else {"text": text})
            return sse({"id": cid, "object": obj, "choices": [choice]})

        if stream:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\nx-request-id: %s\r\n\r\n" % rid.encode())
        engine = self.engines[next(self.deal)]
        engine.submit(req)
        pending, n_out = [], 0      # events not written yet (--buffer-ms)
        flush_at = 0
        while True:
            if pending:
                try:
                    k, last = await asyncio.wait_for(q.get(), max(0.0, (flush_at - now()) / 1e9))
                except asyncio.TimeoutError:
                    writer.write(chunk(b"".join(pending)))
                    pending = []
                    continue
            else:
                k, last = await q.get()
            if stream:
                if not pending:
                    flush_at = now() + int(cfg.buffer_ms * 1e6)
                if chat and not n_out:      # vLLM's role-only chunk, with the first token
                    pending.append(sse({"id": cid, "object": obj, "choices": [
                        {"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
                pending.append(event(k))
                if not cfg.buffer_ms:       # one write per event, as the engine emits
                    for e in pending:
                        writer.write(chunk(e))
                    pending = []
            n_out += k
            if last:
                break
        if not stream:
            text = " ".join(f"w{i}" for i in range(n_out))
            body = {"id": cid, "object": "chat.completion" if chat else "text_completion",
                    "choices": [{"index": 0, "finish_reason": "length",
                                 **({"message": {"role": "assistant", "content": text}}
                                    if chat else {"text": text})}],
                    "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out,
                              "total_tokens": n_prompt + n_out}}
            await self._plain(writer, 200, rid, body)
            return
        tail = pending + [event(0, "length")]
        if usage:
            tail.append(sse({"id": cid, "object": obj, "choices": [],
                             "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out,
                                       "total_tokens": n_prompt + n_out}}))
        tail.append(sse(b"[DONE]"))
        writer.write(chunk(b"".join(tail)) + b"0\r\n\r\n")
        await writer.drain()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("port", type=int)
    ap.add_argument("log")
    ap.add_argument("--max-seqs", type=int, default=64)
    ap.add_argument("--token-budget", type=int, default=2048)
    ap.add_argument("--chunked", action="store_true")
    ap.add_argument("--step-us", type=float, default=3000)
    ap.add_argument("--decode-us", type=float, default=100)
    ap.add_argument("--prefill-us", type=float, default=20)
    ap.add_argument("--buffer-ms", type=float, default=0)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--spec", type=int, default=1)
    serve(Server, ap.parse_args())


def serve(server_cls, cfg):
    """Serves cfg.port with a server_cls logging to cfg.log, until interrupted."""
    srv = server_cls(cfg, open(cfg.log, "w", buffering=1))

    async def run():
        srv.start_engines(asyncio.get_running_loop())
        s = await asyncio.start_server(srv.handle, "127.0.0.1", cfg.port, backlog=256)
        print(f"listening on {cfg.port}", flush=True)
        async with s:
            await s.serve_forever()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
