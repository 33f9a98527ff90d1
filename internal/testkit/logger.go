package testkit

import (
	"io"
	"log/slog"
	"strings"
	"testing"
)

// Logger logs warnings and errors to the test's log.
func Logger(t testing.TB) *slog.Logger {
	return LoggerAt(t, slog.LevelWarn)
}

// LoggerAt logs what is at level or above to the test's log.
func LoggerAt(t testing.TB, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(Writer(t), &slog.HandlerOptions{Level: level}))
}

// Writer writes to the test's log, a line a write.
func Writer(t testing.TB) io.Writer { return testWriter{t} }

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
