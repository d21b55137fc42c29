// The node floor of issue 20's TLS comparison: node:https (or node:http) reads the body and answers
// 202 — what Spillway's TLS hand-off path (uring → node:tls front door) costs before the pipeline.
// Usage: node node-server.mjs https|http [CERT KEY]; prints "listening PORT".
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';

const [kind, cert, key] = process.argv.slice(2);
const body = '{"id":"node"}';
const handler = (req, res) => {
  req.on('data', () => {});
  req.on('end', () => {
    res.writeHead(202, { 'content-type': 'application/json', 'content-length': body.length });
    res.end(body);
  });
};
const server =
  kind === 'https'
    ? https.createServer({ cert: readFileSync(cert), key: readFileSync(key), minVersion: 'TLSv1.3' }, handler)
    : http.createServer(handler);
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`));
process.on('SIGTERM', () => process.exit(0));
