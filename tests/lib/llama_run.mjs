// llama_run.mjs - the real llama.cpp (node-llama-cpp from build/node-llama) on
// a GGUF file, for the quantization tests and benchmark: one JSON line out.
//
// greedy, logits and first run llama.cpp without flash attention, its most
// precise configuration (its CPU flash attention sums V in fp16); decode
// runs it as node-llama-cpp's defaults do, the configuration people get.
//
//   node llama_run.mjs greedy MODEL IDS N
//       the N greedy tokens after the prompt token ids IDS (comma-separated,
//       BOS included as given), end-of-generation tokens not stopping it
//   node llama_run.mjs logits MODEL IDS
//       the raw logits after every position of the token ids IDS (teacher
//       forcing: one evaluation of the whole sequence), [position][vocab]
//   node llama_run.mjs first MODEL IDS
//       the raw logits of each token id of IDS alone, at position 0 (the
//       forward pass without attention's mixing: matmuls, norms, SwiGLU)
//   node llama_run.mjs decode MODEL SEQS PROMPT GEN THREADS
//       SEQS sequences at once, each a PROMPT-token prompt then GEN greedy
//       tokens (the prompts engine-bench decode uses): tokens/s after every
//       sequence's first token, the time inside llama.cpp's decode calls,
//       the process's CPU time over the same span, and its resident memory
//       before and after the model loaded
import path from 'node:path';
import url from 'node:url';
import fs from 'node:fs';

const here = path.dirname(url.fileURLToPath(import.meta.url));
const nlcDir = process.env.NODE_LLAMA_DIR || path.join(here, '..', '..', 'build', 'node-llama');
const { getLlama } = await import(url.pathToFileURL(
  path.join(nlcDir, 'node_modules', 'node-llama-cpp', 'dist', 'index.js')).href);

const rssBytes = () => {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
};

/* One JSON line on stdout, whole: a pipe takes a large write in pieces. */
const emit = (obj) => {
  const buf = Buffer.from(JSON.stringify(obj) + '\n');
  for (let off = 0; off < buf.length;) {
    try {
      off += fs.writeSync(1, buf, off);
    } catch (e) {
      if (e.code !== 'EAGAIN')
        throw e;
    }
  }
};

const vocabSize = (model) => model.fileInsights.vocabularySize;

const [mode, modelPath, ...args] = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: 'never', progressLogs: false, logLevel: 'error' });

async function greedy() {
  const ids = args[0].split(',').map(Number), n = Number(args[1]);
  const model = await llama.loadModel({ modelPath });
  const context = await model.createContext({ contextSize: 512, threads: 1, sequences: 1,
                                              flashAttention: false });
  const seq = context.getSequence();
  const out = [];
  for await (const t of seq.evaluate(ids, { temperature: 0, yieldEogToken: true })) {
    out.push(t);
    if (out.length >= n)
      break;
  }
  emit({ mode, tokens: out });
}

async function logits() {
  const ids = args[0].split(',').map(Number);
  const model = await llama.loadModel({ modelPath });
  const nVocab = vocabSize(model);
  const context = await model.createContext({ contextSize: Math.max(512, ids.length + 16), threads: 1, flashAttention: false,
                                              sequences: 1, batchSize: Math.max(512, ids.length) });
  const seq = context.getSequence();
  const res = await seq.controlledEvaluate(ids.map((t) => [t, { generateNext: { logits: true } }]));
  const out = res.map((r) => {
    const row = new Array(nVocab).fill(null);
    for (const [tok, v] of r.next.logits)
      row[tok] = v;
    return row;
  });
  emit({ mode, logits: out });
}

async function first() {
  const ids = args[0].split(',').map(Number);
  const model = await llama.loadModel({ modelPath });
  const nVocab = vocabSize(model);
  const context = await model.createContext({ contextSize: 512, threads: 1, sequences: 1,
                                              flashAttention: false });
  const seq = context.getSequence();
  const out = [];
  for (const id of ids) {
    await seq.clearHistory();
    const res = await seq.controlledEvaluate([[id, { generateNext: { logits: true } }]]);
    const row = new Array(nVocab).fill(null);
    for (const [tok, v] of res[0].next.logits)
      row[tok] = v;
    out.push(row);
  }
  emit({ mode, logits: out });
}

async function decode() {
  const [nSeq, prompt, gen, threads] = args.map(Number);
  const rss0 = rssBytes();
  const model = await llama.loadModel({ modelPath });
  const vocab = vocabSize(model);
  const context = await model.createContext({ contextSize: (prompt + gen + 16) * nSeq, sequences: nSeq,
                                              batchSize: Math.max(512, nSeq), threads });
  const rssModel = rssBytes();
  // the time inside llama.cpp's decode calls (node-llama-cpp's addon
  // context is the one object that calls llama_decode)
  const addon = context._ctx;
  const decodeBatch = addon.decodeBatch.bind(addon);
  let inDecode = 0n, timing = false, calls = 0;
  Object.defineProperty(addon, 'decodeBatch', { value: async () => {
    const t0 = process.hrtime.bigint();
    await decodeBatch();
    if (timing) {
      inDecode += process.hrtime.bigint() - t0;
      calls++;
    }
  } });
  const seqs = [];
  for (let s = 0; s < nSeq; s++)
    seqs.push(context.getSequence());
  let firsts = 0, t0 = 0n, after = 0, cpu0 = null;
  let resolveAll;
  const allFirst = new Promise((r) => { resolveAll = r; });
  const run = async (s) => {
    const ids = [];
    for (let i = 0; i < prompt; i++)
      ids.push(3 + ((i * 31 + s * 17) % (vocab - 3)));
    let n = 0;
    for await (const t of seqs[s].evaluate(ids, { temperature: 0, yieldEogToken: true })) {
      void t;
      n++;
      if (n === 1 && ++firsts === nSeq) {
        t0 = process.hrtime.bigint();
        cpu0 = process.cpuUsage();
        timing = true;
        resolveAll();
      } else if (n > 1) {
        after++;
      }
      if (n >= gen + 1)
        break;
    }
  };
  await Promise.all([...seqs.keys()].map(run).concat([allFirst]));
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  // CPU time of every thread of the process (llama.cpp's and node's)
  const cpu = process.cpuUsage(cpu0), cpuSecs = (cpu.user + cpu.system) / 1e6;
  emit({ mode, seqs: nSeq, prompt, gen, threads, tokens: after, seconds: secs,
                               tok_s: after / secs, decode_seconds: Number(inDecode) / 1e9,
                               decode_tok_s: after / (Number(inDecode) / 1e9), decode_calls: calls,
                               cpu_seconds: cpuSecs, cpu_ms_per_token: cpuSecs / after * 1e3,
                               rss_before_model_bytes: rss0, rss_model_bytes: rssModel,
                               rss_bytes: rssBytes() });
}

if (mode === 'greedy')
  await greedy();
else if (mode === 'first')
  await first();
else if (mode === 'logits')
  await logits();
else if (mode === 'decode')
  await decode();
else {
  console.error('usage: node llama_run.mjs greedy MODEL IDS N | decode MODEL SEQS PROMPT GEN THREADS');
  process.exit(2);
}
process.exit(0);
