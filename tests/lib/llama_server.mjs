// llama_server.mjs - an OpenAI-style streaming server over the real llama.cpp
// (node-llama-cpp from build/node-llama) for tests/test_agent_llama.py: one
// context with several sequences, so concurrent requests share batch steps.
//
// It writes its own CLOCK_MONOTONIC marks (process.hrtime.bigint()) as JSON
// lines to MARKS: one "step" per call into the engine's decode (before the call
// and when it resolves, with what the batch held per sequence) and one "req" per
// request (read, sequence, prompt tokens, tokens reused from the sequence's cache).
// A free sequence whose cache shares the longest prefix with a prompt is
// chosen, and only the tokens after that prefix are evaluated.
//
// The engine runs in a worker thread whose event loop does nothing else, so
// that its marks are not late behind HTTP work; the main thread parses, tokenizes
// (a vocabulary-only load of the same model) and writes the events.
//
// Run: node llama_server.mjs PORT MODEL.gguf MARKS [SEQUENCES]
import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import url from 'node:url';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

const here = path.dirname(url.fileURLToPath(import.meta.url));
const nlcDir = process.env.NODE_LLAMA_DIR || path.join(here, '..', '..', 'build', 'node-llama');
const { getLlama } = await import(url.pathToFileURL(
  path.join(nlcDir, 'node_modules', 'node-llama-cpp', 'dist', 'index.js')).href);
const now = () => process.hrtime.bigint().toString();
// one thread: the test machine is small and shared, spinning threads cost steps
const llama = await getLlama({ gpu: false, build: 'never', progressLogs: false, logLevel: 'error' });

/* ---- the engine (worker thread) ------------------------------------------ */

async function engine({ modelPath, marksPath, nSeq }) {
  const marks = fs.openSync(marksPath, 'a');
  const mark = (o) => fs.writeSync(marks, JSON.stringify(o) + '\n');
  const model = await llama.loadModel({ modelPath });
  const context = await model.createContext({ sequences: nSeq, contextSize: 512 * nSeq,
                                              batchSize: 512, threads: 1 });

  // The engine's own batch calls, timed around: _ctx is node-llama-cpp's addon
  // context, the one object that calls llama_decode; its methods are read-only
  // on its prototype, so the wrappers go on the object.
  const addon = context._ctx;
  let items = [];
  const initBatch = addon.initBatch.bind(addon);
  const addToBatch = addon.addToBatch.bind(addon);
  const decodeBatch = addon.decodeBatch.bind(addon);
  const wrap = (name, fn) => Object.defineProperty(addon, name, { value: fn });
  wrap('initBatch', (size) => { items = []; return initBatch(size); });
  wrap('addToBatch', (seqId, first, tokens, logitIdx) => {
    items.push([seqId, first, tokens.length, logitIdx.length]);
    return addToBatch(seqId, first, tokens, logitIdx);
  });
  wrap('decodeBatch', async () => {
    const t0 = now(), held = items;
    await decodeBatch();
    mark({ kind: 'step', t0, t1: now(), items: held });
  });

  // sequences free to take, and requests waiting for one, in arrival order
  const free = [];
  for (let i = 0; i < nSeq; i++)
    free.push(context.getSequence());
  const waiting = [];
  const take = (tokens) => {
    let best = 0, bestLen = -1;
    free.forEach((s, i) => {
      const n = s.compareContextTokens(tokens).firstDifferentIndex;
      if (n > bestLen) { best = i; bestLen = n; }
    });
    return free.splice(best, 1)[0];
  };
  const acquire = (tokens) => {
    if (free.length && !waiting.length)
      return Promise.resolve(take(tokens));
    return new Promise((resolve) => waiting.push({ tokens, resolve }));
  };
  const release = (seq) => {
    free.push(seq);
    if (waiting.length) {
      const w = waiting.shift();
      w.resolve(take(w.tokens));
    }
  };

  async function complete({ id, tokens, maxTokens }) {
    const seq = await acquire(tokens);
    // keep what the sequence's cache shares with this prompt; evaluate at least
    // the last prompt token, whose logits give the first generated token
    const keep = Math.min(seq.compareContextTokens(tokens).firstDifferentIndex, tokens.length - 1);
    if (keep < seq.nextTokenIndex)
      await seq.eraseContextTokenRanges([{ start: keep, end: seq.nextTokenIndex }]);
    const cached = seq.nextTokenIndex;
    const tSubmit = now();
    let n = 0, tFirst = null, tLast = null, finish = 'length';
    try {
      for await (const t of seq.evaluate(tokens.slice(cached), { temperature: 0 })) {
        tLast = now();
        if (tFirst === null)
          tFirst = tLast;
        if (model.isEogToken(t)) {
          finish = 'stop';
          break;
        }
        n++;
        parentPort.postMessage({ op: 'token', id, token: t });
        if (n >= maxTokens)
          break;
      }
    } finally {
      release(seq);
    }
    parentPort.postMessage({ op: 'end', id, finish, n, seq: seq._sequenceId, cached,
                             t_submit: tSubmit, t_first_tok: tFirst, t_last_tok: tLast });
  }

  parentPort.on('message', (m) => complete(m).catch((e) =>
    parentPort.postMessage({ op: 'fail', id: m.id, error: String(e && e.stack || e) })));
  parentPort.postMessage({ op: 'ready' });
}

/* ---- HTTP (main thread) ---------------------------------------------------- */

async function serve(port, modelPath, marksPath, nSeq) {
  fs.writeFileSync(marksPath, '');
  const marks = fs.openSync(marksPath, 'a');
  const mark = (o) => fs.writeSync(marks, JSON.stringify(o) + '\n');
  const vocab = await llama.loadModel({ modelPath, vocabOnly: true });
  // a young generation large enough that a test's load runs without a
  // scavenge: a collection between a mark and its call would make it late
  const worker = new Worker(url.fileURLToPath(import.meta.url),
                            { workerData: { modelPath, marksPath, nSeq },
                              resourceLimits: { maxYoungGenerationSizeMb: 512 } });
  // this thread only (setpriority on Linux is per thread), after the engine's
  // started: its HTTP work yields the CPU to the engine's marks
  os.setPriority(Math.min(19, os.getPriority() + 10));
  const open = new Map();
  let nextId = 0;
  const sse = (o) => 'data: ' + (typeof o === 'string' ? o : JSON.stringify(o)) + '\n\n';

  worker.on('error', (e) => { console.error('llama_server: engine: ' + e.stack); process.exit(1); });
  worker.on('message', (m) => {
    if (m.op === 'ready') {
      server.listen(parseInt(port, 10), '127.0.0.1', () =>
        console.log(`listening on 127.0.0.1:${port} (pid ${process.pid}, ${nSeq} sequences)`));
      return;
    }
    const x = open.get(m.id);
    if (!x)
      return;
    if (m.op === 'token') {
      x.res.write(sse({ id: x.cid, object: 'chat.completion.chunk',
                        choices: [{ index: 0, delta: { content: vocab.detokenize([m.token]) },
                                    finish_reason: null }] }));
      return;
    }
    open.delete(m.id);
    if (m.op === 'fail') {
      console.error('llama_server: ' + m.error);
      x.res.destroy();
      return;
    }
    mark({ kind: 'req', id: x.rid, seq: m.seq, t_read: x.tRead, t_submit: m.t_submit,
           t_first_tok: m.t_first_tok, t_last_tok: m.t_last_tok,
           prompt_tokens: x.nPrompt, cached: m.cached, n_out: m.n });
    x.res.write(sse({ id: x.cid, object: 'chat.completion.chunk',
                      choices: [{ index: 0, delta: {}, finish_reason: m.finish }] }));
    x.res.write(sse({ id: x.cid, object: 'chat.completion.chunk', choices: [],
                      usage: { prompt_tokens: x.nPrompt, completion_tokens: m.n,
                               total_tokens: x.nPrompt + m.n } }));
    x.res.end(sse('[DONE]'));
  });

  const promptOf = (body) => typeof body.prompt === 'string' ? body.prompt
    : (body.messages || []).map((m) => String(m.content || '')).join('\n');

  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const tRead = now();
      let body;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString() || '{}');
      } catch (e) {
        res.writeHead(400, { 'Content-Type': 'text/plain' });
        res.end('bad json\n');
        return;
      }
      if (req.method !== 'POST' || !/\/completions$/.test(req.url)) {
        res.writeHead(404, { 'Content-Type': 'text/plain' });
        res.end('not found\n');
        return;
      }
      const rid = req.headers['x-request-id'] || '';
      const tokens = Array.from(vocab.tokenize(promptOf(body), true));
      const id = nextId++;
      open.set(id, { res, rid, cid: 'chatcmpl-' + (rid || id), tRead, nPrompt: tokens.length });
      const h = { 'Content-Type': 'text/event-stream' };
      if (rid)
        h['x-request-id'] = rid;
      res.writeHead(200, h);
      res.flushHeaders();
      worker.postMessage({ id, tokens, maxTokens: body.max_tokens || 16 });
    });
  });
}

if (isMainThread) {
  const [port, modelPath, marksPath] = process.argv.slice(2, 5);
  await serve(port, modelPath, marksPath, parseInt(process.argv[5] || '4', 10));
} else {
  await engine(workerData);
}
