// Command byoc-plugin-kvfile is the example plugin of the plugin author's
// guide (docs/plugin-author): a file of KEY=value lines on the agent's
// machine, planned, approved, applied, checked for drift, and destroyed
// through an approved plan.
//
//	go build -o byoc-plugin-kvfile .
//	./byoc-plugin-kvfile describe | byoc plugin register -
//	agentd plugin --state-dir /var/lib/agentd pin kvfile --file ./byoc-plugin-kvfile
package main

import (
	"github.com/byoc-dev/byoc/plugins/examples/kvfile/kvfile"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

func main() { sdk.Serve(kvfile.Plugin{}) }
