package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// KeepJobLogs is how many jobs' local logs LogRoot keeps.
const KeepJobLogs = 20

// jobLog is the local copy of one job's log (LogRoot/<job>-<attempt>.log,
// 0600): the lines as sent to imsd, after the job's redactor, for the
// customer's support bundle. Writes after an error are dropped: the copy
// is a convenience, never a reason to fail a job.
type jobLog struct {
	mu sync.Mutex
	f  *os.File
}

func openJobLog(root string, job Job) *jobLog {
	if root == "" {
		return nil
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(root, fmt.Sprintf("%s-%d.log", job.ID, job.Attempt)), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil
	}
	fmt.Fprintf(f, "# job %s attempt %d: %s %s, mode %s, component %q\n", job.ID, job.Attempt, job.ComponentType, job.Operation, job.Mode, job.Component)
	return &jobLog{f: f}
}

var streamNames = map[int32]string{StreamStdout: "stdout", StreamStderr: "stderr", StreamSystem: "system"}

func (l *jobLog) write(stream int32, text string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		fmt.Fprintf(l.f, "%s\t%s\n", streamNames[stream], strings.ReplaceAll(text, "\n", "\\n"))
	}
}

func (l *jobLog) close(root string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.f.Close()
	l.f = nil
	l.mu.Unlock()
	pruneJobLogs(root, KeepJobLogs)
}

// pruneJobLogs keeps the newest keep logs of root.
func pruneJobLogs(root string, keep int) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	type file struct {
		name string
		mod  int64
	}
	var files []file
	for _, e := range entries {
		if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".log") {
			files = append(files, file{e.Name(), info.ModTime().UnixNano()})
		}
	}
	if len(files) <= keep {
		return
	}
	slices.SortFunc(files, func(a, b file) int { return int(min(max(b.mod-a.mod, -1), 1)) })
	for _, f := range files[keep:] {
		os.Remove(filepath.Join(root, f.name))
	}
}
