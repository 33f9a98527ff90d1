// The streams and buckets a tool worker uses, with exactly the configuration
// the Go processes create (internal/bus/streams.go and
// internal/tools/registry.go). Whoever starts first creates them; a process
// that finds one existing leaves it as it is, so every process must ask for
// the same thing.

import {
  DiscardPolicy,
  JetStreamApiError,
  RetentionPolicy,
  StorageType,
  StoreCompression,
  type JetStreamManager,
  type StreamConfig,
} from "@nats-io/jetstream";
import { names } from "./wire.js";

/** How long a tool's entry outlives its worker's last heartbeat (bus.ToolsTTL). */
export const TOOLS_TTL_MS = 15_000;

const nanos = (ms: number) => ms * 1_000_000;

const unlimited = {
  max_consumers: -1,
  max_msgs: -1,
  max_bytes: -1,
  max_age: 0,
  max_msgs_per_subject: -1,
  max_msg_size: -1,
  num_replicas: 1,
  storage: StorageType.File,
  compression: StoreCompression.None,
  discard: DiscardPolicy.Old,
  allow_direct: false,
  mirror_direct: false,
};

/** The streams a worker reads (jobs) or writes (results, dead letters). */
export function streamConfigs(): StreamConfig[] {
  return [
    {
      ...unlimited,
      name: names.inbox,
      description: "jetloop: inputs of the orchestrators (submits, controls, results)",
      // Every input naming a turn is stored under its partition (16), as
      // the orchestrators pull them; a five-token subject is not stored.
      subjects: ["jetloop.inbox.*", "jetloop.inbox.*.*", "jetloop.inbox.*.*.*.>"],
      subject_transform: {
        src: "jetloop.inbox.*.*",
        dest: "jetloop.inbox.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(16,2)}}",
      },
      retention: RetentionPolicy.Workqueue,
      duplicate_window: nanos(10 * 60_000),
      // jetloop's table (jetloop streams apply): bounded, discard new;
      // the inbox's largest message is the server's default max payload.
      max_bytes: 1 << 30,
      discard: DiscardPolicy.New,
      max_msg_size: 1 << 20,
    },
    {
      ...unlimited,
      name: names.jobs,
      description: "jetloop: model and tool jobs",
      subjects: ["jetloop.jobs.>"],
      retention: RetentionPolicy.Workqueue,
      duplicate_window: nanos(10 * 60_000),
      max_bytes: 1 << 30,
      discard: DiscardPolicy.New,
      // Jobs are derived from the turns' logs again after a restart: memory
      // storage by default, as jetloop streams apply makes them.
      storage: StorageType.Memory,
    },
    {
      ...unlimited,
      name: names.dead,
      description: "jetloop: dead letters, with the reason in the Jetloop-Error header",
      subjects: ["jetloop.dead.>"],
      retention: RetentionPolicy.Limits,
      duplicate_window: nanos(2 * 60_000),
      max_bytes: 1 << 30,
      max_age: nanos(14 * 24 * 3_600_000),
      // No direct gets: they would send a dead letter raw to any reply subject.
      allow_direct: false,
    },
  ] as StreamConfig[];
}

/** The stream behind a KV bucket whose keys live ttl unless refreshed, as nats.go creates it. */
export function bucketConfig(bucket: string, description: string, ttlMs = TOOLS_TTL_MS): StreamConfig {
  return {
    ...unlimited,
    name: `KV_${bucket}`,
    description,
    subjects: [`$KV.${bucket}.>`],
    retention: RetentionPolicy.Limits,
    discard: DiscardPolicy.New,
    max_age: nanos(ttlMs),
    max_msgs_per_subject: 1,
    duplicate_window: nanos(Math.min(ttlMs, 2 * 60_000)),
    deny_delete: true,
    allow_rollup_hdrs: true,
    allow_direct: true,
  } as StreamConfig;
}

/** The buckets of the registry. */
export function bucketConfigs(): StreamConfig[] {
  return [
    bucketConfig(names.tools, "jetloop: tools served by live workers"),
    // Worker deployments write it: bounded as internal/bus/streams.go
    // bounds it (WorkerValueMax, WorkersMaxBytes).
    { ...bucketConfig(names.workers, "jetloop: live workers of each tool"), max_msg_size: 1024, max_bytes: 64 << 20 },
  ];
}

// JetStream API error codes (nats-server's server/errors.json).
const STREAM_NOT_FOUND = 10059;
const STREAM_NAME_IN_USE = 10058;

/**
 * ensureStreams creates each stream and bucket the worker uses, or leaves
 * it as it is when it exists, whatever its configuration (docs/protocol.md,
 * "Streams and buckets": create only what is missing, change nothing).
 */
export async function ensureStreams(jsm: JetStreamManager): Promise<void> {
  for (const cfg of [...streamConfigs(), ...bucketConfigs()]) {
    try {
      await jsm.streams.info(cfg.name);
      continue;
    } catch (err) {
      if (!(err instanceof JetStreamApiError && err.code === STREAM_NOT_FOUND)) {
        throw new Error(`streams: look up ${cfg.name}: ${(err as Error).message}`, { cause: err });
      }
    }
    try {
      await jsm.streams.add(cfg);
    } catch (err) {
      // Another process created it between our look-up and our add.
      if (!(err instanceof JetStreamApiError && err.code === STREAM_NAME_IN_USE)) {
        throw new Error(`streams: create ${cfg.name}: ${(err as Error).message}`, { cause: err });
      }
    }
  }
}
