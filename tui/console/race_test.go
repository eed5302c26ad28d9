//go:build race

package console

// raceSlowdown widens timing bounds under the race detector, which makes
// rendering several times slower than in a normal build.
const raceSlowdown = 10
