// Workflow hooks (docs/protocol.md, "Hooks"): programs a workflow consults after
// each task's checkpoint, as the Go SDK's worker.Hook. A hook that stores
// the checkpoint and answers continue is OpenBotStack's Checkpoint; one
// that may answer stop is its PolicyCheckpoint.

import { appendFile } from "node:fs/promises";
import { ID, InvalidJob, isObject } from "./wire.js";

// A workflow id leaves room for a task's suffix.
const WORKFLOW_ID = /^[A-Za-z0-9_-]{1,56}$/;
const TIME = /^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?Z$/;

/** HookJob asks a hook about a task just done, on jetloop.jobs.hook.<name> (schemas/hook_job.schema.json). */
export type HookJob = {
  workflow_id: string;
  session_id: string;
  task: number;
  turn_id: string;
  last: boolean;
  /** The task's checkpoint as KV JETLOOP_CHECKPOINTS holds it: { task, metrics } (the workflow's sums so far). */
  checkpoint: Record<string, unknown> & { metrics?: Record<string, unknown> };
  /** The task's result as task.finished has it; metrics are the task's own. */
  task_result: { stop_reason: string; output: string; error?: string; metrics: Record<string, number> };
  deadline: string;
  /** Set on a final job: the workflow ended at this checkpoint before this hook decided; the answer changes nothing. */
  ended?: { stop_reason: string; error?: string };
};

/** HookAnswer is a hook's decision, on jetloop.inbox.hook@<hook>.<workflow_id> (schemas/hook_answer.schema.json). */
export type HookAnswer = {
  workflow_id: string;
  task: number;
  hook: string;
  /** error: the hook failed; the workflow ends error with reason. */
  decision: Decision["decision"] | "error";
  reason: string;
};

/**
 * Decision is a hook's answer: go on, stop the workflow (it ends denied with
 * reason), or wait for a person. A hook does not answer error itself: the
 * worker answers error, with the message, when check throws.
 */
export type Decision = { decision: "continue" | "stop" | "wait"; reason: string };

/** Hook is one hook a worker serves. */
export interface Hook {
  /** Its name in policy.hooks: [A-Za-z0-9_-]{1,64}, neither rules nor approval. */
  readonly name: string;
  /** check decides about the job's task; signal aborts at the job's deadline or on shutdown. A throw ends the workflow error with its message. */
  check(job: HookJob, signal: AbortSignal): Promise<Decision>;
}

/** hook subjects, consumer, registry key and message ids (docs/protocol.md). */
export const hookNames = {
  job: (hook: string) => `jetloop.jobs.hook.${hook}`,
  /** A hook's answers, bound to the hook as a tool's results are. */
  answer: (hook: string, workflow: string) => `jetloop.inbox.hook@${hook}.${workflow}`,
  consumer: (hook: string) => `hook_${hook}`,
  /** Its key in KV JETLOOP_TOOLS: no tool has a dot in its name, so no model is offered a hook. */
  key: (hook: string) => `hook.${hook}`,
  answerID: (workflow: string, task: number, hook: string) => `hook-answer:${workflow}:${task}:${hook}`,
};

/** validHookName says whether name may name a hook. */
export function validHookName(name: string): boolean {
  return ID.test(name) && name !== "rules" && name !== "approval";
}

const JOB_FIELDS = new Set(["workflow_id", "session_id", "task", "turn_id", "last", "checkpoint", "task_result", "deadline", "ended"]);
const METRICS = ["steps", "tool_calls", "model_calls", "input_tokens", "output_tokens", "duration_ms"];

/** parseHookJob decodes a hook job, refusing one the schema refuses before any hook sees it. */
export function parseHookJob(data: Uint8Array): HookJob {
  let v: unknown;
  try {
    v = JSON.parse(new TextDecoder().decode(data));
  } catch (err) {
    throw new InvalidJob(`not JSON: ${(err as Error).message}`);
  }
  if (!isObject(v)) {
    throw new InvalidJob("a hook job must be a JSON object");
  }
  for (const k of Object.keys(v)) {
    if (!JOB_FIELDS.has(k)) {
      throw new InvalidJob(`unknown field ${JSON.stringify(k)}`);
    }
  }
  if (typeof v.workflow_id !== "string" || !WORKFLOW_ID.test(v.workflow_id)) {
    throw new InvalidJob(`workflow_id must match ${WORKFLOW_ID.source}`);
  }
  for (const k of ["session_id", "turn_id"]) {
    if (typeof v[k] !== "string" || !ID.test(v[k] as string)) {
      throw new InvalidJob(`${k} must match ${ID.source}`);
    }
  }
  if (!Number.isInteger(v.task) || (v.task as number) < 1 || (v.task as number) > 1000) {
    throw new InvalidJob("task must be an integer from 1 to 1000");
  }
  if (typeof v.last !== "boolean") {
    throw new InvalidJob("last must be a boolean");
  }
  if (!isObject(v.checkpoint)) {
    throw new InvalidJob("checkpoint must be a JSON object");
  }
  const r = v.task_result;
  if (!isObject(r) || typeof r.stop_reason !== "string" || typeof r.output !== "string" ||
    (r.error !== undefined && typeof r.error !== "string") || !isObject(r.metrics) ||
    !METRICS.every((k) => Number.isInteger((r.metrics as Record<string, unknown>)[k]))) {
    throw new InvalidJob(`task_result must be {stop_reason, output, error?, metrics {${METRICS.join(", ")}}}`);
  }
  const e = v.ended;
  if (e !== undefined && (!isObject(e) || typeof e.stop_reason !== "string" || (e.error !== undefined && typeof e.error !== "string"))) {
    throw new InvalidJob("ended must be {stop_reason, error?}");
  }
  if (typeof v.deadline !== "string" || !TIME.test(v.deadline) || Number.isNaN(Date.parse(v.deadline))) {
    throw new InvalidJob("deadline must be an RFC 3339 UTC time");
  }
  return v as HookJob;
}

/**
 * Audit is a Checkpoint: it appends each task's checkpoint to a file, one
 * JSON line each (as examples/go-hook's audit does), and lets the workflow
 * go on; the last checkpoint of a workflow that ended before it decided
 * too, with how it ended. A failed write throws, which ends the workflow
 * error. A job asked again (a hook process died mid-job) may store a line
 * twice; the line names the workflow and task, so a reader keeps the last.
 */
export class Audit implements Hook {
  readonly name = "audit";

  constructor(private readonly path: string) {}

  async check(job: HookJob): Promise<Decision> {
    const line = JSON.stringify({
      workflow_id: job.workflow_id,
      task: job.task,
      last: job.last,
      stop_reason: job.task_result.stop_reason,
      metrics: job.checkpoint.metrics ?? {},
      task_metrics: job.task_result.metrics,
      ...(job.ended ? { ended: job.ended } : {}),
    });
    await appendFile(this.path, `${line}\n`);
    return { decision: "continue", reason: `checkpoint stored in ${this.path}` };
  }
}
