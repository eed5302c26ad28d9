package operatorapi

import (
	"testing"

	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/reflect/protoreflect"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// Every RPC of OperatorService, enumerated from its descriptor, has an
// access rule, and every rule names an RPC the port serves: an RPC added
// without a rule fails here (and is refused to everyone at run time).
// e2e TestEveryRPCEveryRole calls each one with every role.
func TestEveryRPCHasARule(t *testing.T) {
	sd := imsv1.File_byoc_ims_v1_operator_proto.Services().ByName("OperatorService")
	served := map[string]bool{
		"/" + grpcreflect.ReflectV1ServiceName + "/ServerReflectionInfo":      true,
		"/" + grpcreflect.ReflectV1AlphaServiceName + "/ServerReflectionInfo": true,
	}
	for i := range sd.Methods().Len() {
		md := sd.Methods().Get(i)
		proc := "/" + string(sd.FullName()) + "/" + string(md.Name())
		served[proc] = true
		ru, ok := rules[proc]
		if !ok {
			t.Errorf("%s has no access rule in rules.go", proc)
			continue
		}
		if ru.verb == "" || ru.perm == "" {
			t.Errorf("%s: rule %+v lacks a verb or permission", proc, ru)
		}
		if ru.field != "" && md.Input().Fields().ByName(protoreflectName(ru.field)) == nil {
			t.Errorf("%s: rule names field %q, which %s lacks", proc, ru.field, md.Input().FullName())
		}
	}
	for proc := range rules {
		if !served[proc] {
			t.Errorf("rules.go has a rule for %s, which is not served", proc)
		}
	}
}

func protoreflectName(s string) protoreflect.Name { return protoreflect.Name(s) }
