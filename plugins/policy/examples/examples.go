// Package examples holds the example policies byoc ships, embedded so
// tests and tools read exactly the files in this directory.
package examples

import _ "embed"

// Maintenance is maintenance.rego: in maintenance mode, no new IAM
// resources and no deletes.
//
//go:embed maintenance.rego
var Maintenance string
