// nats.js's recommended ordered consumer (js.consumers.get without a name) on the decision
// stream, as a subscriber: `node ordered.mjs` with NATS_URL, USHER_SYSTEM, USHER_PREFIX.
// Prints {"read": n, "subjects": [...], "status": [...]} once nothing more arrives.
import { connect } from "nats";

const { hostname, port, username, password } = new URL(process.env.NATS_URL);
const system = process.env.USHER_SYSTEM;
const prefix = process.env.USHER_PREFIX ?? "usher";
const nc = await connect({
  servers: `${hostname}:${port}`,
  user: decodeURIComponent(username) || undefined,
  pass: decodeURIComponent(password) || undefined,
  inboxPrefix: `_INBOX.${system}`,
});
const status = [];
(async () => {
  for await (const s of nc.status()) status.push(`${s.type} ${s.data}`);
})();
const stream = `${prefix.toUpperCase().replaceAll("-", "_")}_LOG`;
const consumer = await nc.jetstream().consumers.get(stream, { filterSubjects: `${prefix}.decision.>` });
const subjects = [];
const batch = await consumer.fetch({ max_messages: 100, expires: 2000 });
for await (const msg of batch) subjects.push(msg.subject);
await nc.close();
console.log(JSON.stringify({ read: subjects.length, subjects, status }));
