package workflowfile_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/client/workflowfile"
	"github.com/jetloop/jetloop/schemas"
)

func TestParse(t *testing.T) {
	w, err := workflowfile.Parse([]byte(`workflow_id: wf1
agent: Refactorer
tasks:
  - {input: one}
  - {input: [{role: user, content: two}], agent: Writer, limits: {steps: 2}}
limits: {max_tasks: 5, tokens: 100}
policy: {approve_between: true, on_task_failure: continue, hooks: [audit]}
metadata: {team: docs}
`))
	if err != nil {
		t.Fatal(err)
	}
	if w.WorkflowID != "wf1" || w.Agent != "Refactorer" || len(w.Tasks) != 2 || w.Tasks[1].Agent != "Writer" ||
		*w.Tasks[1].Limits.Steps != 2 || w.Limits.MaxTasks != 5 || w.Limits.Tokens != 100 ||
		!w.Policy.ApproveBetween || w.Policy.OnTaskFailure != "continue" || w.Policy.Hooks[0] != "audit" || w.Metadata["team"] != "docs" {
		t.Errorf("parsed %+v", w)
	}
	if string(w.Tasks[0].Input) != `"one"` {
		t.Errorf("task 1's input %s", w.Tasks[0].Input)
	}
	data, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	if err := schemas.Validate("workflow_submit", data); err != nil {
		t.Errorf("the parsed workflow does not validate: %v\n%s", err, data)
	}
}

// A file without workflow_id is a new workflow each time it is read.
func TestParseChoosesAnID(t *testing.T) {
	a, err := workflowfile.Parse([]byte("tasks: [{input: go}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := workflowfile.Parse([]byte("tasks: [{input: go}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a.WorkflowID == "" || a.WorkflowID == b.WorkflowID {
		t.Errorf("ids %q and %q", a.WorkflowID, b.WorkflowID)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, body := range map[string]string{
		"not a mapping": "- a\n- b\n",
		"not YAML":      "tasks: [\n",
		"unknown field": "tasks: [{input: go}]\ncolour: blue\n",
		"no tasks":      "agent: A\n",
	} {
		if _, err := workflowfile.Parse([]byte(body)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func TestReadShippedExample(t *testing.T) {
	w, err := workflowfile.Read("../../examples/workflow/refactor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Tasks) == 0 {
		t.Errorf("no tasks in %+v", w)
	}
	if _, err := workflowfile.Read("no-such.yaml"); err == nil || !strings.Contains(err.Error(), "no-such.yaml") {
		t.Errorf("a missing file: %v", err)
	}
}
