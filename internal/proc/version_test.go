package proc

import (
	"runtime/debug"
	"testing"
)

func TestVersionOf(t *testing.T) {
	for _, tc := range []struct {
		bi   debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3 go1.26.0"},
		{debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-11-25T16:00:00Z"}, {Key: "vcs.modified", Value: "true"},
		}}, "(devel) commit abc123+dirty (2026-11-25T16:00:00Z) go1.26.0"},
		{debug.BuildInfo{GoVersion: "go1.26.0"}, "(devel) go1.26.0"},
	} {
		if got := versionOf(&tc.bi); got != tc.want {
			t.Errorf("versionOf = %q, want %q", got, tc.want)
		}
	}
}
