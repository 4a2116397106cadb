package ops

import (
	"fmt"
	"strconv"
	"strings"
)

// MinMemoryLimit is the least soft memory limit ParseMemoryLimit accepts:
// below it the Go runtime would collect almost continuously.
const MinMemoryLimit = 32 << 20

// ParseMemoryLimit reads a coordinator's --memory-limit: "off" (or empty)
// is 0, no limit of its own (the Go runtime's default pacing, or the
// GOMEMLIMIT environment variable); otherwise a whole number of bytes with
// an optional unit B, KiB, MiB or GiB (GOMEMLIMIT's units), at least
// MinMemoryLimit. The caller gives it to runtime/debug.SetMemoryLimit: the
// collector then runs more often as the process nears it, instead of
// letting the heap grow to twice the live data first.
func ParseMemoryLimit(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "off" {
		return 0, nil
	}
	num, shift := s, 0
	for _, u := range []struct {
		suffix string
		shift  int
	}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"B", 0}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = v, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("memory limit %q: want off or a whole number of bytes with an optional unit B, KiB, MiB or GiB (e.g. 256MiB)", s)
	}
	if n > (1<<62)>>shift {
		return 0, fmt.Errorf("memory limit %q is too large", s)
	}
	n <<= shift
	if n < MinMemoryLimit {
		return 0, fmt.Errorf("memory limit %q is below the least accepted, %d MiB: the collector would run almost continuously", s, MinMemoryLimit>>20)
	}
	return n, nil
}
