package bench

import (
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// BenchmarkJobSignature measures what signed jobs cost per job: imsd
// computes the config's digest (cached per config in imsd, so a run
// across a fleet pays it once) and signs; the agent computes the digest
// of the config it received and verifies. The config is the dispatch
// benchmark's no-op action and a larger one (20 steps).
func BenchmarkJobSignature(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	keys := map[string]ed25519.PublicKey{agentproto.KeyID(pub): pub}
	big := map[string]any{}
	steps := make([]any, 20)
	for i := range steps {
		steps[i] = map[string]any{"name": fmt.Sprintf("step-%d", i), "script": "kubectl rollout status deploy/web --timeout 120s", "timeout": 120.0}
	}
	big["steps"] = steps
	for _, tc := range []struct {
		name string
		cfg  map[string]any
	}{
		{"noop", noop.AsMap()},
		{"20steps", big},
	} {
		claims := func() agentproto.JobClaims {
			d, err := agentproto.ConfigDigest(tc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			return agentproto.JobClaims{
				KeyID: agentproto.KeyID(pub), InstallID: "ins_abcdefghijklmnop", AgentID: "agt_abcdefghijklmnop", JobID: "job_0123456789abcdefghijklmn",
				Attempt: 1, FencingToken: 1 << 40, ComponentType: "action", Operation: "apply", TimeoutSeconds: 3600,
				ConfigDigest: d, Expires: time.Now().Add(time.Hour),
			}
		}
		b.Run(tc.name+"/digest", func(b *testing.B) {
			for b.Loop() {
				if _, err := agentproto.ConfigDigest(tc.cfg); err != nil {
					b.Fatal(err)
				}
			}
			report(b, "digest "+tc.name)
		})
		b.Run(tc.name+"/sign", func(b *testing.B) {
			c := claims()
			for b.Loop() {
				agentproto.SignJob(priv, &c)
			}
			report(b, "imsd signs "+tc.name)
		})
		b.Run(tc.name+"/verify", func(b *testing.B) {
			c := claims()
			sig := agentproto.SignJob(priv, &c)
			now := time.Now()
			for b.Loop() {
				// As the agent does: the digest of what it received, then
				// the signature.
				d, err := agentproto.ConfigDigest(tc.cfg)
				if err != nil {
					b.Fatal(err)
				}
				c.ConfigDigest = d
				if err := agentproto.VerifyJob(keys, &c, sig, now); err != nil {
					b.Fatal(err)
				}
			}
			report(b, "agent verifies "+tc.name)
		})
	}
}

func report(b *testing.B, what string) {
	us := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / 1e3
	b.ReportMetric(us, "µs/job")
	fmt.Printf("job signature: %s: %.1f µs per job [%s]\n", what, us, machine())
}
