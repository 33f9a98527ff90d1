// The messages a jetloop tool worker reads and writes, as the JSON Schemas in
// the repository's schemas/ directory define them (tool_job, tool_result,
// tool_info), and the subjects they travel on.

/** Ids, and the names of served tools, appear in subjects: this is their form. */
export const ID = /^[A-Za-z0-9_-]{1,64}$/;

// An RFC 3339 UTC time with up to 9 fractional digits (Go's time.RFC3339Nano).
const TIME = /^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?Z$/;

/** ToolJob is one tool call, published by an orchestrator on jetloop.jobs.tool.<tool>. */
export type ToolJob = {
  turn_id: string;
  session_id: string;
  step: number;
  call_id: string;
  tool: string;
  arguments: Record<string, unknown>;
  /** When the orchestrator stops waiting; a call must not start after it. */
  deadline: string;
};

/** ToolResult is a worker's answer, on jetloop.inbox.result@<tool>.<turn_id>. */
export type ToolResult = {
  turn_id: string;
  call_id: string;
  tool: string;
  output: string;
  is_error: boolean;
  final: boolean;
  duration_ms: number;
  worker: string;
  /** The delivery of the job this answers, from 1. */
  attempt: number;
};

/** ToolInfo is a tool's advertisement in KV JETLOOP_TOOLS, key = name. */
export type ToolInfo = {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
  timeout_ms: number;
  workers: number;
};

/** Stream, bucket and header names (docs/protocol.md). */
export const names = {
  inbox: "JETLOOP_INBOX",
  jobs: "JETLOOP_JOBS",
  dead: "JETLOOP_DEAD",
  tools: "JETLOOP_TOOLS",
  /** One key "<tool>.<worker>" per live worker: how JETLOOP_TOOLS counts workers. */
  workers: "JETLOOP_WORKERS",
  headerError: "Jetloop-Error",
  headerSubject: "Jetloop-Subject",
} as const;

/** Subjects (docs/protocol.md, "Subjects"). */
export const subjects = {
  job: (tool: string) => `jetloop.jobs.tool.${tool}`,
  /** A tool's answers: the tool is in the subject, so a deployment's account is granted its own tools' only. */
  result: (tool: string, turn: string) => `jetloop.inbox.result@${tool}.${turn}`,
  /** A tool's answers handed to the turn's owner as a request, stored by no stream: an empty reply says the result is in the turn's log. */
  direct: (tool: string, turn: string) => `jetloop.direct.result@${tool}.${turn}`,
  cancel: (turn: string) => `jetloop.cancel.${turn}`,
  dead: (kind: string) => `jetloop.dead.${kind}`,
  /** JetStream's word that a job hit its consumer's max deliveries (it stays in the stream). */
  maxDeliveries: (consumer: string) =>
    `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.${names.jobs}.${consumer}`,
};

/** The durable consumer that every worker of a tool shares. */
export const consumerOf = (tool: string) => `tool_${tool}`;

/** The last token of a subject: the turn of jetloop.cancel.<turn>, the tool of a job subject. */
export const lastToken = (subject: string) => subject.slice(subject.lastIndexOf(".") + 1);

/** InvalidJob is a job no worker can run: it becomes a dead letter. */
export class InvalidJob extends Error {}

const JOB_FIELDS = new Set(["turn_id", "session_id", "step", "call_id", "tool", "arguments", "deadline"]);

/**
 * parseJob decodes a job and checks it against schemas/tool_job.schema.json,
 * so that a malformed job is refused before any tool runs.
 */
export function parseJob(data: Uint8Array): ToolJob {
  let v: unknown;
  try {
    v = JSON.parse(new TextDecoder().decode(data));
  } catch (err) {
    throw new InvalidJob(`not JSON: ${(err as Error).message}`);
  }
  if (!isObject(v)) {
    throw new InvalidJob("a job must be a JSON object");
  }
  for (const k of Object.keys(v)) {
    if (!JOB_FIELDS.has(k)) {
      throw new InvalidJob(`unknown field ${JSON.stringify(k)}`);
    }
  }
  for (const k of ["turn_id", "session_id", "call_id", "tool"]) {
    if (typeof v[k] !== "string" || !ID.test(v[k] as string)) {
      throw new InvalidJob(`${k} must match ${ID.source}`);
    }
  }
  if (!Number.isInteger(v.step) || (v.step as number) < 1) {
    throw new InvalidJob("step must be an integer ≥ 1");
  }
  if (!isObject(v.arguments)) {
    throw new InvalidJob("arguments must be a JSON object");
  }
  if (typeof v.deadline !== "string" || !TIME.test(v.deadline) || Number.isNaN(Date.parse(v.deadline))) {
    throw new InvalidJob("deadline must be an RFC 3339 UTC time");
  }
  return v as ToolJob;
}

/** isObject is true for a JSON object (not an array, not null). */
export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
