package e2e

import (
	"github.com/byoc-dev/byoc/e2e/cluster"
	"strings"
	"testing"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// What a job's code returns is the vendor's to choose, and imsd reads at
// most 16 MiB a message from an agent. A result over it (here 18 MB of
// outputs from an action's script) used to be sent again at every
// reconnect, ending the agent's stream each time: that job never
// finished and no other job of the install ran. Now the job fails,
// saying how large its result was and what was largest, and the agent
// goes on. A flood of long log lines (40 MB on one line, cut into 64 KiB
// lines) arrives whole.
func TestOversizedResultFailsTheJobNotTheAgent(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	startAgent(t, ims, "acme")
	c := ims.Admin()

	big := enqueue(t, c, "acme", `v=$(head -c 60000 /dev/zero | tr '\0' y); for i in $(seq 300); do echo "k$i=$v"; done >> "$BYOC_OUTPUTS"; echo done`, 120)
	_, end := follow(t, c, big.Id)
	if end.State != imsv1.JobState_JOB_STATE_FAILED || len(end.Outputs) != 0 ||
		!strings.Contains(end.Error, "the operation succeeded but the job's result is 17.2 MiB, over the 8.0 MiB an agent sends to imsd, so it was not sent: 300 outputs") ||
		!strings.Contains(end.Error, "the largest: outputs.k") {
		t.Fatalf("the oversized job ended %v with %d outputs: %q", end.State, len(end.Outputs), end.Error)
	}

	flood := enqueue(t, c, "acme", `head -c 40000000 /dev/zero | tr '\0' x; echo; echo done`, 120)
	lines, end := follow(t, c, flood.Id)
	if end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("the flood job ended %v: %s", end.State, end.Error)
	}
	var text int
	for _, l := range lines {
		if l.Stream == imsv1.LogStream_LOG_STREAM_STDOUT {
			text += len(l.Text)
		}
	}
	if text != 40000000+len("done") {
		t.Fatalf("%d bytes of the flood's output arrived in %d lines, want 40,000,004", text, len(lines))
	}

	small := enqueue(t, c, "acme", `echo "after=yes" >> "$BYOC_OUTPUTS"`, 60)
	if _, end = follow(t, c, small.Id); end.State != imsv1.JobState_JOB_STATE_SUCCEEDED || end.Outputs["after"] != "yes" {
		t.Fatalf("the next job ended %v %v: %s", end.State, end.Outputs, end.Error)
	}
}
