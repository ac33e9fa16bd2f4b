// sse_server.js - the Node twin of sse_server.py for the HTTP path's tests:
// http.createServer, a chat completion streamed chunked with res.write per
// event (a text completion, choices[].text, on /v1/completions; x-test-mode:
// packed = three events a write, split = each event in two writes, close =
// no chunking, the body delimited by the close: Node ends the socket with
// shutdown(SHUT_WR) and closes it later; x-test-last-chunk-ms: a pause
// before res.end(), which writes the zero-length chunk on its own),
// /status/NNN answers NNN, GET /static this file. A request without x-request-id gets one of the
// server's (srv-N) in the response. Run: node sse_server.js PORT
// [--role-with-content] (a chat stream's role rides on its first content
// event, as llama.cpp's server sends it) [--tls CERT KEY] (https.createServer:
// Node's own OpenSSL, inside its executable).
'use strict';
const fs = require('fs');
const http = require('http');

const port = parseInt(process.argv[2], 10);
const roleWithContent = process.argv.includes('--role-with-content');
let nextId = 1;
const requestId = (req) => req.headers['x-request-id'] || (req.headers['x-request-id'] = 'srv-' + nextId++);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const sse = (o) => 'data: ' + (typeof o === 'string' ? o : JSON.stringify(o)) + '\n\n';

function plain(req, res, status, body) {
  const data = JSON.stringify(body);
  const h = { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) };
  h['x-request-id'] = requestId(req);
  res.writeHead(status, h);
  res.end(data);
}

async function stream(req, res, body) {
  const n = body.max_tokens || 8;
  const mode = req.headers['x-test-mode'] || 'event';
  const gap = parseFloat(req.headers['x-test-gap-ms'] || '2');
  const text = req.url.split('?')[0] === '/v1/completions';
  const id = text ? 'cmpl-test' : 'chatcmpl-test';
  const object = text ? 'text_completion' : 'chat.completion.chunk';
  const role = { role: 'assistant' };
  const ev = text || roleWithContent ? []
    : [sse({ id, object, choices: [{ index: 0, delta: { ...role, content: '' } }] })];
  for (let i = 0; i < n; i++) {
    const choice = text ? { index: 0, text: ' tok' + i, finish_reason: null }
      : { index: 0, delta: { ...(roleWithContent && i === 0 ? role : {}), content: ' tok' + i },
          finish_reason: null };
    ev.push(sse({ id, object, choices: [choice] }));
  }
  ev.push(sse({ id, object, choices: [text ? { index: 0, text: '', finish_reason: 'length' }
    : { index: 0, delta: {}, finish_reason: 'length' }] }));
  ev.push(sse({ id, object, choices: [],
                usage: { prompt_tokens: 5, completion_tokens: n, total_tokens: 5 + n } }));
  ev.push(sse('[DONE]'));
  const h = { 'Content-Type': 'text/event-stream', 'x-request-id': requestId(req) };
  if (mode === 'close') {
    res.useChunkedEncodingByDefault = false;
    h.Connection = 'close';
  }
  res.writeHead(200, h);
  res.flushHeaders();
  let gone = false;
  res.on('close', () => { gone = !res.writableFinished; });
  if (mode === 'packed') {
    for (let i = 0; i < ev.length && !gone; i += 3) { await sleep(gap); res.write(ev.slice(i, i + 3).join('')); }
  } else if (mode === 'split') {
    for (const e of ev) {
      if (gone) break;
      await sleep(gap);
      res.write(e.slice(0, e.length >> 1));
      await sleep(0.5);
      res.write(e.slice(e.length >> 1));
    }
  } else {
    for (const e of ev) { if (gone) break; await sleep(gap); res.write(e); }
  }
  const last = parseFloat(req.headers['x-test-last-chunk-ms'] || '0');
  if (last) await sleep(last);
  res.end();
}

const tlsAt = process.argv.indexOf('--tls');
const serve = (handler) => (tlsAt < 0 ? http.createServer(handler)
  : require('https').createServer({ cert: fs.readFileSync(process.argv[tlsAt + 1]),
                                    key: fs.readFileSync(process.argv[tlsAt + 2]) }, handler));

serve((req, res) => {
  let data = '';
  req.on('data', (c) => { data += c; });
  req.on('end', () => {
    let body = {};
    try { body = JSON.parse(data || '{}'); } catch (e) { /* an empty body */ }
    const m = req.url.match(/^\/status\/(\d+)/);
    if (m) plain(req, res, parseInt(m[1], 10), { error: { message: 'test error' } });
    else if (req.method === 'POST') stream(req, res, body);
    else if (req.url === '/static') {   // this file (sse_server.py's is sent with sendfile)
      const data = fs.readFileSync(__filename);
      res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': data.length,
                           'x-request-id': requestId(req) });
      res.end(data);
    }
    else plain(req, res, 200, { status: 'ok' });
  });
}).listen(port, '127.0.0.1', () => console.log('listening on ' + port));
