// Package confined reads files inside a directory without leaving it and
// without waiting on a special file: what the tool worker's file tools and
// the orchestrator's script files share. It links nothing of jetloop.
package confined
