// Package tools holds the stock tool worker's tools: the built-in tools and
// the MCP bridge. Register serves them through the public worker package,
// which is the one tool-worker runtime (the toolworker command, jetloop dev
// and the examples all run it).
//
// MCP serves the tools of MCP servers (toolworker --mcp) as Tools like the
// built-in ones: see its doc for naming, results and restarts.
package tools
