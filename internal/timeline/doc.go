// Package timeline lays out the logs of turns and workflows for people: the
// live text trace that `jetloop watch` and `replay` print (Trace), the rows
// of `replay --json` (Row), and the self-contained HTML page of
// `replay --html` that `jetloop ui` draws too (Timeline, Workflow). It reads
// logs it is given and writes pages; it reads no stream itself.
package timeline
