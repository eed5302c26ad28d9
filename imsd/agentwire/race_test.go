//go:build race

package agentwire

const raceEnabled = true
