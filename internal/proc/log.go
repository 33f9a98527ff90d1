package proc

import (
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/lmittmann/tint"
)

// Logger builds the handler of a process: tint on a terminal, JSON lines
// otherwise.
func Logger(w io.Writer, level slog.Level) *slog.Logger {
	if IsTerminal(w) {
		return slog.New(tint.NewHandler(w, &tint.Options{Level: level, TimeFormat: time.TimeOnly}))
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

// IsTerminal reports whether w is a character device, where colour helps,
// and NO_COLOR (https://no-color.org) is unset or empty.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("NO_COLOR") == ""
}
