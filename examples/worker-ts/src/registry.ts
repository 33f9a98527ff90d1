// The registry side of a worker: each tool is advertised in KV JETLOOP_TOOLS
// with the number of live workers serving it, counted from one presence key
// "<tool>.<worker>" per worker in KV JETLOOP_WORKERS. Both buckets expire a
// key 15 s after its last write, so a worker that dies disappears on its own;
// a worker that stops withdraws itself at once.

import type { JetStreamManager } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import type { Logger } from "./log.js";
import { TOOLS_TTL_MS } from "./streams.js";
import type { ToolInfo } from "./wire.js";

/**
 * Spec is what the registry advertises of a tool, or of a hook: a hook's
 * key is hook.<name> (its presence keys hook.<name>.<worker>), its entry
 * names the hook.
 */
export type Spec = Omit<ToolInfo, "workers"> & { key?: string };

/** Registry keeps one worker's tools advertised. */
export class Registry {
  private timer: NodeJS.Timeout | undefined;
  // The refresh in progress, which withdraw waits for so that it cannot
  // write this worker's key back after withdraw deleted it.
  private beat: Promise<void> = Promise.resolve();

  constructor(
    private readonly tools: KV,
    private readonly workers: KV,
    private readonly worker: string,
    private readonly specs: Spec[],
    private readonly jsm: JetStreamManager,
  ) {}

  /** advertise refreshes this worker's presence, then each tool's entry with its worker count. */
  async advertise(): Promise<void> {
    for (const s of this.specs) {
      await this.workers.put(`${keyOf(s)}.${this.worker}`, new Date().toISOString());
      await this.put(s);
    }
  }

  /** keepAlive refreshes the entries three times per TTL until stop(). */
  keepAlive(log: Logger): void {
    this.timer = setInterval(() => {
      this.beat = this.beat
        .then(() => this.advertise())
        .catch((err: Error) => log.warn("cannot refresh tools in the registry", { err: err.message }));
    }, TOOLS_TTL_MS / 3);
  }

  /** stop ends the heartbeat. */
  stop(): void {
    clearInterval(this.timer);
  }

  /** withdraw removes this worker, and each tool whose last worker it was. */
  async withdraw(): Promise<void> {
    this.stop();
    await this.beat;
    const errs: Error[] = [];
    for (const s of this.specs) {
      try {
        await this.workers.delete(`${keyOf(s)}.${this.worker}`);
        await this.put(s);
      } catch (err) {
        errs.push(err as Error);
      }
    }
    if (errs.length > 0) {
      throw new Error(`registry: withdraw: ${errs.map((e) => e.message).join("; ")}`);
    }
  }

  private async put(s: Spec): Promise<void> {
    const key = keyOf(s);
    const n = await this.count(key);
    if (n === 0) {
      await this.tools.delete(key);
      return;
    }
    const { key: _, ...spec } = s;
    const info: ToolInfo = { ...spec, workers: n };
    await this.tools.put(key, JSON.stringify(info));
  }

  // count reads the live workers of a tool from their presence keys. It
  // lists them by the bucket's subjects (stream info with a subject
  // filter), not with a watch: a watch is a push consumer, whose deliver
  // subject a worker deployment's account may not name
  // (deploy/accounts.conf); a deleted or expired key, whose subject may
  // stay, has no value.
  private async count(tool: string): Promise<number> {
    const prefix = "$KV.JETLOOP_WORKERS.";
    const info = await this.jsm.streams.info("KV_JETLOOP_WORKERS", { subjects_filter: `${prefix}${tool}.*` });
    let n = 0;
    for (const subject of Object.keys(info.state.subjects ?? {})) {
      const key = subject.slice(prefix.length);
      if (!key.startsWith(`${tool}.`)) {
        continue;
      }
      const e = await this.workers.get(key);
      if (e !== null && e.operation === "PUT") {
        n++;
      }
    }
    return n;
  }
}

// keyOf is a spec's key in both buckets.
function keyOf(s: Spec): string {
  return s.key ?? s.name;
}
