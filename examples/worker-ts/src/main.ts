// jetloop-worker-ts: a jetloop tool worker serving word_count, and with
// --audit the workflow hook audit.
//
//   node dist/main.js [--nats URL] [--name NAME] [--concurrency N] [--ack-wait 30s]
//                     [--max-deliver 5] [--delay 0s] [--user U --password P | --creds FILE]
//                     [--audit FILE]
//
// It stops gracefully on SIGTERM or SIGINT: no new calls start, running
// calls finish and are acknowledged, its tools are withdrawn; then it exits 0.

import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { connect, credsAuthenticator, type NodeConnectionOptions } from "@nats-io/transport-node";
import { Audit, type Hook } from "./hook.js";
import { Logger, isLevel } from "./log.js";
import { WordCount } from "./word_count.js";
import { Worker, defaults } from "./worker.js";

const DEFAULT_URL = "nats://127.0.0.1:4222";

const usage = `usage: jetloop-worker-ts [flags]

Serves the word_count tool to jetloop orchestrators over NATS JetStream.

  --nats URL          NATS server URL (default $NATS_URL, else ${DEFAULT_URL})
  --name NAME         worker name in results (default host-pid)
  --concurrency N     calls run at once (default ${defaults.concurrency})
  --ack-wait D        how long a job stays with this worker between heartbeats (default 30s)
  --max-deliver N     deliveries of a job before it is answered with an error (default ${defaults.maxDeliver})
  --delay D           make every call take at least D, to watch heartbeats and draining (default 0s)
  --user U, --password P, --creds FILE   NATS authentication
  --js-prefix P       JetStream API prefix (default $NATS_JS_PREFIX, else JETLOOP.API
                      where the account imports it, else $JS.API)
  --log-level L       debug, info, warn or error (default info)
  --audit FILE        also serve the workflow hook audit (policy.hooks): append each
                      task's checkpoint to FILE, one JSON line each, and answer continue
`;

/** main returns the process's exit status: 0 after a graceful stop, 1 on a failure, 2 on a usage error. */
async function main(): Promise<number> {
  let worker: Worker;
  let log: Logger;
  // A worker outlives a server restart: it reconnects for as long as it runs.
  const conn: NodeConnectionOptions = { name: "jetloop-worker-ts", maxReconnectAttempts: -1 };
  try {
    const { values: flags } = parseArgs({
      options: {
        nats: { type: "string", default: process.env.NATS_URL || DEFAULT_URL },
        name: { type: "string", default: defaults.name },
        concurrency: { type: "string", default: String(defaults.concurrency) },
        "ack-wait": { type: "string", default: "30s" },
        "max-deliver": { type: "string", default: String(defaults.maxDeliver) },
        delay: { type: "string", default: "0s" },
        user: { type: "string" },
        password: { type: "string" },
        creds: { type: "string" },
        "js-prefix": { type: "string", default: process.env.NATS_JS_PREFIX ?? "" },
        "log-level": { type: "string", default: "info" },
        audit: { type: "string" },
        help: { type: "boolean", short: "h", default: false },
      },
      strict: true,
      allowPositionals: false,
    });
    if (flags.help) {
      process.stdout.write(usage);
      return 0;
    }
    if (!isLevel(flags["log-level"])) {
      throw new Error(`--log-level: unknown level ${flags["log-level"]}`);
    }
    log = new Logger(flags["log-level"]);
    const hooks: Hook[] = [];
    if (flags.audit !== undefined) {
      if (flags.audit === "") {
        throw new Error("--audit: a file is needed");
      }
      hooks.push(new Audit(flags.audit));
    }
    worker = new Worker([new WordCount(duration(flags.delay, "--delay"))], log, {
      name: flags.name,
      concurrency: integer(flags.concurrency, "--concurrency"),
      ackWaitMs: duration(flags["ack-wait"], "--ack-wait"),
      maxDeliver: integer(flags["max-deliver"], "--max-deliver"),
      apiPrefix: flags["js-prefix"],
    }, hooks);
    conn.servers = flags.nats;
    if (flags.creds) {
      conn.authenticator = credsAuthenticator(readFileSync(flags.creds));
    } else if (flags.user) {
      conn.user = flags.user;
      conn.pass = flags.password;
    }
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n\n${usage}`);
    return 2;
  }

  // A signal that comes while connecting or setting up stops the worker
  // as soon as it can.
  const stop = () => worker.stop();
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);

  let nc;
  try {
    nc = await connect(conn);
  } catch (err) {
    log.error("cannot connect", { nats: String(conn.servers), err: (err as Error).message });
    return 1;
  }
  // Errors the client reports on its own (a denied publish looks like a
  // timeout otherwise).
  void (async () => {
    for await (const s of nc.status()) {
      if (s.type === "error" || s.type === "disconnect" || s.type === "reconnect") {
        log.warn("connection", { status: s.type, detail: JSON.stringify(s) });
      }
    }
  })();
  let code = 0;
  let stopped = false;
  void nc.closed().then((err) => {
    if (!stopped) {
      // Not our doing: stop serving and exit with an error.
      log.error("connection closed", { err: err?.message });
      code = 1;
      worker.stop();
    }
  });
  try {
    await worker.run(nc);
  } catch (err) {
    log.error("worker failed", { err: (err as Error).message });
    code = 1;
  }
  // Drain flushes the acknowledgements and results still on their way.
  stopped = true;
  await nc.drain().catch(() => {});
  return code;
}

// integer reads a flag's whole number.
function integer(s: string, flag: string): number {
  if (!/^[0-9]+$/.test(s)) {
    throw new Error(`${flag}: ${JSON.stringify(s)} is not a whole number`);
  }
  return Number(s);
}

const UNITS: Record<string, number> = { ns: 1e-6, us: 1e-3, "µs": 1e-3, ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };

// duration reads a Go duration ("1m30s", "250ms", "0") as milliseconds, the
// way the Go binaries' flags are written.
function duration(s: string, flag: string): number {
  if (s === "0") {
    return 0;
  }
  const part = /([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)/gy;
  let ms = 0;
  let at = 0;
  for (const m of s.matchAll(part)) {
    ms += Number(m[1]) * UNITS[m[2]!]!;
    at = m.index + m[0].length;
  }
  if (s === "" || at !== s.length) {
    throw new Error(`${flag}: ${JSON.stringify(s)} is not a duration like 30s or 1m30s`);
  }
  return ms;
}

process.exitCode = await main();
