package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/byoc-dev/byoc/agentd/identity"
)

// stateDirArg resolves a subcommand's --state-dir to an absolute path.
// prog names the subcommand in messages ("agentd audit"). The exit code is
// 0 on success, 2 when the flag is missing, 1 otherwise.
func stateDirArg(prog, stateDir string, stderr io.Writer) (string, int) {
	if stateDir == "" {
		fmt.Fprintf(stderr, "%s: --state-dir is required (the agent's state directory)\n", prog)
		return "", 2
	}
	dir, err := filepath.Abs(stateDir)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return "", 1
	}
	return dir, 0
}

// agentIdentity resolves --state-dir as stateDirArg does and loads the
// agent's identity from it.
func agentIdentity(prog, stateDir string, stderr io.Writer) (string, identity.Identity, int) {
	dir, code := stateDirArg(prog, stateDir, stderr)
	if code != 0 {
		return "", identity.Identity{}, code
	}
	id, err := identity.Load(dir)
	if err != nil {
		fmt.Fprintf(stderr, "%s: the agent's identity in %s: %v\n", prog, dir, err)
		return "", identity.Identity{}, 1
	}
	return dir, id, 0
}
