// Read Usher's decisions from another system: a durable pull consumer, validated by Ajv.
//
// Needs `npm install nats@2 ajv@8 ajv-formats@3`. Environment: NATS_URL (the subscriber
// identity's URL, e.g. `$(cat ~/.usher/subscribers/billing.url)`), USHER_SYSTEM (your
// system's name: the subscriber `subscriber-<system>`), USHER_PREFIX (`usher`), USHER_SCHEMAS
// (a copy of Usher's schemas/json). `--until-caught-up` stops once every decision so far is
// read; without it, it follows the stream live. Run it again: the durable consumer resumes
// after the last decision it acknowledged.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { AckPolicy, DeliverPolicy, connect } from "nats";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const url = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const system = process.env.USHER_SYSTEM ?? "example";
const prefix = process.env.USHER_PREFIX ?? "usher";
const schemas = process.env.USHER_SCHEMAS ?? "schemas/json";
const follow = !process.argv.includes("--until-caught-up");
const stream = `${prefix.toUpperCase().replaceAll("-", "_")}_LOG`;

// Draft 2020-12 needs Ajv's 2020 class; strict mode; any warning counts as a failure.
const warnings = [];
const note = (...args) => warnings.push(args.join(" "));
const ajv = new Ajv2020({ strict: true, allErrors: true, logger: { log() {}, warn: note, error: note } });
addFormats(ajv);
const validate = ajv.compile(JSON.parse(readFileSync(join(schemas, "Envelope.json"), "utf8")));

// nats.js takes the user and password apart from the URL. The subscriber identity may only
// use inboxes under _INBOX.<system>.
const { hostname, port, username, password } = new URL(url);
const nc = await connect({
  servers: `${hostname}:${port || 4222}`,
  user: decodeURIComponent(username) || undefined,
  pass: decodeURIComponent(password) || undefined,
  inboxPrefix: `_INBOX.${system}`,
});
const jsm = await nc.jetstreamManager();
await jsm.consumers.add(stream, {
  name: system,
  durable_name: system,
  filter_subject: `${prefix}.decision.>`,
  ack_policy: AckPolicy.Explicit,
  deliver_policy: DeliverPolicy.All, // from the start, the first time only
});
const consumer = await nc.jetstream().consumers.get(stream, system);
let read = 0;
const invalid = [];
const types = new Set();
for (;;) {
  const info = await consumer.info();
  if (!follow && info.num_pending === 0 && info.num_ack_pending === 0) break;
  const batch = await consumer.fetch({ max_messages: 100, expires: 1000 });
  for await (const msg of batch) {
    const envelope = msg.json();
    const errors = validate(envelope) ? [] : validate.errors.map((e) => `${e.instancePath} ${e.message}`);
    if (msg.headers?.get("ce-type") !== `io.usher.${envelope.event?.type}`) errors.push("ce-type");
    if (errors.length) invalid.push({ subject: msg.subject, errors });
    console.error(envelope.event?.type, envelope.event?.workload);
    types.add(envelope.event?.type);
    read += 1;
    msg.ack();
  }
}
await nc.drain();
console.log(JSON.stringify({ read, types: [...types].sort(), invalid, warnings }));
