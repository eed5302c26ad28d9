package pluginhost

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/byoc-dev/byoc/plugins/sdk"
)

// maxOutputLine bounds a line of a plugin's own output; longer ones are
// cut into pieces of this size.
const maxOutputLine = 64 << 10

// syncWait bounds how long a finished call waits for the plugin's sync
// lines, which say that all it printed before them has arrived.
const syncWait = time.Second

// output gathers what a plugin process prints outside the protocol and
// hands it, line by line, to the job (StartOptions.Output) and to the
// agent's debug log:
//   - "stdout" and "stderr": what the plugin writes to os.Stdout and
//     os.Stderr while it serves (fmt.Println debugging), which go-plugin
//     forwards over its stdio stream;
//   - "stderr" too: the process's own stderr (file descriptor 2), where
//     the Go runtime prints a panic and its goroutines' stacks, the log
//     package's default logger writes, and anything printed before
//     Serve. go-plugin's own JSON log lines there go to the debug log
//     only.
//
// Nothing reaches the job after close: the job's log ends when the job
// does.
type output struct {
	typ    string
	logger *slog.Logger

	mu     sync.Mutex
	emit   func(source, text string)
	closed bool
	// synced counts the sync lines seen per forwarded stream; cond is
	// broadcast at each.
	synced map[string]int
	cond   *sync.Cond
}

func newOutput(typ string, logger *slog.Logger, emit func(source, text string)) *output {
	o := &output{typ: typ, logger: logger, emit: emit, synced: map[string]int{}}
	o.cond = sync.NewCond(&o.mu)
	return o
}

// line handles one complete line from source; forwarded says whether it
// came over go-plugin's stdio stream (where sync lines travel).
func (o *output) line(source string, forwarded bool, text string) {
	if forwarded {
		if before, ok := strings.CutSuffix(text, sdk.StdioSyncLine); ok {
			if before != "" {
				o.line(source, true, before)
			}
			o.mu.Lock()
			o.synced[source]++
			o.cond.Broadcast()
			o.mu.Unlock()
			return
		}
	}
	if !forwarded && isHCLogJSON(text) {
		// go-plugin's own log on the plugin side: plumbing, which the
		// hclog adapter already sent to the debug log.
		return
	}
	if forwarded {
		// go-plugin logs the process's own stderr at debug already.
		o.logger.Debug("plugin output", "plugin", o.typ, "source", source, "line", text)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || o.emit == nil {
		return
	}
	o.emit(source, text)
}

// isHCLogJSON reports whether a line is a JSON log entry of go-plugin's
// hclog logger.
func isHCLogJSON(text string) bool {
	return strings.HasPrefix(text, `{"@`) && strings.Contains(text, `"@message"`)
}

// waitSync waits until n sync lines arrived on both forwarded streams, or
// until syncWait passed.
func (o *output) waitSync(n int) {
	deadline := time.Now().Add(syncWait)
	timer := time.AfterFunc(syncWait, func() {
		o.mu.Lock()
		o.cond.Broadcast()
		o.mu.Unlock()
	})
	defer timer.Stop()
	o.mu.Lock()
	defer o.mu.Unlock()
	for (o.synced["stdout"] < n || o.synced["stderr"] < n) && !o.closed && time.Now().Before(deadline) {
		o.cond.Wait()
	}
}

// close stops sending lines to the job.
func (o *output) close() {
	o.mu.Lock()
	o.closed = true
	o.cond.Broadcast()
	o.mu.Unlock()
}

// writer returns an io.Writer that splits what is written into lines of
// source.
func (o *output) writer(source string, forwarded bool) *lineWriter {
	return &lineWriter{out: o, source: source, forwarded: forwarded}
}

// lineWriter splits writes into lines. go-plugin writes to it from one
// goroutine per stream.
type lineWriter struct {
	out       *output
	source    string
	forwarded bool
	mu        sync.Mutex
	buf       []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.out.line(w.source, w.forwarded, strings.TrimSuffix(string(w.buf[:i]), "\r"))
		w.buf = w.buf[i+1:]
	}
	for len(w.buf) > maxOutputLine {
		w.out.line(w.source, w.forwarded, string(w.buf[:maxOutputLine]))
		w.buf = w.buf[maxOutputLine:]
	}
	if len(w.buf) == 0 {
		w.buf = nil
	}
	return len(p), nil
}

// flush hands on a last line without a newline.
func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.out.line(w.source, w.forwarded, string(w.buf))
		w.buf = nil
	}
}
