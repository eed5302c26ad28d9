package agentapi

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/imsd/store"
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
		got, err := configStruct([]byte(in))
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
	if s, err := configStruct(nil); err != nil || len(s.Fields) != 0 {
		t.Errorf("empty config: %v, %v", s, err)
	}
	if _, err := configStruct([]byte(`{"a":`)); err == nil || !strings.Contains(err.Error(), "job config") {
		t.Errorf("truncated config: got %v, want an error naming the job config", err)
	}
}

// An assignment's config travels as raw field bytes; an agent decoding the
// message must see the Struct protojson would make of the stored JSON, and
// so must a JSON-codec stream once decodeConfig has run.
func TestAssignmentConfigOnTheWire(t *testing.T) {
	for _, in := range []string{
		`{"steps":[{"name":"a","script":"echo hi"}],"n":3}`,
		`{"other":{"x":[true,null,"y"]}}`, // a second config replaces the cached one
		`{"steps":[{"name":"a","script":"echo hi"}],"n":3}`,
		``,
	} {
		want := &structpb.Struct{}
		if in != "" {
			if err := protojson.Unmarshal([]byte(in), want); err != nil {
				t.Fatal(err)
			}
		}
		a, err := assignment(store.Job{ID: "j1", FencingToken: 7, Attempt: 1, ComponentType: "action", Component: "web", Operation: "apply", Config: []byte(in), Timeout: time.Minute}, "in1")
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
	}
	if _, err := assignment(store.Job{Config: []byte(`{"a":`)}, ""); err == nil || !strings.Contains(err.Error(), "job config") {
		t.Errorf("truncated config: got %v, want an error naming the job config", err)
	}
}
