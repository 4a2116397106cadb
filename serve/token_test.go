package serve

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("good", "0123456789abcdef-file\n", 0o600)
	open := file("open", "0123456789abcdef-file\n", 0o644)
	short := file("short", "short\n", 0o600)
	for _, tc := range []struct {
		name, file, env string
		want, from      string
		err             string // part of the error; "" for none
	}{
		{"nothing", "", "", "", "", ""},
		{"file", good, "", "0123456789abcdef-file", "--token-file", ""},
		{"environment", "", "0123456789abcdef-env\n", "0123456789abcdef-env", "$VEIL_SERVE_TOKEN", ""},
		{"the file wins", good, "0123456789abcdef-env", "0123456789abcdef-file", "--token-file", ""},
		{"file readable by others", open, "", "", "", "--token-file"},
		{"short file", short, "", "", "", "5 characters"},
		{"short environment", "", "abc", "", "", "$VEIL_SERVE_TOKEN has 3 characters"},
		{"missing file", filepath.Join(dir, "none"), "", "", "", "--token-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from, err := ReadToken(tc.file, func(k string) string {
				if k != EnvToken {
					t.Errorf("read $%s", k)
				}
				return tc.env
			})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "0123456789abcdef") || (tc.env != "" && strings.Contains(err.Error(), tc.env)) {
					t.Errorf("the error shows the token: %v", err)
				}
				return
			}
			if err != nil || got != tc.want || from != tc.from {
				t.Errorf("ReadToken = %q from %q, %v; want %q from %q", got, from, err, tc.want, tc.from)
			}
		})
	}
}
