// Package workflowfile reads workflow files: a workflow request
// (docs/protocol.md, "Workflows") written in YAML or JSON, as `jetloop
// workflow run FILE.yaml` submits it.
//
//	w, err := workflowfile.Read("workflow.yaml")
//	...
//	id, err := c.RunWorkflow(ctx, w)
package workflowfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/schemas"
	"gopkg.in/yaml.v3"
)

// Read reads the workflow file at path. The file must hold what the
// workflow request's schema allows, nothing else; a missing workflow_id gets
// a new UUIDv7, so the file can be run again as a new workflow.
func Read(path string) (client.Workflow, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return client.Workflow{}, err
	}
	w, err := Parse(raw)
	if err != nil {
		return client.Workflow{}, fmt.Errorf("%s: %w", path, err)
	}
	return w, nil
}

// Parse is Read of a file's contents.
func Parse(data []byte) (client.Workflow, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return client.Workflow{}, err
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return client.Workflow{}, fmt.Errorf("not a mapping of workflow_id, tasks, …")
	}
	if _, ok := m["workflow_id"]; !ok {
		m["workflow_id"] = client.NewID()
	}
	js, err := json.Marshal(m)
	if err != nil {
		return client.Workflow{}, err
	}
	if err := schemas.Validate("workflow_submit", js); err != nil {
		return client.Workflow{}, err
	}
	var w client.Workflow
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return client.Workflow{}, err
	}
	return w, nil
}
