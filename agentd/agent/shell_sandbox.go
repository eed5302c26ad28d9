package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/byoc-dev/byoc/agentd/pluginhost"
)

// ShellSpec is a support shell to start (Config.Shell).
type ShellSpec struct {
	ID        string
	InstallID string
	Component string
	// Argv is what runs in the PTY.
	Argv []string
	Term string
	// Grant is the customer's break-glass grant the session runs under
	// (one that allows sessions), Role its role: the credentials are that
	// grant's, whatever other grants are live.
	Grant string
	Role  string
	// TTY is the host path of the session's terminal (/dev/pts/N).
	TTY string
}

// Shell builds a support shell's command for the agent's sessions
// (Config.Shell): in the sandbox the runner's plugins run in (the
// loader's), in a directory of its own under WorkRoot (removed when it
// ends), with the component's state directory when there is one, and an
// environment with nothing of the agent's own: the break-glass role's
// credentials (Credentials, as a break_glass job gets them), TERM and a
// plain PATH. The returned func cleans up after the command ended.
func (r *PluginRunner) Shell(ctx context.Context, spec ShellSpec) (*exec.Cmd, func(), error) {
	work := filepath.Join(r.WorkRoot, spec.ID)
	// In use from here, before it exists, so that the sweep after each
	// job (Sweep) never removes a live session's directory.
	r.enter(work)
	cleanup := func() {
		os.RemoveAll(work)
		r.leave(work)
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		cleanup()
		return nil, nil, err
	}
	env := map[string]string{
		"PATH":            "/usr/local/bin:/usr/bin:/bin",
		"HOME":            work,
		"TMPDIR":          work,
		"LANG":            "C.UTF-8",
		"TERM":            spec.Term,
		"BYOC_SESSION_ID": spec.ID,
		"BYOC_INSTALL_ID": spec.InstallID,
	}
	var writable []string
	if spec.Component != "" && r.StateRoot != "" {
		dir := filepath.Join(r.StateRoot, spec.Component)
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			writable = append(writable, dir)
			env["BYOC_STATE_DIR"] = dir
		}
	}
	if r.InstallRegistry != "" {
		env[InstallRegistryEnv] = r.InstallRegistry
	}
	if r.Credentials != nil {
		creds, _, err := r.Credentials(ctx, Job{ID: spec.ID, InstallID: spec.InstallID, Mode: "break_glass",
			Grant: spec.Grant, ComponentType: "shell", Operation: "shell", Component: spec.Component})
		if err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("the break-glass role's credentials: %w", err)
		}
		for k, v := range creds {
			env[k] = v
		}
	}
	w, ro, hidden := r.sandboxPaths("shell", "")
	cmd, err := r.Loader.ShellCommand(spec.Argv, pluginhost.ShellOptions{Work: work,
		Writable: append(slices.Clone(w), writable...), ReadOnly: ro, Hidden: hidden, TTY: spec.TTY})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	cmd.Env = nil
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	slices.Sort(cmd.Env)
	return cmd, cleanup, nil
}
