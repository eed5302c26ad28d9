package action

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/byoc-dev/byoc/plugins/sdk"
)

// MaxLineBytes is the longest log line sent; longer output lines are split.
const MaxLineBytes = 64 << 10

// outputWaitDelay bounds how long a finished step waits for its output
// pipes to close. A script that leaves a background process holding stdout
// must not hang the step; the host kills the process group at the end.
const outputWaitDelay = 2 * time.Second

// runSteps runs steps in order and returns the exit code of the first one
// that fails, or 0, and the outputs of the steps that succeeded.
func runSteps(ctx context.Context, shell string, steps []step, job sdk.JobContext, env map[string]string, log sdk.Logger) (int, map[string]string, error) {
	workDir := job.WorkDir
	if workDir == "" {
		workDir = "."
	}
	workDir, err := filepath.Abs(workDir)
	if err != nil {
		return 1, nil, fmt.Errorf("work dir: %w", err)
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
		code, err := runStep(ctx, shell, workDir, env, outFile, s.Script, log)
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

// runStep runs one script and returns its exit code. An error means the
// script could not be run or was stopped by ctx.
func runStep(ctx context.Context, shell, workDir string, env map[string]string, outFile, script string, log sdk.Logger) (int, error) {
	cmd := exec.CommandContext(ctx, shell, "-e", "-c", script)
	cmd.Dir = workDir
	cmd.Env = make([]string, 0, len(env)+1)
	for k, v := range env {
		if k != "BYOC_OUTPUTS" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Env = append(cmd.Env, "BYOC_OUTPUTS="+outFile)
	// The script stays in the plugin's process group so that the host can
	// kill everything it started with one signal; Pdeathsig covers the
	// plugin dying first.
	cmd.SysProcAttr = stepProcAttr()
	stdout := newLineWriter(log.Stdout)
	stderr := newLineWriter(log.Stderr)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = outputWaitDelay

	err := cmd.Run()
	stdout.Flush()
	stderr.Flush()
	if ctx.Err() != nil {
		return exitCode(cmd), fmt.Errorf("stopped: %w", context.Cause(ctx))
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil, errors.Is(err, exec.ErrWaitDelay):
		return exitCode(cmd), nil
	case errors.As(err, &exitErr):
		return exitCode(cmd), nil
	default:
		return 127, fmt.Errorf("run %s: %w", shell, err)
	}
}

// exitCode reports a finished command's exit code the way a shell does:
// 128+n for a command killed by signal n.
func exitCode(cmd *exec.Cmd) int {
	st := cmd.ProcessState
	if st == nil {
		return 1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
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
