// Package ui is the web view of `jetloop ui` and `jetloop dev --ui`: the
// turns, a turn's and a workflow's timeline, and the dead letters, drawn
// live in a browser, with the controls the connection's credentials allow.
//
// It is a reader like the CLI's: it reads the streams by direct get and
// follows them with subscriptions (internal/bus's Tail), and creates no
// consumer, so it runs with the viewer role's credentials. What it sends
// (control messages, re-sent dead letters) goes through the client and
// internal/deadletter, with the same checks as the CLI's commands. It serves
// loopback only unless bound elsewhere, and refuses what a page of another
// site could make a browser send.
package ui
