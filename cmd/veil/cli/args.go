package cli

import (
	"fmt"
	"math"
	"strings"

	"github.com/spf13/cobra"
)

// needArgs checks a command's positional arguments: at least min and at
// most max (max < 0: no limit) of what (e.g. "photo"). Unlike cobra's
// own checks it says what the arguments are and where to read more, in
// the user's words: "veil: detect needs at least one photo (…)".
func needArgs(min, max int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		n := len(args)
		if n >= min && (max < 0 || n <= max) {
			return nil
		}
		// "veil: detect needs …": the message follows the program's name.
		name := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
		var want string
		switch {
		case max == 0:
			return fmt.Errorf("%s takes no arguments, got %q: its inputs are flags (see %s --help)", name, args[0], cmd.CommandPath())
		case min == max && min == 1:
			want = "one " + what
		case min == max:
			want = fmt.Sprintf("%d %ss", min, what)
		case max < 0 && min == 1:
			want = "at least one " + what
		case max < 0:
			want = fmt.Sprintf("at least %d %ss", min, what)
		default:
			want = fmt.Sprintf("%d to %d %ss", min, max, what)
		}
		return fmt.Errorf("%s needs %s, got %d argument(s) (usage: %s; see %s --help)", name, want, n, cmd.UseLine(), cmd.CommandPath())
	}
}

// flagCheck is one condition a flag's value must meet; checkFlags reports
// the first that fails, naming the flag, what it must be and the value.
type flagCheck struct {
	flag string // without the dashes
	ok   bool
	want string // e.g. "at least 1"
	got  any
}

// checkFlags returns an error naming the first flag whose check failed.
func checkFlags(checks ...flagCheck) error {
	for _, c := range checks {
		if !c.ok {
			return fmt.Errorf("--%s must be %s, got %v", c.flag, c.want, c.got)
		}
	}
	return nil
}

// atLeast checks an integer flag against a lower bound.
func atLeast(flag string, v, min int) flagCheck {
	return flagCheck{flag, v >= min, fmt.Sprintf("at least %d", min), v}
}

// intIn checks an integer flag against a closed range.
func intIn(flag string, v, lo, hi int) flagCheck {
	return flagCheck{flag, v >= lo && v <= hi, fmt.Sprintf("between %d and %d", lo, hi), v}
}

// positive checks that a float flag is a finite number above 0.
func positive(flag string, v float64) flagCheck {
	return flagCheck{flag, v > 0 && !math.IsInf(v, 0), "a positive number", v}
}

// nonNegative checks that a float flag is a finite number ≥ 0.
func nonNegative(flag string, v float64) flagCheck {
	return flagCheck{flag, v >= 0 && !math.IsInf(v, 0), "a number ≥ 0", v}
}

// openUnit checks that a float flag lies strictly between 0 and 1.
func openUnit(flag string, v float64) flagCheck {
	return flagCheck{flag, v > 0 && v < 1, "strictly between 0 and 1", v}
}

// oneOf checks a string flag against its choices.
func oneOf(flag, v string, choices ...string) flagCheck {
	ok := false
	for _, c := range choices {
		ok = ok || v == c
	}
	want := ""
	for i, c := range choices {
		switch {
		case i == 0:
		case i == len(choices)-1:
			want += " or "
		default:
			want += ", "
		}
		want += c
	}
	return flagCheck{flag, ok, want, fmt.Sprintf("%q", v)}
}

// flagError words cobra's and pflag's errors about flags for a user (the
// root's FlagErrorFunc, inherited by every command): a value that does not
// parse says what kind of value the flag wants instead of naming Go's
// strconv function ("strconv.ParseInt: parsing \"abc\": invalid syntax"),
// and every flag error points at the command's help.
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	if i := strings.Index(msg, ": strconv.Parse"); i >= 0 {
		kind, rest := "a number", msg[i+len(": strconv.Parse"):]
		switch {
		case strings.HasPrefix(rest, "Int"), strings.HasPrefix(rest, "Uint"):
			kind = "a whole number"
		case strings.HasPrefix(rest, "Bool"):
			kind = "true or false"
		}
		what := "not " + kind
		if strings.HasSuffix(rest, "value out of range") {
			what = "out of range"
		}
		msg = msg[:i] + ": " + what
	}
	return fmt.Errorf("%s (see %s --help)", msg, cmd.CommandPath())
}
