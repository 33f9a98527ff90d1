// Package proc is what every jetloop process sets up the same way: its
// logger, its metrics endpoint and its trace exporter. It is apart from the
// CLI so that a binary such as the tool worker links only what it runs.
package proc
