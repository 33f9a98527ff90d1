package proc

import (
	"runtime/debug"
	"strings"
)

// Version says which build this is: the module version (a tag for `go
// install …@v1.2.3`, "(devel)" for a build in a checkout), the VCS revision
// and time the go command stamped, "+dirty" when the work tree had changes,
// and the Go version. It is the same for every jetloop binary of one build.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (built without module information)"
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	var b strings.Builder
	b.WriteString(v)
	if rev != "" {
		// A tagged release's version already names its commit; a
		// pseudo-version carries 12 digits of it; "(devel)" none.
		b.WriteString(" commit " + rev)
		if dirty {
			b.WriteString("+dirty")
		}
		if at != "" {
			b.WriteString(" (" + at + ")")
		}
	}
	b.WriteString(" " + bi.GoVersion)
	return b.String()
}
