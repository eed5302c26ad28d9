// Command byoc-plugin-localfile is an example third-party component
// plugin for byoc, built only against the public SDK. It manages one file
// on the machine the agent runs on:
//
//	{"path": "/etc/motd", "content": "hello\n", "mode": "0644"}
//
// plan says what apply would change, apply writes the file atomically,
// drift reports whether someone changed it since, destroy removes it.
//
// Build it, pin it and put it in the agent's plugin directory:
//
//	go build -o /opt/byoc/plugins/byoc-plugin-localfile .
//	/opt/byoc/plugins/byoc-plugin-localfile describe
//	sha256sum /opt/byoc/plugins/byoc-plugin-localfile
//	agentd ... --plugin-dir /opt/byoc/plugins --plugin-pin localfile=<sha256>
package main

import (
	"github.com/byoc-dev/byoc/plugins/examples/localfile/localfile"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

func main() { sdk.Serve(localfile.New()) }
