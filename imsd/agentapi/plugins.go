package agentapi

import (
	"context"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// maxPluginReleases bounds the plugin releases imsd records of one
// report (one per component type the agent runs).
const maxPluginReleases = 256

// reportPlugins records the plugin releases the agent reports pinned
// (hello, heartbeats) with its verification of each, when they differ
// from what is recorded. An agent that reports none (an older agentd)
// leaves them as they were. c.mu is held.
func (c *conn) reportPlugins(ctx context.Context, p *agentv1.PluginReport, now time.Time) {
	if p == nil {
		return
	}
	var r store.PluginReport
	for _, x := range p.Releases[:min(len(p.Releases), maxPluginReleases)] {
		pr := store.PluginRelease{Type: truncate(x.Type, 64), Release: truncate(x.Release, 512), Version: truncate(x.Version, 64),
			Verdict: truncate(x.Verdict, 16), KeyID: truncate(x.KeyId, 64), Reason: truncate(x.Reason, 1024)}
		if x.CheckTime != nil {
			pr.CheckedAt = x.CheckTime.AsTime().UTC()
		}
		r.Releases = append(r.Releases, pr)
	}
	if old := c.agent.Plugins; old != nil && old.SameReleases(r) {
		return
	}
	if err := c.svc.store.SetAgentPlugins(ctx, c.agent.ID, r, now); err != nil {
		c.logger().WarnContext(ctx, "record agent plugin releases", "err", err)
		return
	}
	for _, x := range r.Releases {
		if x.Verdict == "refused" {
			c.logger().InfoContext(ctx, "agent refused a plugin release", "type", x.Type, "release", x.Release, "reason", x.Reason)
		}
	}
	r.ReportedAt = now
	c.agent.Plugins = &r
}
