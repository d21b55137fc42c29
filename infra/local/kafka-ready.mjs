// Exits 0 when the broker at argv[2] answers a Metadata (v4) request listing at least one broker.
// Dependency-free on purpose: it runs before `pnpm install` may have happened.
import net from 'node:net';

const [host, port] = (process.argv[2] ?? '127.0.0.1:9092').split(':');
const clientId = Buffer.from('spillway-ready');
const body = Buffer.alloc(2 + 2 + 4 + 2 + clientId.length + 4 + 1);
let o = 0;
o = body.writeInt16BE(3, o); // api key: Metadata
o = body.writeInt16BE(4, o); // version 4 (still served by Kafka 4.x)
o = body.writeInt32BE(7, o); // correlation id
o = body.writeInt16BE(clientId.length, o);
o += clientId.copy(body, o);
o = body.writeInt32BE(-1, o); // all topics
body.writeInt8(0, o); // no auto-creation
const frame = Buffer.concat([Buffer.alloc(4), body]);
frame.writeInt32BE(body.length, 0);

const sock = net.connect(Number(port), host);
const timer = setTimeout(() => process.exit(1), 3000);
let buf = Buffer.alloc(0);
sock.on('connect', () => sock.write(frame));
sock.on('data', (d) => {
  buf = Buffer.concat([buf, d]);
  if (buf.length < 4 || buf.length < 4 + buf.readInt32BE(0)) return;
  const corr = buf.readInt32BE(4);
  const brokers = buf.readInt32BE(12); // after correlation id and throttle_time_ms
  clearTimeout(timer);
  sock.destroy();
  process.exit(corr === 7 && brokers >= 1 ? 0 : 1);
});
sock.on('error', () => process.exit(1));
