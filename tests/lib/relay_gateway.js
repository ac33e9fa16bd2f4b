// relay_gateway.js - a Node gateway that relays a model server's answer as it
// streams, for the link tests of issue 32: one event loop serving every
// request at once, no id passed upstream (the client's x-request-id stays
// here), and the upstream's response relayed unchanged: its status, its
// content type, its x-request-id header and every body byte (SSE chunks with
// their "id") as they arrive.  Run: node relay_gateway.js PORT UPSTREAM_PORT
// (prints 'listening on PORT').  Upstream connections are kept alive (8 at
// most), as a production gateway keeps them.
'use strict';
const http = require('http');

const port = parseInt(process.argv[2], 10);
const upstream = parseInt(process.argv[3], 10);
const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });

http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    const up = http.request({
      host: '127.0.0.1', port: upstream, method: req.method, path: req.url, agent,
      headers: { 'content-type': req.headers['content-type'] || 'application/json',
                 'content-length': body.length },
    }, (ur) => {
      const h = { 'content-type': ur.headers['content-type'] || 'application/json' };
      if (ur.headers['x-request-id']) h['x-request-id'] = ur.headers['x-request-id'];
      if (ur.headers['content-length']) h['content-length'] = ur.headers['content-length'];
      res.writeHead(ur.statusCode, h);
      ur.on('data', (c) => res.write(c));
      ur.on('end', () => res.end());
    });
    up.on('error', (e) => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'upstream: ' + e.message } }));
    });
    up.end(body);
  });
}).listen(port, '127.0.0.1', () => console.log('listening on ' + port));
