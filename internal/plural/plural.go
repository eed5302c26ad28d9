// Package plural writes counts in English: "1 install", "3 installs",
// "0 lines". The CLI, the console, imsd and agentd share it so that no
// message says "1 installs".
package plural

import "strconv"

// Count is n and word, plural unless n is 1: Count(1, "line") is
// "1 line", Count(2, "line") "2 lines". word must take a plain "s".
func Count(n int, word string) string {
	return strconv.Itoa(n) + " " + Word(n, word)
}

// Word is word, plural ("s" added) unless n is 1.
func Word(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
