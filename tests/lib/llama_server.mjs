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
// Run: node llama_server.mjs PORT MODEL.gguf MARKS [SEQUENCES]
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import url from 'node:url';

const [port, modelPath, marksPath] = process.argv.slice(2, 5);
const nSeq = parseInt(process.argv[5] || '4', 10);
const here = path.dirname(url.fileURLToPath(import.meta.url));
const nlcDir = process.env.NODE_LLAMA_DIR || path.join(here, '..', '..', 'build', 'node-llama');
const { getLlama } = await import(url.pathToFileURL(
  path.join(nlcDir, 'node_modules', 'node-llama-cpp', 'dist', 'index.js')).href);

const now = () => process.hrtime.bigint().toString();
const marks = fs.openSync(marksPath, 'w');
const mark = (o) => fs.writeSync(marks, JSON.stringify(o) + '\n');

// one thread: the test machine is small and shared, spinning threads cost steps
const llama = await getLlama({ gpu: false, build: 'never', progressLogs: false, logLevel: 'error' });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({ sequences: nSeq, contextSize: 512 * nSeq,
                                            batchSize: 512, threads: 1 });

// The engine's own batch calls, timed around: _ctx is node-llama-cpp's addon
// context, the one object that calls llama_decode.
const addon = context._ctx;
let items = [];
const initBatch = addon.initBatch.bind(addon);
const addToBatch = addon.addToBatch.bind(addon);
const decodeBatch = addon.decodeBatch.bind(addon);
// the addon's methods are read-only on its prototype: the wrappers go on the object
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

function take(tokens) {
  let best = 0, bestLen = -1;
  free.forEach((s, i) => {
    const n = s.compareContextTokens(tokens).firstDifferentIndex;
    if (n > bestLen) { best = i; bestLen = n; }
  });
  return free.splice(best, 1)[0];
}

function acquire(tokens) {
  if (free.length && !waiting.length)
    return Promise.resolve(take(tokens));
  return new Promise((resolve) => waiting.push({ tokens, resolve }));
}

function release(seq) {
  free.push(seq);
  if (waiting.length) {
    const w = waiting.shift();
    w.resolve(take(w.tokens));
  }
}

const sse = (o) => 'data: ' + (typeof o === 'string' ? o : JSON.stringify(o)) + '\n\n';

function promptOf(body) {
  if (typeof body.prompt === 'string')
    return body.prompt;
  return (body.messages || []).map((m) => String(m.content || '')).join('\n');
}

async function complete(req, res, body, tRead) {
  const rid = req.headers['x-request-id'] || '';
  const tokens = Array.from(model.tokenize(promptOf(body), true));
  const maxTokens = body.max_tokens || 16;
  const seq = await acquire(tokens);
  // keep what the sequence's cache shares with this prompt; evaluate at least
  // the last prompt token, whose logits give the first generated token
  let cached = Math.min(seq.compareContextTokens(tokens).firstDifferentIndex, tokens.length - 1);
  if (cached < seq.nextTokenIndex)
    await seq.eraseContextTokenRanges([{ start: cached, end: seq.nextTokenIndex }]);
  cached = seq.nextTokenIndex;
  const id = 'chatcmpl-' + rid;
  const h = { 'Content-Type': 'text/event-stream' };
  if (rid)
    h['x-request-id'] = rid;
  res.writeHead(200, h);
  res.flushHeaders();
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
      res.write(sse({ id, object: 'chat.completion.chunk',
                      choices: [{ index: 0, delta: { content: model.detokenize([t]) },
                                  finish_reason: null }] }));
      if (n >= maxTokens)
        break;
    }
  } finally {
    mark({ kind: 'req', id: rid, seq: seq._sequenceId, t_read: tRead, t_submit: tSubmit,
           t_first_tok: tFirst, t_last_tok: tLast, prompt_tokens: tokens.length, cached,
           n_out: n });
    release(seq);
  }
  res.write(sse({ id, object: 'chat.completion.chunk',
                  choices: [{ index: 0, delta: {}, finish_reason: finish }] }));
  res.write(sse({ id, object: 'chat.completion.chunk', choices: [],
                  usage: { prompt_tokens: tokens.length, completion_tokens: n,
                           total_tokens: tokens.length + n } }));
  res.end(sse('[DONE]'));
}

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
    complete(req, res, body, tRead).catch((e) => {
      console.error('llama_server: ' + (e && e.stack || e));
      res.destroy();
    });
  });
});

server.listen(parseInt(port, 10), '127.0.0.1', () => {
  console.log(`listening on 127.0.0.1:${port} (pid ${process.pid}, ${nSeq} sequences)`);
});
