// A small structured logger: one logfmt line per record on stderr, the way
// the Go binaries log when their output is not a terminal.

/** Fields are the key-value pairs of a log record. */
export type Fields = Record<string, string | number | boolean | undefined>;

/** Level orders records by importance. */
export type Level = "debug" | "info" | "warn" | "error";

const ORDER: Record<Level, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/** Logger writes records at or above its level, with fields fixed by with(). */
export class Logger {
  constructor(
    private readonly level: Level = "info",
    private readonly fields: Fields = {},
  ) {}

  /** with returns a logger that adds fields to every record. */
  with(fields: Fields): Logger {
    return new Logger(this.level, { ...this.fields, ...fields });
  }

  debug(msg: string, fields: Fields = {}): void {
    this.write("debug", msg, fields);
  }
  info(msg: string, fields: Fields = {}): void {
    this.write("info", msg, fields);
  }
  warn(msg: string, fields: Fields = {}): void {
    this.write("warn", msg, fields);
  }
  error(msg: string, fields: Fields = {}): void {
    this.write("error", msg, fields);
  }

  private write(level: Level, msg: string, fields: Fields): void {
    if (ORDER[level] < ORDER[this.level]) {
      return;
    }
    const all: Fields = { time: new Date().toISOString(), level: level.toUpperCase(), msg, ...this.fields, ...fields };
    const parts: string[] = [];
    for (const [k, v] of Object.entries(all)) {
      if (v !== undefined) {
        parts.push(`${k}=${quote(String(v))}`);
      }
    }
    process.stderr.write(parts.join(" ") + "\n");
  }
}

function quote(s: string): string {
  return /^[^\s"=]+$/.test(s) ? s : JSON.stringify(s);
}

/** isLevel tells whether s names a level. */
export function isLevel(s: string): s is Level {
  return s in ORDER;
}
