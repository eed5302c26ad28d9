package agentapi

import (
	"context"
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// configStruct must decode what protojson would, since agents and plugins
// see the result.
func TestConfigStructMatchesProtojson(t *testing.T) {
	for _, in := range []string{
		`{}`,
		`{"steps":[{"name":"a","script":"echo hi"},{"run":"x"}],"timeout":30,"ratio":0.25,"on":true,"off":false,"nothing":null}`,
		`{"nested":{"deep":{"list":[1,"two",[3],{"four":4}]}},"unicode":"żółw ✓","empty":""}`,
	} {
		got, _, err := configStruct([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		want := &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(in), want); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("%s:\n got %v\nwant %v", in, got, want)
		}
	}
	if s, _, err := configStruct(nil); err != nil || len(s.Fields) != 0 {
		t.Errorf("empty config: %v, %v", s, err)
	}
	if _, _, err := configStruct([]byte(`{"a":`)); err == nil || !strings.Contains(err.Error(), "job config") {
		t.Errorf("truncated config: got %v, want an error naming the job config", err)
	}
}

// testService is a Service with a fresh signing key, enough to build
// assignments.
func testService(t *testing.T) *Service {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &Service{cfg: Config{LeaseDuration: 30 * time.Second, LeaseGrace: 5 * time.Second, SigningKey: auth.NewSigningKey(priv)}, now: time.Now}
}

// agentVerifies checks an assignment as the agent does: its claims as
// received, the config's digest from the Struct it decoded.
func agentVerifies(t *testing.T, s *Service, a *agentv1.JobAssignment) error {
	t.Helper()
	d, err := agentproto.ConfigDigest(a.GetConfig().AsMap())
	if err != nil {
		return err
	}
	sig := a.GetSignature()
	c := agentproto.JobClaims{
		KeyID: sig.GetKeyId(), InstallID: a.InstallId, AgentID: "agt_1", JobID: a.JobId, Attempt: int64(a.Attempt), FencingToken: a.FencingToken,
		Mode: a.Mode, Component: a.Component, ComponentType: a.ComponentType, Operation: a.Operation, TimeoutSeconds: a.TimeoutSeconds,
		ConfigDigest: d, Expires: time.UnixMilli(sig.GetExpireUnixMs()),
	}
	keys := map[string]ed25519.PublicKey{s.cfg.SigningKey.ID: s.cfg.SigningKey.Public}
	return agentproto.VerifyJob(keys, &c, sig.GetSignature(), time.Now())
}

// An assignment's config travels as raw field bytes; an agent decoding the
// message must see the Struct protojson would make of the stored JSON, and
// so must a JSON-codec stream once decodeConfig has run. Either way the
// config's digest the agent computes from what it decoded is the one imsd
// signed, and the signature verifies.
func TestAssignmentConfigOnTheWire(t *testing.T) {
	svc := testService(t)
	for _, in := range []string{
		`{"steps":[{"name":"a","script":"echo hi"}],"n":3}`,
		`{"other":{"x":[true,null,"y"]}}`, // a second config replaces the cached one
		`{"b":{"z":1,"a":2,"m":[0.1,-0,1e300,"s"]},"a":"żółw","c":{},"d":[],"e":12345678901234567890}`,
		`{"steps":[{"name":"a","script":"echo hi"}],"n":3}`,
		``,
	} {
		want := &structpb.Struct{}
		if in != "" {
			if err := protojson.Unmarshal([]byte(in), want); err != nil {
				t.Fatal(err)
			}
		}
		a, err := svc.assignment(context.Background(), store.Job{ID: "j1", FencingToken: 7, Attempt: 1, ComponentType: "action", Component: "web", Operation: "apply", Config: []byte(in), Timeout: time.Minute}, "in1", "agt_1")
		if err != nil {
			t.Fatal(err)
		}
		b, err := proto.Marshal(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Assignment{Assignment: a}})
		if err != nil {
			t.Fatal(err)
		}
		var got agentv1.ConnectResponse
		if err := proto.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		ga := got.GetAssignment()
		if !proto.Equal(ga.GetConfig(), want) || ga.JobId != "j1" || ga.FencingToken != 7 || ga.InstallId != "in1" || ga.TimeoutSeconds != 60 || ga.Component != "web" {
			t.Errorf("%q: agent decoded %v", in, ga)
		}
		if len(ga.ProtoReflect().GetUnknown()) != 0 {
			t.Errorf("%q: the agent sees unknown fields", in)
		}
		if err := agentVerifies(t, svc, ga); err != nil {
			t.Errorf("%q: the agent refuses imsd's signature: %v", in, err)
		}

		m := &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Assignment{Assignment: a}}
		if err := decodeConfig(m); err != nil {
			t.Fatal(err)
		}
		js, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var viaJSON agentv1.ConnectResponse
		if err := protojson.Unmarshal(js, &viaJSON); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(viaJSON.GetAssignment().GetConfig(), want) {
			t.Errorf("%q: over JSON the agent got config %v, want %v", in, viaJSON.GetAssignment().GetConfig(), want)
		}
		if err := agentVerifies(t, svc, viaJSON.GetAssignment()); err != nil {
			t.Errorf("%q: over JSON the agent refuses imsd's signature: %v", in, err)
		}
	}
	if _, err := svc.assignment(context.Background(), store.Job{Config: []byte(`{"a":`)}, "", ""); err == nil || !strings.Contains(err.Error(), "job config") {
		t.Errorf("truncated config: got %v, want an error naming the job config", err)
	}
}

// FuzzConfigDigestBothSides: for any stored config imsd can encode, the
// digest imsd signs (from the stored JSON) is the one the agent computes
// from the Struct it decodes out of the assignment's config bytes.
func FuzzConfigDigestBothSides(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a":1}`, `{"steps":[{"name":"a","script":"echo hi"}],"n":3}`,
		`{"b":{"z":1,"a":2,"m":[0.1,-0,1e300,"s"]},"a":"żółw","c":{},"d":[],"e":12345678901234567890}`,
		`{"x":null,"y":true,"z":[false,null,{"":""}],"\u2028":"\ud83d\ude00"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		lastConfig.Store(nil) // each input encoded afresh
		field, want, err := configField(b)
		if err != nil {
			return // not a config imsd stores
		}
		var a agentv1.JobAssignment
		if err := proto.Unmarshal(field, &a); err != nil {
			t.Fatalf("the agent cannot decode the config field of %q: %v", b, err)
		}
		got, err := agentproto.ConfigDigest(a.GetConfig().AsMap())
		if err != nil {
			t.Fatalf("the agent cannot digest %q: %v", b, err)
		}
		if got != want {
			t.Fatalf("%q: imsd signs digest %x, the agent computes %x", b, want, got)
		}
	})
}
