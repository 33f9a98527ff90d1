// word_count: the example tool. It counts the words, lines and characters of
// a text, the way wc does.

import { setTimeout as sleep } from "node:timers/promises";
import type { Output, Tool } from "./tool.js";

/** WordCount is the word_count tool. */
export class WordCount implements Tool {
  readonly name = "word_count";
  readonly description = "Counts the words, lines and characters of a text.";
  readonly parameters = {
    type: "object",
    properties: {
      text: { type: "string", description: "The text to count." },
    },
    required: ["text"],
    additionalProperties: false,
  };
  readonly timeoutMs = 10_000;

  /**
   * @param delayMs makes every call take at least this long, so heartbeats,
   * deadlines, cancels and draining can be watched at work.
   */
  constructor(private readonly delayMs = 0) {}

  validate(args: Record<string, unknown>): string | undefined {
    for (const k of Object.keys(args)) {
      if (k !== "text") {
        return `unknown argument ${JSON.stringify(k)}`;
      }
    }
    if (typeof args.text !== "string") {
      return "text is required and must be a string";
    }
    return undefined;
  }

  async call(args: Record<string, unknown>, signal: AbortSignal): Promise<Output> {
    if (this.delayMs > 0) {
      await sleep(this.delayMs, undefined, { signal });
    }
    return { output: count(args.text as string) };
  }
}

/** count describes a text as wc would: "4 words, 1 line, 19 characters". */
export function count(text: string): string {
  const words = text.split(/\s+/u).filter((w) => w !== "").length;
  let lines = text.split("\n").length - 1;
  if (text !== "" && !text.endsWith("\n")) {
    lines++; // a last line without its newline still counts
  }
  const chars = [...text].length;
  const plural = (n: number, w: string) => `${n} ${w}${n === 1 ? "" : "s"}`;
  return `${plural(words, "word")}, ${plural(lines, "line")}, ${plural(chars, "character")}`;
}
