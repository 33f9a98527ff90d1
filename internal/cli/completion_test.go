package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompletion: bash, with the script jetloop completion bash prints,
// completes the commands (after the flags every command takes too), a
// command's flags and its subcommands; zsh and fish get theirs.
func TestCompletion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(t.Context(), []string{"completion", "bash"}, &out, &errOut); code != ExitOK {
		t.Fatalf("completion bash: exit %d\n%s", code, errOut.String())
	}
	script := filepath.Join(t.TempDir(), "jetloop.bash")
	if err := os.WriteFile(script, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("bash"); err == nil {
		for line, want := range map[string]string{
			"jetloop sub":                   "submit",
			"jetloop --nats nats://x:1 wor": "workers workflow workflows",
			"jetloop submit --ag":           "--agent",
			"jetloop streams ch":            "check",
			"jetloop workflow run --wa":     "--watch",
			"jetloop completion f":          "fish",
		} {
			words := strings.Fields(line)
			cmd := exec.Command("bash", "-c", `source "$1"; COMP_WORDS=("${@:2}"); COMP_CWORD=$(($# - 2)); _jetloop; echo "${COMPREPLY[*]}"`,
				"bash", script)
			cmd.Args = append(cmd.Args, words...)
			got, err := cmd.CombinedOutput()
			if err != nil || strings.TrimSpace(string(got)) != want {
				t.Errorf("%q completes to %q (%v), want %q", line, strings.TrimSpace(string(got)), err, want)
			}
		}
	}
	for shell, want := range map[string]string{"zsh": "bashcompinit", "fish": "complete -c jetloop -n '__fish_seen_subcommand_from submit' -l agent"} {
		out.Reset()
		if code := Main(t.Context(), []string{"completion", shell}, &out, &errOut); code != ExitOK || !strings.Contains(out.String(), want) {
			t.Errorf("completion %s: exit %d\n%s", shell, code, out.String())
		}
	}
	if code := Main(t.Context(), []string{"completion", "tcsh"}, &out, &errOut); code != ExitUsage {
		t.Errorf("completion tcsh: exit %d", code)
	}
}
