package sdktest

import (
	"bufio"
	"io"
	"log"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/redact"
)

// redactHold is how long a line that ends like the start of a secret is
// held for the next one (the agent's hold).
const redactHold = 100 * time.Millisecond

// redactor redacts every secret the case's agent knows and the values the
// config listed as sensitive, as the agent's does.
func redactor(secrets map[string]string, sensitive []string) *redact.Redactor {
	return redact.New(append(slices.Collect(maps.Values(secrets)), sensitive...)...)
}

// redactResult redacts what a result sends back: its error, outputs,
// changes and planned changes.
func redactResult(red *redact.Redactor, res *sdk.Result) {
	if res == nil || red.Empty() {
		return
	}
	res.Error = red.String(res.Error)
	res.Changes = red.String(res.Changes)
	res.Outputs = red.Map(res.Outputs)
	for i := range res.PlannedChanges {
		c := &res.PlannedChanges[i]
		c.Address, c.Summary = red.String(c.Address), red.String(c.Summary)
		if c.Before != nil {
			c.Before = red.Value(c.Before)
		}
		if c.After != nil {
			c.After = red.Value(c.After)
		}
	}
}

// stdioMu serializes captureOutput: os.Stdout and os.Stderr are the
// process's, so two plugins under test print into one another's steps
// otherwise (steps of parallel tests wait for each other here).
var stdioMu sync.Mutex

// captureOutput runs fn with os.Stdout, os.Stderr and the log package's
// output going to pipes, and logs each line printed as the agent logs
// what a plugin process prints: "[plugin stdout] ..." or "[plugin stderr]
// ..." on the system stream.
func captureOutput(logf func(sdk.LogEvent), fn func() error) error {
	stdioMu.Lock()
	defer stdioMu.Unlock()
	outR, outW, err := os.Pipe()
	if err != nil {
		return fn()
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return fn()
	}
	var wg sync.WaitGroup
	read := func(r io.ReadCloser, source string) {
		defer wg.Done()
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			logf(sdk.LogEvent{Stream: sdk.StreamSystem, Text: "[plugin " + source + "] " + sc.Text()})
		}
		_, _ = io.Copy(io.Discard, r)
	}
	wg.Add(2)
	go read(outR, "stdout")
	go read(errR, "stderr")
	oldOut, oldErr, oldLog := os.Stdout, os.Stderr, log.Writer()
	os.Stdout, os.Stderr = outW, errW
	log.SetOutput(errW)
	defer func() {
		os.Stdout, os.Stderr = oldOut, oldErr
		log.SetOutput(oldLog)
		outW.Close()
		errW.Close()
		wg.Wait()
	}()
	return fn()
}
