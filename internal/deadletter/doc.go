// Package deadletter reads the dead letters an operator looks at and re-sends
// them: what `jetloop dead` and the web UI's dead letters page share. The
// letters are written by internal/bus (DeadLetter); this package only reads
// them, by direct get, and sends a client's input again.
package deadletter
