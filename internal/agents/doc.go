// Package agents reads AGENTS.md: the agents an orchestrator can run, each a
// YAML front-matter block followed by its system prompt.
//
// One file holds one or more agents; a directory holds *.md files read the
// same way, in name order. The format is documented in docs/agents.md and its
// front matter described by schemas/agent.schema.json:
//
//	---
//	name: Refactorer
//	description: Small, safe code changes
//	model: openai/gpt-4.1-mini
//	steps: 5
//	tools: [read_file, list_dir, grep, write_file]
//	approval: [write_file]
//	timeout: 10m
//	compaction: {keep_steps: 8}
//	---
//	You are Refactorer. …
//
// A line that is exactly "---" opens an agent only where the lines up to the
// next "---" parse as a YAML mapping with a name key; anywhere else it is
// prompt text, so a Markdown horizontal rule inside a prompt stays where it is.
//
// Problems come back as [Diagnostic] values that name the file and the line of
// the offending key. Mistakes that only weaken an agent (a bad steps, budget,
// timeout, doom_loop or compaction, an unknown key) are warnings and the value
// falls back to something safe: steps clamps to 0 (text only), an unreadable
// tools list offers no tools rather than every tool, and an unreadable
// compaction compacts nothing. Mistakes that make the set
// ambiguous (a missing, invalid or duplicate name) are errors, and [Load]
// refuses a set with any error, so an orchestrator never starts with agents
// that are not what their author meant.
package agents
