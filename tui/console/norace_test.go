//go:build !race

package console

const raceSlowdown = 1
