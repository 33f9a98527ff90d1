package proc

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Usage sets fs's usage to what jetloop's commands print: the synopsis,
// then each flag written --name, as the docs write them (the flag
// package takes both).
func Usage(fs *flag.FlagSet, synopsis string) {
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: %s\n\nflags:\n", synopsis)
		PrintFlags(w, fs)
	}
}

// PrintFlags is fs.PrintDefaults with each flag written --name.
func PrintFlags(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	for line := range strings.Lines(b.String()) {
		if strings.HasPrefix(line, "  -") {
			line = "  --" + line[3:]
		}
		fmt.Fprint(w, line)
	}
}
