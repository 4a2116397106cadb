package layering

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// simdKernels may import simd/archsimd: the numeric kernels are
// internal/vec's, and face/nets keeps the networks' own (docs/architecture.md).
func simdKernels(path string) bool { return path == "internal/vec" || under(path, "face/nets") }

// TestSIMDKernelsInVec fails when a package other than internal/vec and
// face/nets imports simd/archsimd directly: a kernel of its own, with its
// own CPU-feature switch, which is how fed/strategy's sum and fed/wire's
// norm left the AVX registers' upper halves dirty (every SSE instruction
// after them, SHA-NI's among them, then ran many times slower).
func TestSIMDKernelsInVec(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the layering check needs the go command: %v", err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(gobin, "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}", module+"/...")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	users := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, imports, ok := strings.Cut(line, "|")
		if !ok {
			t.Fatalf("go list: unexpected line %q", line)
		}
		path = strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
		for _, imp := range strings.Fields(imports) {
			if !under(imp, "simd") {
				continue
			}
			users++
			if !simdKernels(path) {
				t.Errorf("%s imports %s: numeric kernels belong in internal/vec (one CPU-feature switch, the AVX state cleared before scalar code)", path, imp)
			}
		}
	}
	if users == 0 && strings.Contains(goEnv(t, gobin, "GOEXPERIMENT"), "simd") {
		t.Error("no package imports simd/archsimd although GOEXPERIMENT=simd: the check would pass vacuously")
	}
}

func goEnv(t *testing.T, gobin, name string) string {
	t.Helper()
	out, err := exec.Command(gobin, "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}
