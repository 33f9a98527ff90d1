// The worker runtime: everything docs/protocol.md asks of a tool worker, for
// any set of tools. See README.md for the checklist this follows.

import { hostname } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import {
  AckPolicy,
  JetStreamApiError,
  jetstream,
  jetstreamManager,
  type Consumer,
  type ConsumerConfig,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { headers, TimeoutError, type Msg, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import { hookNames, parseHookJob, validHookName, type Decision, type Hook, type HookAnswer, type HookJob } from "./hook.js";
import type { Logger } from "./log.js";
import { Registry } from "./registry.js";
import { ensureStreams } from "./streams.js";
import type { Output, Tool } from "./tool.js";
import {
  ID,
  InvalidJob,
  consumerOf,
  isObject,
  lastToken,
  names,
  parseJob,
  subjects,
  type ToolJob,
  type ToolResult,
} from "./wire.js";

/** Options tune a worker; every field has the Go tool worker's default. */
export type Options = {
  /** Names the worker in results and the registry (default host-pid). */
  name: string;
  /** Calls of each tool run at once (default 4); a slot asks for a job only when it is free. */
  concurrency: number;
  /** How long a job stays with this worker between heartbeats (default 30 s). */
  ackWaitMs: number;
  /** Deliveries of a job before it is answered with an error (default 5). */
  maxDeliver: number;
  /** How long running calls may go on after stop() (default 10 s); then they are handed back. */
  drainGraceMs: number;
  /**
   * The JetStream API prefix of the worker's account: "JETLOOP.API" for a
   * worker deployment's account of the shipped nats.conf. "" (the
   * default) finds it: the prefix when the account imports it, else $JS.API.
   */
  apiPrefix?: string;
};

/** defaults are docs/protocol.md's values. */
export const defaults: Options = {
  name: defaultName(),
  concurrency: 4,
  ackWaitMs: 30_000,
  maxDeliver: 5,
  drainGraceMs: 10_000,
};

// How long a pull waits for a job before it asks again, and the time limit
// of every other request to the server.
const PULL_EXPIRES_MS = 5_000;
const IO_TIMEOUT_MS = 5_000;
/** How long a result handed to its turn's owner waits for the answer, and how long hand-overs pause after one went unanswered. */
const DIRECT_WAIT_MS = 2_000;
const DIRECT_PAUSE_MS = 10_000;
const MAX_TIMER_MS = 2 ** 31 - 1;
// Outputs are cut here, with a note saying how much was dropped.
const MAX_OUTPUT_BYTES = 256 * 1024;

/** Why a running call was stopped before it answered. */
type Stop = "deadline" | "cancel" | "shutdown";

/** Worker serves tools, and workflow hooks, from the jobs stream until stop(). */
export class Worker {
  private readonly opts: Options;
  private readonly tools = new Map<string, Tool>();
  private readonly hooks = new Map<string, Hook>();
  private readonly stopping = new AbortController();
  private readonly cancels = new Map<string, Set<() => void>>();
  private nc!: NatsConnection;
  private js!: JetStreamClient;
  private jsm!: JetStreamManager;

  constructor(
    tools: Tool[],
    private readonly log: Logger,
    opts: Partial<Options> = {},
    hooks: Hook[] = [],
  ) {
    this.opts = { ...defaults, ...opts };
    const o = this.opts;
    if (!ID.test(o.name)) {
      throw new Error(`worker: name ${JSON.stringify(o.name)} must match ${ID.source}`);
    }
    if (!Number.isInteger(o.concurrency) || o.concurrency < 1) {
      throw new Error(`worker: concurrency must be an integer ≥ 1, got ${o.concurrency}`);
    }
    if (!(o.ackWaitMs >= 100)) {
      throw new Error(`worker: ack wait must be ≥ 100ms, got ${o.ackWaitMs}ms`);
    }
    if (!Number.isInteger(o.maxDeliver) || o.maxDeliver < 1) {
      throw new Error(`worker: max deliver must be an integer ≥ 1, got ${o.maxDeliver}`);
    }
    for (const t of tools) {
      if (!ID.test(t.name)) {
        throw new Error(`worker: tool name ${JSON.stringify(t.name)} must match ${ID.source}`);
      }
      if (this.tools.has(t.name)) {
        throw new Error(`worker: tool ${t.name} given twice`);
      }
      this.tools.set(t.name, t);
    }
    if (this.tools.size === 0) {
      throw new Error("worker: a worker needs at least one tool");
    }
    for (const h of hooks) {
      if (!validHookName(h.name)) {
        throw new Error(`worker: hook name ${JSON.stringify(h.name)} must match ${ID.source} and be neither rules nor approval`);
      }
      if (this.hooks.has(h.name)) {
        throw new Error(`worker: hook ${h.name} given twice`);
      }
      this.hooks.set(h.name, h);
    }
  }

  /** name is the worker's name in results and the registry. */
  get name(): string {
    return this.opts.name;
  }

  /**
   * stop makes run() stop taking jobs, let running calls finish within the
   * drain grace, withdraw the worker's tools and return.
   */
  stop(): void {
    this.stopping.abort();
  }

  /** run serves the tools on nc until stop(). */
  async run(nc: NatsConnection): Promise<void> {
    this.nc = nc;
    const apiPrefix = this.opts.apiPrefix || (await detectAPIPrefix(this.nc));
    // A worker deployment in an account of its own reaches only its tools'
    // consumers and keys (deploy/accounts.conf): the streams are admin's,
    // and exhausted jobs, read and deleted by sequence, are left to the
    // turn's deadline.
    const confined = apiPrefix !== "$JS.API";
    this.jsm = await jetstreamManager(this.nc, { timeout: IO_TIMEOUT_MS, apiPrefix });
    this.js = jetstream(this.nc, { timeout: IO_TIMEOUT_MS, apiPrefix });
    if (!confined) {
      await ensureStreams(this.jsm);
    }
    const kvm = new Kvm(this.js);
    const registry = new Registry(
      // Both buckets allow direct gets (as the Go processes create them);
      // binding does not read that from the server.
      await kvm.open(names.tools, { allow_direct: true }),
      await kvm.open(names.workers, { allow_direct: true }),
      this.name,
      [
        ...[...this.tools.values()].map((t) => ({
          name: t.name,
          description: t.description,
          parameters: t.parameters,
          timeout_ms: t.timeoutMs,
        })),
        // A hook is advertised under hook.<name>, which no orchestrator
        // offers a model as a tool.
        ...[...this.hooks.keys()].map((name) => ({
          name,
          key: hookNames.key(name),
          description: "a workflow hook (policy.hooks)",
          parameters: { type: "object" },
          timeout_ms: 0,
        })),
      ],
      this.jsm,
    );
    // A confined worker may not create consumers (docs/accounts.md): an
    // orchestrator makes a tool's or hook's consumer once it sees it
    // advertised, so it advertises first and then binds them.
    if (confined) {
      await registry.advertise();
    }
    const consumers = new Map<string, Consumer>();
    for (const name of this.tools.keys()) {
      const c = await this.consumer(consumerOf(name), subjects.job(name), confined);
      if (c) {
        consumers.set(name, c);
      }
    }
    const hookConsumers = new Map<string, Consumer>();
    for (const name of this.hooks.keys()) {
      const c = await this.consumer(hookNames.consumer(name), hookNames.job(name), confined);
      if (c) {
        hookConsumers.set(name, c);
      }
    }
    const subs: Subscription[] = [
      this.nc.subscribe(subjects.cancel("*"), {
        callback: (err, m) => {
          // Only the orchestrators' broadcast cancels: a plain publish
          // with no reply, header or body. A reader's push consumer can be
          // aimed at this subject (the server does not check a deliver
          // subject), and its deliveries always carry a reply ($JS.ACK…,
          // $JS.FC…) or, for heartbeats, a Status header.
          if (!err && !m.reply && !m.headers && m.data.length === 0) {
            this.cancel(lastToken(m.subject));
          }
        },
      }),
    ];
    for (const name of confined ? [] : this.tools.keys()) {
      subs.push(
        this.nc.subscribe(subjects.maxDeliveries(consumerOf(name)), {
          callback: (err, m) => {
            if (!err) {
              void this.gaveUp(name, m);
            }
          },
        }),
      );
    }
    if (this.stopping.signal.aborted) {
      subs.forEach((s) => s.unsubscribe());
      return; // stopped while setting up: nothing was taken
    }
    await registry.advertise();
    registry.keepAlive(this.log);
    this.log.info("serving", {
      worker: this.name,
      tools: [...this.tools.keys()].join(","),
      hooks: [...this.hooks.keys()].join(","),
      concurrency: this.opts.concurrency,
    });

    const slots: Promise<void>[] = [];
    for (const [name, c] of consumers) {
      for (let i = 0; i < this.opts.concurrency; i++) {
        slots.push(this.slot(name, c, (m) => this.handle(name, m)));
      }
    }
    for (const [name, c] of hookConsumers) {
      for (let i = 0; i < this.opts.concurrency; i++) {
        slots.push(this.slot(`hook ${name}`, c, (m) => this.handleHook(name, m)));
      }
    }
    await Promise.all(slots);
    subs.forEach((s) => s.unsubscribe());
    try {
      await registry.withdraw();
    } catch (err) {
      this.log.warn("could not withdraw tools; they expire on their own", { err: (err as Error).message });
    }
    this.log.info("stopped", { worker: this.name });
  }

  // consumer creates the durable consumer of a tool (or hook), shared by
  // all its workers, or updates it to this worker's settings, as nats.go's
  // CreateOrUpdateConsumer does. A confined worker binds it once an
  // orchestrator has made it, waiting until then (or until stopped).
  private async consumer(durable: string, filter: string, confined: boolean): Promise<Consumer | null> {
    if (confined) {
      let waitMs = 50;
      let logged = false;
      while (!this.stopping.signal.aborted) {
        try {
          await this.jsm.consumers.info(names.jobs, durable);
          return this.js.consumers.get(names.jobs, durable);
        } catch (err) {
          if (!(err instanceof JetStreamApiError && err.code === CONSUMER_NOT_FOUND)) {
            throw new Error(`worker: consumer ${durable}: ${(err as Error).message}`, { cause: err });
          }
          if (!logged) {
            this.log.info("waiting for an orchestrator to make the consumer", { consumer: durable });
            logged = true;
          }
        }
        await sleep(waitMs, undefined, { signal: this.stopping.signal }).catch(() => {});
        waitMs = Math.min(2 * waitMs, 2_000);
      }
      return null; // stopped while waiting
    }
    const cfg: Partial<ConsumerConfig> = {
      durable_name: durable,
      filter_subject: filter,
      ack_policy: AckPolicy.Explicit,
      ack_wait: this.opts.ackWaitMs * 1_000_000,
      max_deliver: this.opts.maxDeliver,
      max_ack_pending: 10_000,
    };
    try {
      await this.jsm.consumers.info(names.jobs, durable);
      await this.jsm.consumers.update(names.jobs, durable, cfg);
    } catch (err) {
      if (!(err instanceof JetStreamApiError && err.code === CONSUMER_NOT_FOUND)) {
        throw new Error(`worker: consumer ${durable}: ${(err as Error).message}`, { cause: err });
      }
      await this.jsm.consumers.add(names.jobs, cfg);
    }
    return this.js.consumers.get(names.jobs, durable);
  }

  // slot is one of a tool's (or hook's) slots: it asks for a job only when
  // it can run it at once, so no job waits in a client buffer while its ack
  // timer runs.
  private async slot(tool: string, c: Consumer, handle: (msg: JsMsg) => Promise<void>): Promise<void> {
    const log = this.log.with({ tool });
    while (!this.stopping.signal.aborted) {
      let msg: JsMsg | null;
      try {
        msg = await c.next({ expires: PULL_EXPIRES_MS });
      } catch (err) {
        if (this.stopping.signal.aborted) {
          break;
        }
        log.warn("fetch failed", { err: (err as Error).message });
        await sleep(1_000, undefined, { signal: this.stopping.signal }).catch(() => {});
        continue;
      }
      // A job that arrives while stopping was asked for before: it is
      // in flight, and runs like any other.
      if (msg) {
        try {
          await handle(msg);
        } catch (err) {
          // A bug must not stop the slot: the job goes back for another try.
          log.error("job failed", { err: (err as Error).stack });
          msg.nak(1_000);
        }
      }
    }
  }

  /**
   * handle runs one job and answers it. Every path ends in exactly one of: a
   * result published, then the job acknowledged; a dead letter, then the job
   * terminated; or a nak that hands the job to its next delivery.
   */
  private async handle(tool: string, msg: JsMsg): Promise<void> {
    const attempt = msg.info.deliveryCount;
    let job: ToolJob;
    try {
      job = parseJob(msg.data);
      if (job.tool !== tool) {
        throw new InvalidJob(`job for tool ${JSON.stringify(job.tool)} on the subject of ${JSON.stringify(tool)}`);
      }
    } catch (err) {
      await this.reject(msg, (err as Error).message);
      return;
    }
    const log = this.log.with({ turn: job.turn_id, call: job.call_id, tool, attempt });
    const deadline = Date.parse(job.deadline);

    // One controller stops the call for whichever reason comes first.
    const ac = new AbortController();
    let why: Stop | undefined;
    const abort = (reason: Stop) => {
      if (!why) {
        why = reason;
        ac.abort(new Error(reason));
      }
    };
    const timers: NodeJS.Timeout[] = [];
    const left = deadline - Date.now();
    // Node fires a timer longer than 2^31-1 ms at once: a deadline that far
    // away is no deadline for this process.
    if (left <= MAX_TIMER_MS) {
      timers.push(setTimeout(() => abort("deadline"), Math.max(0, left)));
    }
    // On shutdown a call gets the drain grace to finish before it is cut short.
    const onStop = () => timers.push(setTimeout(() => abort("shutdown"), this.opts.drainGraceMs));
    if (this.stopping.signal.aborted) {
      onStop();
    } else {
      this.stopping.signal.addEventListener("abort", onStop, { once: true });
    }
    const forget = this.onCancel(job.turn_id, () => abort("cancel"));
    // The heartbeat keeps the job with this worker while the call runs.
    timers.push(setInterval(() => msg.working(), this.opts.ackWaitMs / 3));

    const began = performance.now();
    let out: Output;
    try {
      if (Date.now() >= deadline) {
        // The turn has given up on this call already: running it now
        // would only do work nobody sees.
        abort("deadline");
        out = { output: "", isError: true };
      } else {
        log.info("call started");
        out = await this.call(tool, job.arguments, ac.signal);
      }
      const durationMs = Math.round(performance.now() - began);
      switch (why) {
        case "cancel":
          // The turn has finished: nobody waits for this result.
          log.info("call aborted with its turn");
          msg.ack();
          return;
        case "shutdown":
          log.info("call cut short by shutdown; handed back");
          msg.nak();
          return;
        case "deadline":
          out = { output: `${tool}: the call's deadline passed after ${durationMs}ms`, isError: true };
          break;
      }
      const result: ToolResult = {
        turn_id: job.turn_id,
        call_id: job.call_id,
        tool,
        output: truncate(out.output),
        is_error: out.isError ?? false,
        final: out.final ?? false,
        duration_ms: durationMs,
        worker: this.name,
        attempt,
      };
      try {
        await this.publish(result);
      } catch (err) {
        log.warn("cannot publish a result; the job will be redelivered", { err: (err as Error).message });
        msg.nak(1_000);
        return;
      }
      // Only now: a worker that dies before this line leaves the job to
      // be redelivered, and the redelivery's result is deduplicated.
      try {
        await msg.ackAck({ timeout: IO_TIMEOUT_MS });
      } catch (err) {
        log.debug("ack failed; a redelivery's result is deduplicated", { err: (err as Error).message });
      }
      log.info("call answered", { is_error: result.is_error, duration_ms: durationMs });
    } finally {
      timers.forEach((t) => clearTimeout(t));
      this.stopping.signal.removeEventListener("abort", onStop);
      forget();
    }
  }

  /**
   * handleHook asks a hook about one job and answers it, as the Go SDK
   * does. Every path ends in one of: the answer published, then the job
   * acknowledged; a dead letter; a nak that asks again (the worker is
   * stopping); or an acknowledgement without an answer when the workflow
   * has stopped waiting (the deadline passed).
   */
  private async handleHook(hook: string, msg: JsMsg): Promise<void> {
    const attempt = msg.info.deliveryCount;
    let job: HookJob;
    try {
      job = parseHookJob(msg.data);
    } catch (err) {
      await this.reject(msg, (err as Error).message);
      return;
    }
    const log = this.log.with({ workflow: job.workflow_id, task: job.task, hook, attempt });
    const deadline = Date.parse(job.deadline);
    if (Date.now() >= deadline) {
      log.info("a hook job past its deadline: not asked");
      msg.ack();
      return;
    }
    const ac = new AbortController();
    let why: "deadline" | "shutdown" | undefined;
    const abort = (reason: "deadline" | "shutdown") => {
      if (!why) {
        why = reason;
        ac.abort(new Error(reason));
      }
    };
    const timers: NodeJS.Timeout[] = [];
    const left = deadline - Date.now();
    if (left <= MAX_TIMER_MS) {
      timers.push(setTimeout(() => abort("deadline"), Math.max(0, left)));
    }
    const onStop = () => timers.push(setTimeout(() => abort("shutdown"), this.opts.drainGraceMs));
    if (this.stopping.signal.aborted) {
      onStop();
    } else {
      this.stopping.signal.addEventListener("abort", onStop, { once: true });
    }
    timers.push(setInterval(() => msg.working(), this.opts.ackWaitMs / 3));
    try {
      let d: Pick<HookAnswer, "decision" | "reason">;
      const h = this.hooks.get(hook)!;
      // A hook that ignores its signal still stops being waited for.
      let onAbort = () => {};
      const stopped = new Promise<never>((_, reject) => {
        onAbort = () => reject(ac.signal.reason);
        ac.signal.addEventListener("abort", onAbort, { once: true });
      });
      try {
        const got: Decision = await Promise.race([h.check(job, ac.signal), stopped]);
        d = got;
        if (got.decision !== "continue" && got.decision !== "stop" && got.decision !== "wait") {
          d = { decision: "error", reason: `answered ${JSON.stringify(got.decision)}: a hook answers continue, stop or wait` };
        }
      } catch (err) {
        // The hook's failure, not a policy's stop: the orchestrator ends the
        // workflow error and names the hook.
        d = { decision: "error", reason: err instanceof Error ? err.message : String(err) };
      } finally {
        ac.signal.removeEventListener("abort", onAbort);
      }
      if (why === "shutdown") {
        log.info("hook cut short by shutdown; handed back");
        msg.nak();
        return;
      }
      if (why === "deadline" || Date.now() >= deadline) {
        log.warn("the hook answered after its deadline; the workflow has gone on without it");
        msg.ack();
        return;
      }
      const answer: HookAnswer = {
        workflow_id: job.workflow_id,
        task: job.task,
        hook,
        decision: d.decision,
        reason: capReason(String(d.reason ?? "")),
      };
      try {
        await this.js.publish(hookNames.answer(hook, job.workflow_id), JSON.stringify(answer), {
          msgID: hookNames.answerID(job.workflow_id, job.task, hook),
        });
      } catch (err) {
        log.warn("cannot publish a hook's answer; the job will be redelivered", { err: (err as Error).message });
        msg.nak(1_000);
        return;
      }
      try {
        await msg.ackAck({ timeout: IO_TIMEOUT_MS });
      } catch (err) {
        log.debug("ack failed; a redelivery's answer is deduplicated", { err: (err as Error).message });
      }
      log.info("hook answered", { decision: answer.decision });
    } finally {
      timers.forEach((t) => clearTimeout(t));
      this.stopping.signal.removeEventListener("abort", onStop);
    }
  }

  // call runs a tool, turning invalid arguments, exceptions and a stop into
  // results rather than a dead worker.
  private async call(tool: string, args: Record<string, unknown>, signal: AbortSignal): Promise<Output> {
    const t = this.tools.get(tool)!;
    const invalid = t.validate(args);
    if (invalid !== undefined) {
      return { output: `error: invalid arguments for ${tool}: ${invalid}`, isError: true };
    }
    // A tool that ignores its signal still stops being waited for.
    let onAbort = () => {};
    const stopped = new Promise<never>((_, reject) => {
      onAbort = () => reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
    });
    try {
      return await Promise.race([t.call(args, signal), stopped]);
    } catch (err) {
      return { output: `${tool}: ${(err as Error).message}`, isError: true };
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  /**
   * publish hands a result to the orchestrator that owns its turn (handOver)
   * and, failing that, stores it in the inbox, where a result the owner
   * applied already is a repeat that changes nothing.
   */
  private async publish(r: ToolResult): Promise<void> {
    const data = JSON.stringify(r);
    if (await this.handOver(r, data)) return;
    await this.js.publish(subjects.result(r.tool, r.turn_id), data, { msgID: `result:${r.turn_id}:${r.call_id}` });
  }

  /** Until when (ms since the epoch) results go to the inbox only, after a hand-over went unanswered. */
  private directOffUntil = 0;

  /**
   * handOver sends a result as a request on jetloop.direct.result@<tool>.<turn_id>
   * and reports whether the turn's owner answered that the result is in the
   * turn's log. An unanswered one (no owner, an owner failing over, a
   * deployment not granted the subject) pauses hand-overs for a while, so
   * it costs one wait, not one for every call.
   */
  private async handOver(r: ToolResult, data: string): Promise<boolean> {
    if (Date.now() < this.directOffUntil) return false;
    try {
      const reply = await this.nc.request(subjects.direct(r.tool, r.turn_id), data, { timeout: DIRECT_WAIT_MS });
      return !reply.headers?.get(names.headerError);
    } catch (err) {
      // Only silence pauses hand-overs: no responders, a result too big
      // for one message or a closing connection fall back to the inbox alone.
      if (err instanceof TimeoutError) this.directOffUntil = Date.now() + DIRECT_PAUSE_MS;
      return false;
    }
  }

  /**
   * reject keeps a job no worker can run in the dead-letter stream. When the
   * job names its call, the turn also gets an error result, so it does not
   * wait for its deadline.
   */
  private async reject(msg: JsMsg, reason: string): Promise<void> {
    this.log.warn("dead letter", { subject: msg.subject, reason });
    const ids = idsOf(msg.data);
    try {
      if (ids) {
        await this.publish({
          ...ids,
          tool: lastToken(msg.subject),
          output: `invalid job: ${reason}`,
          is_error: true,
          final: false,
          duration_ms: 0,
          worker: this.name,
          attempt: 1,
        });
      }
      const h = headers();
      h.set(names.headerError, reason);
      h.set(names.headerSubject, msg.subject);
      await this.js.publish(subjects.dead("job"), msg.data, {
        msgID: `dead:${names.jobs}:${msg.info.streamSequence}`,
        headers: h,
      });
    } catch (err) {
      this.log.warn("cannot dead-letter a job", { err: (err as Error).message });
      msg.nak(1_000);
      return;
    }
    msg.term(reason);
  }

  /**
   * gaveUp answers a job that exhausted its deliveries with an error result,
   * so the turn hears of it now rather than at its deadline, and deletes the
   * job, which a work queue otherwise keeps. Every worker of the tool sees the
   * advisory: the result's id makes their answers one.
   */
  private async gaveUp(tool: string, m: Msg): Promise<void> {
    let seq = 0;
    let deliveries = 0;
    try {
      const adv = m.json<{ stream_seq?: number; deliveries?: number }>();
      seq = adv.stream_seq ?? 0;
      deliveries = adv.deliveries ?? 0;
    } catch {
      return;
    }
    if (seq === 0) {
      return;
    }
    try {
      const stored = await this.jsm.streams.getMessage(names.jobs, { seq });
      const ids = stored ? idsOf(stored.data) : undefined;
      if (!ids) {
        return; // another worker handled it, or it is no job
      }
      this.log.warn("job delivered too often; answering with an error", { ...ids, tool, deliveries });
      await this.publish({
        ...ids,
        tool,
        output: `${tool}: no worker finished the call in ${deliveries} attempts (a worker crashed or timed out each time)`,
        is_error: true,
        final: false,
        duration_ms: 0,
        worker: this.name,
        attempt: Math.max(deliveries, 1),
      });
      await this.jsm.streams.deleteMessage(names.jobs, seq, false);
    } catch (err) {
      if (!(err instanceof JetStreamApiError && err.code === NO_MESSAGE_FOUND)) {
        this.log.warn("cannot answer an exhausted job", { err: (err as Error).message });
      }
    }
  }

  // onCancel runs fn when the turn is cancelled; the returned function forgets it.
  private onCancel(turn: string, fn: () => void): () => void {
    let set = this.cancels.get(turn);
    if (!set) {
      set = new Set();
      this.cancels.set(turn, set);
    }
    set.add(fn);
    return () => {
      set.delete(fn);
      if (set.size === 0) {
        this.cancels.delete(turn);
      }
    };
  }

  private cancel(turn: string): void {
    for (const fn of this.cancels.get(turn) ?? []) {
      fn();
    }
  }
}

// JetStream API error codes (nats-server's server/errors.json).
const CONSUMER_NOT_FOUND = 10014;
const NO_MESSAGE_FOUND = 10037;

// idsOf reads the turn and call of a job that may be otherwise invalid.
function idsOf(data: Uint8Array): { turn_id: string; call_id: string } | undefined {
  try {
    const v: unknown = JSON.parse(new TextDecoder().decode(data));
    if (isObject(v) && typeof v.turn_id === "string" && ID.test(v.turn_id) &&
      typeof v.call_id === "string" && ID.test(v.call_id)) {
      return { turn_id: v.turn_id, call_id: v.call_id };
    }
  } catch {
    // not JSON: no call to answer
  }
  return undefined;
}

function truncate(s: string): string {
  const b = Buffer.from(s, "utf8");
  if (b.length <= MAX_OUTPUT_BYTES) {
    return s;
  }
  // Cut on a character boundary: decoding drops a split last character.
  const kept = b.subarray(0, MAX_OUTPUT_BYTES).toString("utf8").replace(/\uFFFD$/u, "");
  return `${kept}\n[output truncated: ${b.length - Buffer.byteLength(kept)} of ${b.length} bytes dropped]`;
}

// capReason keeps a hook's reason within hook_answer's 4096 characters.
function capReason(s: string): string {
  return s.length <= 4096 ? s : `${s.slice(0, 4093)}...`;
}

function defaultName(): string {
  return `${hostname()}-${process.pid}`.replace(/[^A-Za-z0-9_-]/g, "-").slice(0, 64);
}

// detectAPIPrefix is the JetStream API prefix of nc's account: JETLOOP.API
// when the account imports the streams' API under it (an INFO request there
// is answered), else $JS.API.
async function detectAPIPrefix(nc: NatsConnection): Promise<string> {
  try {
    await nc.request("JETLOOP.API.INFO", undefined, { timeout: IO_TIMEOUT_MS });
    return "JETLOOP.API";
  } catch {
    return "$JS.API";
  }
}
