package blackbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPartitionedLayout runs turns on logs laid out in four streams
// (jetloop streams apply --event-streams 4, as admin, before any process
// starts), on the shipped single-tenant config and on the tenants' (tenant
// a), every process and command as its shipped user: the grants on
// JETLOOP_EVENTS_<k> must be what JETLOOP_EVENTS's are, with no config
// rendered again for the layout.
func TestPartitionedLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	root := repoRoot(t)
	t.Run("accounts", func(t *testing.T) {
		srv := testkit.StartConfig(t, filepath.Join(root, "nats.conf"))
		url := srv.ClientURL()
		s := &layoutStack{roleStack: roleStack{t: t, root: root, as: func(role string) []string {
			return []string{"--nats", url, "--user", role, "--password-file", filepath.Join(root, "deploy", "dev", role+".password")}
		}}, dial: func(role string) *roleConn { return dialRole(t, root, url, role) }}
		s.run()
	})
	t.Run("tenants", func(t *testing.T) {
		path := filepath.Join(root, "deploy", "tenants", "tenants.yaml")
		srv := testkit.StartConfig(t, filepath.Join(filepath.Dir(path), "nats.conf"))
		url := srv.ClientURL()
		s := &layoutStack{roleStack: roleStack{t: t, root: root, as: func(role string) []string {
			return []string{"--nats", url, "--creds", tenants.SeedPath(path, "a", role)}
		}}, dial: func(role string) *roleConn { return dialTenant(t, path, url, "a", role) }}
		s.run()
	})
}

// layoutStack is a roleStack that also connects as a role with its reply
// prefix, for the Go client and the denials.
type layoutStack struct {
	roleStack
	dial func(role string) *roleConn
}

// layoutTurn is a turn of the test and the stream its log must be in.
type layoutTurn struct {
	id, session, stream string
	// text is what its last answer says.
	text string
}

func (s *layoutStack) run() {
	t := s.t
	layout := events.Layout{Streams: 4}
	if out, code := s.cliAs("admin", []string{"streams", "apply", "--event-streams", "4"}); code != 0 {
		t.Fatalf("streams apply --event-streams 4 as admin exited %d:\n%s", code, out)
	}
	admin := s.dial("admin")
	ajs, err := jetstream.New(admin.nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testkit.CheckLogs(t, ajs) })

	orchArgs := append(s.as("orchestrator"), "--agents", "data/AGENTS.md")
	if hasFlag(t, "orchestrator", "allow-scripts") {
		orchArgs = append(orchArgs, "--allow-scripts")
	}
	worker := start(t, s.root, "toolworker", append(s.as("toolworker"), "--root", s.root)...)
	orch := start(t, s.root, "orchestrator", orchArgs...)
	testkit.WaitFor(t, "the tool worker to serve", func() bool { return strings.Contains(worker.out.String(), "serving") })
	testkit.WaitFor(t, "the orchestrator to serve", func() bool { return strings.Contains(orch.out.String(), "serving") })
	for _, tool := range []string{"read_file", "list_dir", "grep", "echo"} {
		testkit.WaitTool(t, ajs, tool)
	}

	// One turn in each stream: the demo's (four tools) in a session of its
	// own, and one with an echo call in each other stream, all of one
	// session, so that the session spans three streams.
	ids := turnsInStreams(layout)
	turns := []layoutTurn{{id: ids[0], session: "layout-demo", stream: events.PartitionedStream(0), text: "This is jetloop"}}
	for k := 1; k < layout.Streams; k++ {
		turns = append(turns, layoutTurn{id: ids[k], session: "layout-s", stream: events.PartitionedStream(k),
			text: fmt.Sprintf("answered from stream %d", k)})
	}
	for i, tn := range turns {
		args := []string{"submit", "--watch", "--turn", tn.id, "--session", tn.session, "--agent", "General"}
		if i == 0 {
			args = append(args, "--model", "script:scripts/demo.yaml")
		} else {
			script := filepath.Join(t.TempDir(), "script.yaml")
			body := fmt.Sprintf("responses:\n  - text: Echoing.\n    tool_calls:\n      - {name: echo, arguments: {text: %q}}\n  - text: %q\n", tn.id, tn.text)
			if err := os.WriteFile(script, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--script", script)
		}
		out, code := s.cliAs("client", append(args, "Where is this log?"))
		if code != 0 || !strings.Contains(out, "turn.finished") || !strings.Contains(out, "completed") || !strings.Contains(out, tn.text) {
			t.Fatalf("submit --watch %s as the client exited %d:\n%s", tn.id, code, out)
		}
	}

	s.logsAreWhereTheLayoutSays(ajs, layout, turns)
	for _, role := range []string{"client", "viewer"} {
		s.cliReads(role, turns)
		s.clientReads(role, turns)
	}

	if code := orch.stop(t); code != 0 {
		t.Fatalf("orchestrator exited %d after SIGTERM", code)
	}
	if code := worker.stop(t); code != 0 {
		t.Fatalf("toolworker exited %d after SIGTERM", code)
	}
	s.outputs = append(s.outputs, "orchestrator:\n"+orch.out.String(), "toolworker:\n"+worker.out.String())
	for _, out := range s.outputs {
		if strings.Contains(strings.ToLower(out), "permissions violation") {
			t.Errorf("denied something:\n%s", out)
		}
	}

	// The grants on the streams stop at reads: what TestRolesAreDenied
	// tries on JETLOOP_EVENTS_<k> where none exists, tried here where they
	// hold the logs.
	before := eventsState(t, ajs)
	for _, role := range []string{"client", "viewer", "toolworker"} {
		c := s.dial(role)
		c.own = ownAccount(role)
		for _, d := range deniedOnLogs(role, layout.Names()) {
			t.Run(role+"/"+d.what, func(t *testing.T) { c.mustBeDenied(t, d) })
		}
	}
	if after := eventsState(t, ajs); !maps.Equal(before, after) {
		t.Errorf("the logs' streams changed:\n%v\nwas\n%v", after, before)
	}
}

// turnsInStreams are turn ids whose logs go in each stream of layout, by
// index: ids[k]'s log is in JETLOOP_EVENTS_<k>.
func turnsInStreams(layout events.Layout) []string {
	ids := make([]string, layout.Streams)
	for i, found := 0, 0; found < layout.Streams; i++ {
		id := fmt.Sprintf("layout-turn-%d", i)
		if k := events.Partition(id) % layout.Streams; ids[k] == "" {
			ids[k], found = id, found+1
		}
	}
	return ids
}

// logsAreWhereTheLayoutSays checks as admin that the logs are in
// JETLOOP_EVENTS_0..3, each turn's in its own, and that JETLOOP_EVENTS
// does not exist.
func (s *layoutStack) logsAreWhereTheLayoutSays(ajs jetstream.JetStream, layout events.Layout, turns []layoutTurn) {
	t := s.t
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ajs.Stream(ctx, events.StreamEvents); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("%s: %v, want it not found", events.StreamEvents, err)
	}
	var names []string
	lister := ajs.StreamNames(ctx)
	for name := range lister.Name() {
		if strings.HasPrefix(name, events.StreamEvents) {
			names = append(names, name)
		}
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if want := layout.Names(); !slices.Equal(names, want) {
		t.Errorf("the logs' streams: %v, want %v", names, want)
	}
	for _, tn := range turns {
		if got := layout.Stream(tn.id); got != tn.stream {
			t.Fatalf("turn %s goes in %s, the test expects %s", tn.id, got, tn.stream)
		}
		st, err := ajs.Stream(ctx, tn.stream)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetLastMsgForSubject(ctx, layout.Subject(tn.session, tn.id))
		if err != nil {
			t.Errorf("turn %s's log in %s: %v", tn.id, tn.stream, err)
			continue
		}
		// A message holds one event or a decision's: the last is the turn's end.
		var e events.Envelope
		if err := events.Each(m.Data, func(r events.Envelope) error { e = r; return nil }); err != nil || e.Type != events.TurnFinished || e.TurnID != tn.id {
			t.Errorf("the last event of %s in %s: %s (%v)", tn.id, tn.stream, m.Data, err)
		}
		if n := st.CachedInfo().State.NumSubjects; n != 1 {
			t.Errorf("%s holds %d logs, want turn %s's alone", tn.stream, n, tn.id)
		}
	}
}

// cliReads runs the reading commands as role on every turn, and turns.
func (s *layoutStack) cliReads(role string, turns []layoutTurn) {
	t := s.t
	must := func(cmd ...string) string {
		t.Helper()
		out, code := s.cliAs(role, cmd)
		if code != 0 {
			t.Fatalf("jetloop %s as the %s exited %d:\n%s", strings.Join(cmd, " "), role, code, out)
		}
		return out
	}
	for _, tn := range turns {
		if out := must("watch", tn.id); !strings.Contains(out, "turn.finished") || !strings.Contains(out, tn.text) {
			t.Errorf("watch %s as the %s:\n%s", tn.id, role, out)
		}
		if out := must("show", tn.id); !strings.Contains(out, tn.id) || !strings.Contains(out, "completed") {
			t.Errorf("show %s as the %s:\n%s", tn.id, role, out)
		}
		must("replay", "--verify", tn.id)
		var n int
		sc := bufio.NewScanner(strings.NewReader(must("export", tn.id)))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var e events.Envelope
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.TurnID != tn.id || e.Seq != n+1 {
				t.Fatalf("export %s as the %s: line %d: %s (%v)", tn.id, role, n+1, sc.Text(), err)
			}
			n++
		}
		if n < 4 {
			t.Errorf("export %s as the %s: %d events", tn.id, role, n)
		}
	}
	listed := func(args ...string) map[string]client.Turn {
		t.Helper()
		got := map[string]client.Turn{}
		for line := range strings.SplitSeq(strings.TrimSpace(must(append([]string{"turns", "--json"}, args...)...)), "\n") {
			var tr client.Turn
			if err := json.Unmarshal([]byte(line), &tr); err != nil {
				t.Fatalf("turns --json %v as the %s: %q: %v", args, role, line, err)
			}
			got[tr.TurnID] = tr
		}
		return got
	}
	all := listed()
	for _, tn := range turns {
		if tr, ok := all[tn.id]; !ok || tr.Status != client.StatusFinished || tr.SessionID != tn.session {
			t.Errorf("turns as the %s: %s is %+v (listed: %t)", role, tn.id, tr, ok)
		}
	}
	session := listed("--session", "layout-s")
	if got, want := slices.Sorted(maps.Keys(session)), sessionTurns(turns, "layout-s"); !slices.Equal(got, want) {
		t.Errorf("turns --session layout-s as the %s: %v, want %v", role, got, want)
	}
	out := must("turns")
	for _, tn := range turns {
		if !strings.Contains(out, tn.id) {
			t.Errorf("turns as the %s does not list %s:\n%s", role, tn.id, out)
		}
	}
}

// sessionTurns are the sorted ids of session's turns.
func sessionTurns(turns []layoutTurn, session string) []string {
	var ids []string
	for _, tn := range turns {
		if tn.session == session {
			ids = append(ids, tn.id)
		}
	}
	slices.Sort(ids)
	return ids
}

// clientReads reads every turn's log with the Go client as role, and the
// feed of the session spanning three streams, which must hold every event
// of its turns once, each log in order.
func (s *layoutStack) clientReads(role string, turns []layoutTurn) {
	t := s.t
	c, err := client.New(s.dial(role).nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs := map[string][]client.Record{}
	for _, tn := range turns {
		log, err := c.Log(ctx, tn.id)
		if err != nil {
			t.Fatalf("Log(%s) as the %s: %v", tn.id, role, err)
		}
		if last := log[len(log)-1]; log[0].Type != events.TurnStarted || last.Type != events.TurnFinished || last.TurnID != tn.id {
			t.Errorf("Log(%s) as the %s: from %s to %s of %s", tn.id, role, log[0].Type, last.Type, last.TurnID)
		}
		logs[tn.id] = log
	}

	feed, err := c.OpenFeed(ctx, client.FeedFilter{SessionID: "layout-s"})
	if err != nil {
		t.Fatalf("OpenFeed as the %s: %v", role, err)
	}
	defer feed.Close()
	want := 0
	for _, id := range sessionTurns(turns, "layout-s") {
		want += len(logs[id])
	}
	next := map[string]int{} // each turn's next seq
	for range want {
		r, err := feed.Next(ctx)
		if err != nil {
			t.Fatalf("the feed of layout-s as the %s, after %d events: %v", role, len(next), err)
		}
		log, ok := logs[r.TurnID]
		if !ok || r.SessionID != "layout-s" {
			t.Fatalf("the feed of layout-s as the %s: an event of turn %s, session %s", role, r.TurnID, r.SessionID)
		}
		if i := next[r.TurnID]; i >= len(log) || log[i].ID != r.ID {
			t.Fatalf("the feed of layout-s as the %s: event %d of %s is %s, not the log's", role, i+1, r.TurnID, r.ID)
		}
		next[r.TurnID]++
	}
	if !feed.CaughtUp() {
		t.Errorf("the feed of layout-s as the %s has not caught up after its %d events", role, want)
	}
}

// eventsState is state restricted to the logs' streams.
func eventsState(t *testing.T, js jetstream.JetStream) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range state(t, js) {
		if strings.Contains(k, events.StreamEvents) {
			out[k] = v
		}
	}
	return out
}
