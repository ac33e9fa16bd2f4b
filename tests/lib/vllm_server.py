"""vllm_server.py - a vLLM-shaped stand-in for the tests of the split kpi-agent
infers from stream timing (issue 48): its engine loop is a task of the server's
own asyncio event loop (vLLM's AsyncLLMEngine), the one that reads the requests
and writes the tokens; at most --max-seqs sequences run, the others wait in a
queue, first come, first served; without --chunked every admitted prompt runs
whole in the step that admits it, and stalls that step's decodes (vLLM without
chunked prefill), with --chunked prompts are cut to the step's --token-budget.

A step takes --step-us + --decode-us per decoding sequence + --prefill-us per
prefill token (an asyncio sleep, during which the loop reads requests and
writes the last step's tokens), then hands one token to every sequence that
decoded or finished its prompt in it.  The HTTP side, the scheduler and the
log are tests/lib/batch_server.py's: the same JSON lines (CLOCK_MONOTONIC ns),
one "step" per step and one "req" per request with its true admission
(t_admit: taken into the waiting queue; t_sched: start of the first step that
ran its prompt) and first-token time (t_first: end of the step that finished
its prompt), which the tests hold the agent's inference against.

Run: python3 vllm_server.py PORT LOG [--max-seqs N] [--chunked] [--token-budget N]
[--step-us US] [--decode-us US] [--prefill-us US]; it prints 'listening on PORT'
when ready.  Standard library only."""
import argparse, asyncio, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import batch_server as bs  # noqa: E402


class AsyncEngine(bs.Engine):
    """batch_server's engine, its scheduler and marks, stepped by a coroutine
    of the event loop instead of a thread of its own."""

    def __init__(self, cfg, replica, log, loop):
        super().__init__(cfg, replica, log, loop)
        self.wake = asyncio.Event()

    def submit(self, req):
        req.t_admit = bs.now()
        self.waiting.append(req)
        self.wake.set()

    def start(self):
        self.task = self.loop.create_task(self._loop())

    async def _loop(self):
        while True:
            if not self.waiting and not self.running:
                self.wake.clear()
                await self.wake.wait()
            batch = self._schedule()
            if not batch:
                continue
            t0 = bs.now()
            await asyncio.sleep(self._step_s(batch))
            t1 = bs.now()
            # the tokens go to the streams' queues; their writers run while
            # the next step sleeps, as vLLM's output handlers do
            bs._emit_all(self._step_done(batch, t0, t1))


class Server(bs.Server):
    def start_engines(self, loop):
        self.engines = [AsyncEngine(self.cfg, 0, self.log, loop)]
        self.engines[0].start()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("port", type=int)
    ap.add_argument("log")
    ap.add_argument("--max-seqs", type=int, default=6)
    ap.add_argument("--token-budget", type=int, default=4096)
    ap.add_argument("--chunked", action="store_true")
    ap.add_argument("--step-us", type=float, default=5000)
    ap.add_argument("--decode-us", type=float, default=150)
    ap.add_argument("--prefill-us", type=float, default=40)
    cfg = ap.parse_args()
    cfg.buffer_ms, cfg.replicas, cfg.spec = 0, 1, 1
    bs.serve(Server, cfg)


if __name__ == "__main__":
    main()
