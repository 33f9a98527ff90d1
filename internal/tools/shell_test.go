//go:build linux

package tools_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/internal/tools"
)

// alive reports whether a process runs: a zombie (killed, not yet reaped by
// whoever inherited it) is not.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// pids waits for the shell command to have written its children's pids
// into the files named and returns them.
func pids(t *testing.T, root string, names ...string) []int {
	t.Helper()
	var out []int
	testkit.WaitFor(t, "the command's children to start", func() bool {
		out = out[:0]
		for _, name := range names {
			data, err := os.ReadFile(filepath.Join(root, name))
			if err != nil {
				return false
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				return false
			}
			out = append(out, pid)
		}
		return true
	})
	return out
}

func waitGone(t *testing.T, list []int) {
	t.Helper()
	for _, pid := range list {
		if pid <= 1 {
			t.Fatalf("bad pid %d", pid)
		}
		testkit.WaitFor(t, "process "+strconv.Itoa(pid)+" to be killed", func() bool { return !alive(pid) })
	}
}

// children starts two background sleeps and a foreground one, writing the
// pids of the shell and of each background child to files: the shape of a
// command whose children outlive it unless its whole group is killed.
const children = `echo $$ > sh.pid; sleep 100 & echo $! > c1.pid; (sleep 100; echo never) & echo $! > c2.pid; sleep 100; wait`

func TestShellTimeoutKillsTheCommandWithItsChildren(t *testing.T) {
	ts, root := builtins(t, true)
	res, err := call(t, ts["shell"], `{"command":`+strconv.Quote(children)+`,"timeout_ms":300}`)
	if err != nil || !res.IsError || !strings.Contains(res.Output, "[killed after 300ms]") {
		t.Fatalf("shell over its timeout = %+v, %v", res, err)
	}
	waitGone(t, pids(t, root, "sh.pid", "c1.pid", "c2.pid"))
}

func TestShellAbortKillsTheCommandWithItsChildren(t *testing.T) {
	ts, root := builtins(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := ts["shell"].Call(ctx, json.RawMessage(`{"command":`+strconv.Quote(children)+`}`))
		done <- err
	}()
	list := pids(t, root, "sh.pid", "c1.pid", "c2.pid")
	for _, pid := range list {
		if !alive(pid) {
			t.Fatalf("process %d not running before the abort", pid)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Error("an aborted command returned no error")
		}
	case <-time.After(time.Minute):
		t.Fatal("the aborted command did not return")
	}
	waitGone(t, list)
}

// A command that exits leaving a child in the background does not leave it
// running behind the call.
func TestShellLeavesNoBackgroundChild(t *testing.T) {
	ts, root := builtins(t, true)
	res, err := call(t, ts["shell"], `{"command":"sleep 100 & echo $! > c1.pid; echo done"}`)
	if err != nil || res.IsError || strings.TrimSpace(res.Output) != "done" {
		t.Fatalf("shell = %+v, %v", res, err)
	}
	waitGone(t, pids(t, root, "c1.pid"))
}

func TestShellRunsInItsOwnProcessGroup(t *testing.T) {
	ts, _ := builtins(t, true)
	res, err := call(t, ts["shell"], `{"command":"echo $$; cat /proc/$$/stat"}`)
	if err != nil || res.IsError {
		t.Fatalf("shell = %+v, %v", res, err)
	}
	pid, stat, _ := strings.Cut(res.Output, "\n")
	fields := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	// After the command name: state, parent, process group.
	if len(fields) < 3 || fields[2] != strings.TrimSpace(pid) || fields[2] == strconv.Itoa(syscall.Getpgrp()) {
		t.Errorf("shell %s runs in process group %v; the worker's is %d", pid, fields[2:3], syscall.Getpgrp())
	}
}

func TestShellSeesAScrubbedEnvironment(t *testing.T) {
	for k, v := range map[string]string{
		"OPENAI_API_KEY": "sk-leak-1", "ANTHROPIC_API_KEY": "sk-leak-2", "NATS_URL": "nats://leak-3:4222",
		"AWS_SECRET_ACCESS_KEY": "leak-4", "GITHUB_TOKEN": "leak-5",
	} {
		t.Setenv(k, v)
	}
	ts, root := builtins(t, true)
	res, err := call(t, ts["shell"], `{"command":"env; echo; cat /proc/$$/environ | tr '\\0' '\\n'"}`)
	if err != nil || res.IsError {
		t.Fatalf("shell = %+v, %v", res, err)
	}
	if strings.Contains(res.Output, "leak") || strings.Contains(res.Output, "API_KEY") || strings.Contains(res.Output, "NATS") {
		t.Errorf("the worker's secrets reached the command:\n%s", res.Output)
	}
	for _, want := range []string{"PATH=", "HOME=" + root + "\n", "LANG="} {
		if !strings.Contains(res.Output, want) {
			t.Errorf("the environment lacks %q:\n%s", want, res.Output)
		}
	}
}

func TestShellOutputIsCappedAsItIsRead(t *testing.T) {
	ts, _ := builtins(t, true)
	// 8 MiB on stdout and a line on stderr after it: kept up to the cap.
	res, err := call(t, ts["shell"], `{"command":"head -c 8388608 /dev/zero | tr '\\0' a; echo tail >&2; exit 2"}`)
	if err != nil || !res.IsError {
		t.Fatalf("shell = %.100q, %v", res.Output, err)
	}
	if !strings.HasSuffix(res.Output, "\n[exit status 2]") {
		t.Errorf("the exit status was lost: %q", res.Output[max(len(res.Output)-80, 0):])
	}
	kept, dropped := cutOff(t, res.Output)
	if strings.Trim(kept, "a") != "" || len(kept)+dropped != 8<<20+len("tail\n") {
		t.Errorf("kept %d bytes and says %d more", len(kept), dropped)
	}
}

func TestShellIsServedOnlyWhenAllowed(t *testing.T) {
	without, err := tools.Builtins(t.TempDir(), false)
	must(t, err)
	for _, tool := range without {
		if tool.Spec().Name == "shell" {
			t.Fatal("shell served without allowShell")
		}
	}
}

// The worker's own environment is not a file away: a shell command cannot
// read it from /proc/$PPID/environ (the environment the worker was started
// with), since serving shell makes the worker non-dumpable. Root reads it
// anyway, so there the test checks only the flag.
func TestShellCannotReadTheWorkersEnvironment(t *testing.T) {
	ts, _ := builtins(t, true)
	if dumpable, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_GET_DUMPABLE, 0, 0); errno != 0 || dumpable != 0 {
		t.Errorf("the worker is dumpable (%d, %v): its environment is readable by its user", dumpable, errno)
	}
	if os.Geteuid() == 0 {
		return
	}
	res, err := call(t, ts["shell"], `{"command":"cat /proc/$PPID/environ"}`)
	if err != nil || !res.IsError {
		t.Errorf("the worker's environment was read: %q, %v", res.Output, err)
	}
}
