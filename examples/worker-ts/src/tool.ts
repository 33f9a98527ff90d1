// What a tool is to the worker runtime.

/** Output is what a call answers: text, and whether it is an error or the turn's final answer. */
export type Output = { output: string; isError?: boolean; final?: boolean };

/** Tool is one tool a worker serves. */
export interface Tool {
  /** The name the model calls; it must match [A-Za-z0-9_-]{1,64} (it is a subject token). */
  readonly name: string;
  /** What the tool does, for the model. */
  readonly description: string;
  /** The JSON Schema of the arguments, advertised to orchestrators. */
  readonly parameters: Record<string, unknown>;
  /** The tool's own time limit per call in ms; 0: the orchestrator's default. */
  readonly timeoutMs: number;
  /**
   * validate checks the arguments against parameters and says what is wrong,
   * or undefined. Orchestrators check them before sending a job, but a job
   * can come from anywhere.
   */
  validate(args: Record<string, unknown>): string | undefined;
  /** call runs the tool; it stops early when signal aborts. */
  call(args: Record<string, unknown>, signal: AbortSignal): Promise<Output>;
}
