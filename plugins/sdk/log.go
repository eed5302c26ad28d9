package sdk

import (
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/byoc-dev/byoc/plugins/sdk/loglevel"
)

// NewLogger returns a leveled, structured logger (hclog) that writes
// each entry as one line of the job's log, on the stdout stream, in
// hclog's text form: "[WARN]  kvfile: disk low: free=3 path=/data".
// byoc job logs --level LEVEL (and byoc logs) shows only the lines at
// LEVEL and above; lines without a level count as info.
//
//	log := sdk.NewLogger(req.Log, "kvfile")
//	log.Warn("disk low", "free", free, "path", path)
//
// The fields go through the agent's redactor like every line.
func NewLogger(l Logger, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Trace, Output: &lineLogger{l: l}, DisableTime: true})
}

// lineLogger turns what hclog writes into log lines.
type lineLogger struct {
	mu  sync.Mutex
	l   Logger
	buf string
}

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf += string(p)
	for {
		line, rest, ok := strings.Cut(w.buf, "\n")
		if !ok {
			break
		}
		w.l.Stdout(line)
		w.buf = rest
	}
	return len(p), nil
}

// LogLevel returns the level of a log line written by NewLogger ("trace",
// "debug", "info", "warn" or "error"), or "" for a line without one.
func LogLevel(text string) string { return loglevel.Of(text) }

// LogLevels are the levels of NewLogger's lines, lowest first.
var LogLevels = loglevel.Levels
