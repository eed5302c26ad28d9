package action

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/byoc-dev/byoc/plugins/action/sandbox"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

// MaxLineBytes is the longest log line sent; longer output lines are split.
const MaxLineBytes = 64 << 10

// outputWaitDelay bounds how long a finished step waits for its output
// pipes to close. A script that leaves a background process holding stdout
// must not hang the step; the host kills the process group at the end.
const outputWaitDelay = 2 * time.Second

// runSteps runs steps in order, each in its own sandbox, and returns the
// exit code of the first one that fails, or 0, and the outputs of the
// steps that succeeded.
func (p *Plugin) runSteps(ctx context.Context, cfg config, steps []step, job sdk.JobContext, env map[string]string, log sdk.Logger) (int, map[string]string, error) {
	workDir := job.WorkDir
	if workDir == "" {
		workDir = "."
	}
	workDir, err := filepath.Abs(workDir)
	if err != nil {
		return 1, nil, fmt.Errorf("work dir: %w", err)
	}
	sb := sandbox.New(ctx, p.sandbox)
	policy := sandbox.Policy{WorkDir: workDir, StateDir: job.StateDir, Network: cfg.Network, Limits: cfg.Limits, WaitDelay: outputWaitDelay}
	log.System("sandbox: " + sb.Describe(policy))
	for _, w := range sb.Warnings() {
		log.System("sandbox: WARNING: " + w)
	}
	outputs := map[string]string{}
	for i, s := range steps {
		label := fmt.Sprintf("step %d/%d %s", i+1, len(steps), s.Name)
		outFile := filepath.Join(workDir, fmt.Sprintf("outputs-%d.env", i))
		// A retried job reuses its work dir; stale outputs must not leak in.
		if err := os.Remove(outFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 1, outputs, fmt.Errorf("%s: remove old outputs: %w", label, err)
		}
		log.System(label + ": start")
		start := time.Now()
		// The job's environment, then the action's, then the step's.
		stepEnv := maps.Clone(env)
		if stepEnv == nil {
			stepEnv = map[string]string{}
		}
		maps.Copy(stepEnv, cfg.Env)
		maps.Copy(stepEnv, s.Env)
		code, err := runStep(ctx, sb, policy, cfg.Shell, s, stepEnv, outFile, log)
		if err != nil {
			log.System(fmt.Sprintf("%s: %v", label, err))
			return code, outputs, fmt.Errorf("step %q: %w", s.Name, err)
		}
		log.System(fmt.Sprintf("%s: exit code %d (%s)", label, code, time.Since(start).Round(time.Millisecond)))
		if code != 0 {
			return code, outputs, fmt.Errorf("step %q failed with exit code %d", s.Name, code)
		}
		if err := readOutputs(outFile, outputs); err != nil {
			return 1, outputs, fmt.Errorf("step %q: %w", s.Name, err)
		}
	}
	return 0, outputs, nil
}

// errStepTimeout ends a step that ran past its own time limit.
var errStepTimeout = errors.New("step timed out")

// runStep runs one script in the sandbox and returns its exit code. An
// error means the script could not be run, was stopped by ctx, ran past
// its time limit or was killed for exceeding its memory limit.
func runStep(ctx context.Context, sb *sandbox.Sandbox, policy sandbox.Policy, shell string, s step, env map[string]string, outFile string, log sdk.Logger) (int, error) {
	policy.Env = make([]string, 0, len(env)+1)
	for k, v := range env {
		if k != "BYOC_OUTPUTS" {
			policy.Env = append(policy.Env, k+"="+v)
		}
	}
	policy.Env = append(policy.Env, "BYOC_OUTPUTS="+outFile)
	stdout := newLineWriter(log.Stdout)
	stderr := newLineWriter(log.Stderr)
	policy.Stdout, policy.Stderr = stdout, stderr

	stepCtx := ctx
	if s.Timeout > 0 {
		var cancel context.CancelFunc
		stepCtx, cancel = context.WithTimeoutCause(ctx, s.Timeout, errStepTimeout)
		defer cancel()
	}
	res, err := sb.Run(stepCtx, policy, []string{shell, "-e", "-c", s.Script})
	stdout.Flush()
	stderr.Flush()
	switch {
	case res.OOMKilled:
		return res.ExitCode, fmt.Errorf("killed: exceeded its memory limit of %d MiB (sandbox.memory_mb)", policy.Limits.MemoryBytes>>20)
	case ctx.Err() != nil:
		return res.ExitCode, fmt.Errorf("stopped: %w", context.Cause(ctx))
	case errors.Is(err, errStepTimeout):
		return res.ExitCode, fmt.Errorf("killed: exceeded its time limit of %s", s.Timeout)
	case err != nil:
		return 127, fmt.Errorf("run %s: %w", shell, err)
	}
	return res.ExitCode, nil
}

// readOutputs adds the key=value lines of path, if it exists, to outputs.
func readOutputs(path string, outputs map[string]string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read outputs: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return fmt.Errorf("read outputs: line %d: want key=value", n)
		}
		outputs[k] = v
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read outputs: %w", err)
	}
	return nil
}

// lineWriter turns a byte stream into log lines, emitting each line as soon
// as it is complete and splitting lines longer than MaxLineBytes, so a
// script printing one endless line never makes it buffer without bound.
type lineWriter struct {
	emit func(string)
	buf  []byte
}

func newLineWriter(emit func(string)) *lineWriter {
	return &lineWriter{emit: emit, buf: make([]byte, 0, 4096)}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := indexNewline(p)
		if i >= 0 && len(w.buf)+i <= MaxLineBytes {
			w.buf = append(w.buf, p[:i]...)
			w.line()
			p = p[i+1:]
			continue
		}
		room := MaxLineBytes - len(w.buf)
		take := min(room, len(p))
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		if len(w.buf) >= MaxLineBytes {
			w.split()
		}
	}
	return n, nil
}

func indexNewline(p []byte) int {
	for i, c := range p {
		if c == '\n' {
			return i
		}
	}
	return -1
}

// line emits the buffered bytes as one complete line.
func (w *lineWriter) line() {
	w.emit(strings.TrimSuffix(string(w.buf), "\r"))
	w.buf = w.buf[:0]
}

// split emits a full buffer as one line, cut at a rune boundary when the
// buffer ends inside a UTF-8 sequence; the tail stays for the next line.
func (w *lineWriter) split() {
	cut := len(w.buf)
	for back := 1; back < utf8.UTFMax && back <= len(w.buf); back++ {
		if utf8.RuneStart(w.buf[len(w.buf)-back]) {
			if !utf8.FullRune(w.buf[len(w.buf)-back:]) {
				cut = len(w.buf) - back
			}
			break
		}
	}
	w.emit(string(w.buf[:cut]))
	w.buf = append(w.buf[:0], w.buf[cut:]...)
}

// Flush emits a final line that did not end in a newline.
func (w *lineWriter) Flush() {
	if len(w.buf) > 0 {
		w.line()
	}
}
