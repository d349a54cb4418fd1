// Package suggest measures how far a mistyped name is from the names a
// program knows, for the "did you mean" of an unknown command, flag or
// configuration variable. The command line (internal/cli) and the
// configuration (shared/config) each decide how close is close enough;
// both measure with Distance.
package suggest

// Distance is the optimal string alignment distance of a and b, by
// runes: the fewest insertions, deletions, substitutions and swaps of two
// neighbouring characters that turn one into the other ("redrvie" is one
// edit from "redrive"). Callers fold case first when case does not matter.
func Distance(a, b string) int {
	s, t := []rune(a), []rune(b)
	// d[i][j] is the distance of s[:i] and t[:j]; three rows suffice.
	prev2, prev, cur := make([]int, len(t)+1), make([]int, len(t)+1), make([]int, len(t)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(s); i++ {
		cur[0] = i
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(t)]
}
