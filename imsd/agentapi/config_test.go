package agentapi

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
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
