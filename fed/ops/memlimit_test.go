package ops

import (
	"strings"
	"testing"
)

func TestParseMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		err  string
	}{
		{"off", 0, ""},
		{"", 0, ""},
		{"128MiB", 128 << 20, ""},
		{" 1GiB ", 1 << 30, ""},
		{"65536KiB", 64 << 20, ""},
		{"33554432", 32 << 20, ""},
		{"33554432B", 32 << 20, ""},
		{"16MiB", 0, "below the least accepted"},
		{"0", 0, "below the least accepted"},
		{"-5MiB", 0, "want off or"},
		{"128MB", 0, "want off or"},
		{"1.5GiB", 0, "want off or"},
		{"MiB", 0, "want off or"},
		{"on", 0, "want off or"},
		{"9999999999GiB", 0, "too large"},
	} {
		got, err := ParseMemoryLimit(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseMemoryLimit(%q) = %d, %v; want an error containing %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseMemoryLimit(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func FuzzParseMemoryLimit(f *testing.F) {
	for _, s := range []string{"off", "128MiB", "1GiB", "33554432", "-1", "9999999999GiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseMemoryLimit(s)
		if err == nil && n != 0 && n < MinMemoryLimit {
			t.Fatalf("ParseMemoryLimit(%q) = %d, below MinMemoryLimit", s, n)
		}
		if err != nil && n != 0 {
			t.Fatalf("ParseMemoryLimit(%q) = %d with error %v", s, n, err)
		}
	})
}
