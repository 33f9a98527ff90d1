// Package docs holds jetloop's documentation, and the tests that keep it
// true: the protocol page names every schema and subject the code uses, and
// every command the README and these pages tell a reader to run runs.
package docs
