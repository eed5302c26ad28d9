// Package sdk is the typed Go API for writing byoc component plugins.
//
// A component type is a binary named byoc-plugin-<type> whose main calls
// [Serve] with a [Plugin]. The agent starts one plugin subprocess per job
// with hashicorp/go-plugin and drives it over the gRPC protocol defined in
// rpc/byoc/plugin/v1. Built-in types use the same SDK and the same protocol;
// the agent binary simply re-executes itself to serve them.
//
// Plugin methods take request structs and return response structs so that
// fields can be added later without breaking plugin authors. Log lines a
// plugin writes through [Logger] are streamed to the agent as they are
// produced; a returned error means the operation failed, and its message
// becomes the result's error.
//
// The host side of the protocol is [Client], obtained through [GRPCPlugin]
// and [PluginMap] when dialling a plugin with go-plugin.
//
// This package must stay importable on its own: it imports nothing from the
// agent or the server.
package sdk
