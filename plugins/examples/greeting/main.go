// Command byoc-plugin-greeting keeps a greeting file in its component's
// state directory and returns the greeting as an output.
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/byoc-dev/byoc/plugins/sdk"
)

type greeting struct{}

// version is the release's version; a release build sets it:
// go build -ldflags "-X main.version=0.2.0".
var version = "0.1.0"

// Describe names the type and declares the JSON Schema of its config. The
// SDK checks every config against it before Validate, Plan or Apply see
// it, and reports each problem with the path of its field.
func (greeting) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "greeting", Version: version, ConfigSchema: `{
	  "type": "object",
	  "required": ["name"],
	  "additionalProperties": false,
	  "properties": {"name": {"type": "string", "minLength": 1}}
	}`}, nil
}

// Validate checks what the schema cannot say. Each problem is a
// Diagnostic: the field's path in the config and a message. The agent
// fails the job with "invalid greeting config: config.name: ..." before
// Plan or Apply run.
func (greeting) Validate(_ context.Context, req *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	var diags []sdk.Diagnostic
	if name, _ := req.Config["name"].(string); strings.TrimSpace(name) != name {
		diags = append(diags, sdk.Diagnostic{Field: "name", Message: "must not start or end with a space"})
	}
	return &sdk.ValidateResponse{Diagnostics: diags}, nil
}

// Plan says what Apply would change: a summary (Changes) and one
// PlannedChange per object, with its values before and after. The agent
// writes both into the job log.
func (greeting) Plan(_ context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	text := fmt.Sprintf("hello, %s", req.Config["name"])
	change := sdk.PlannedChange{Address: "greeting", Action: sdk.ActionCreate, After: map[string]any{"text": text}, Summary: text}
	if req.Job.StateDir != "" {
		if old, err := os.ReadFile(filepath.Join(req.Job.StateDir, "greeting.txt")); err == nil {
			change.Action, change.Before = sdk.ActionUpdate, map[string]any{"text": string(old)}
		}
	}
	return &sdk.PlanResponse{Changes: fmt.Sprintf("would greet %s", req.Config["name"]), PlannedChanges: []sdk.PlannedChange{change}}, nil
}

// Apply keeps the greeting in the component's state directory, which the
// agent keeps across jobs; the work directory is gone after this job.
func (greeting) Apply(_ context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	text := fmt.Sprintf("hello, %s", req.Config["name"])
	req.Log.Stdout(text) // streamed to the job log as it happens
	if req.Job.StateDir == "" {
		// A job of no component, or an agent older than protocol 1.2.
		req.Log.System("no state directory: nothing kept")
	} else if err := os.WriteFile(filepath.Join(req.Job.StateDir, "greeting.txt"), []byte(text), 0o600); err != nil {
		return nil, err // the job fails with this message
	}
	return &sdk.ApplyResponse{Outputs: map[string]string{"greeting": text}}, nil
}

// Destroy removes what Apply kept; a destroy runs in a new work directory,
// so only the state directory tells it what there is.
func (greeting) Destroy(_ context.Context, req *sdk.DestroyRequest) (*sdk.DestroyResponse, error) {
	if req.Job.StateDir == "" {
		return nil, errors.New("no state directory: cannot tell what to destroy")
	}
	err := os.Remove(filepath.Join(req.Job.StateDir, "greeting.txt"))
	if errors.Is(err, fs.ErrNotExist) {
		req.Log.System("nothing to destroy")
		err = nil
	}
	return &sdk.DestroyResponse{}, err
}

func main() { sdk.Serve(greeting{}) }
