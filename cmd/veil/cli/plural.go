package cli

import "strconv"

// plural returns a count with its noun, singular for 1 and plural for any
// other number: "1 face", "3 faces", "0 faces". The plural is noun+"s"
// unless given: plural(n, "person", "people"), plural(n, "copy", "copies").
// Every count in the commands' human output goes through it.
func plural(n int, noun string, pluralForm ...string) string {
	if n == 1 || n == -1 {
		return strconv.Itoa(n) + " " + noun
	}
	if len(pluralForm) > 0 {
		return strconv.Itoa(n) + " " + pluralForm[0]
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
