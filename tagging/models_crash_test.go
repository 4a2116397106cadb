package tagging

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/veil-privacy/veil/tagging/psimodel"
)

// Environment of the child process of TestAdoptionCrash.
const (
	crashDirEnv   = "VEIL_TEST_ADOPT_CRASH_DIR"
	crashModelEnv = "VEIL_TEST_ADOPT_CRASH_MODEL"
)

// adoptionCrashChild switches the library between the identity and the
// model (each switch re-projects every face), printing a line after each committed switch, until killed.
func adoptionCrashChild(t *testing.T, dir string) {
	v, err := strconv.ParseInt(os.Getenv(crashModelEnv), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open(dir, []byte(testPass))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	for i := range 10000 {
		active, err := l.ActiveModel(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var d ModelDecision
		if active != v {
			d, err = l.UseModel(t.Context(), v)
		} else {
			d, err = l.RollbackModel(t.Context())
		}
		if err != nil || !d.Adopted {
			t.Fatalf("switch %d: %+v, %v", i, d, err)
		}
		fmt.Println("switched", i)
	}
}

// TestAdoptionCrash kills (SIGKILL) a process that keeps adopting and
// rolling back a model over a library of 1,200 faces (switching between
// the identity and a model, so both directions re-project every face), at
// several moments, and checks each time that the library opens (its
// integrity verified) in either the old or the new state, never a mix:
// every face projected by the active version, and every decision's row
// unchanged.
func TestAdoptionCrash(t *testing.T) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		adoptionCrashChild(t, dir)
		return
	}
	if testing.Short() {
		t.Skip("starts child processes")
	}
	dir := t.TempDir()
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	v := nuisanceWorld(t, l, 9, 8, 5, 4)
	for p := range 4 {
		var fs []NewFace
		for k := range 290 {
			fs = append(fs, NewFace{Box: Box{X: float64(k), Width: 1, Height: 1}, Score: 0.9, Source: Detected, Descriptor: testDescriptor(1000*p + k)})
		}
		path := fmt.Sprintf("/crowd%d.jpg", p)
		if _, _, err := l.AddPhoto(PhotoRecord{Path: path, SHA256: sha256.Sum256([]byte(path)), Size: 1, Width: 9, Height: 9}, fs); err != nil {
			t.Fatal(err)
		}
	}
	m := removeDirection(v)
	identity := importModel(t, l, psimodel.Identity(128))
	if d, err := l.UseModel(t.Context(), identity); err != nil || !d.Adopted {
		t.Fatalf("adopting the identity: %+v, %v", d, err)
	}
	model := importModel(t, l, m)
	raw := faceDescriptors(t, l, true)
	decisions := decisionRows(t, l)
	l.Close()

	for round, delay := range []time.Duration{30 * time.Millisecond, 170 * time.Millisecond, 230 * time.Millisecond, 400 * time.Millisecond, 470 * time.Millisecond, 900 * time.Millisecond} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestAdoptionCrash$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashModelEnv+"="+strconv.FormatInt(model, 10))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 100000)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		select {
		case s := <-lines:
			if s != "ready" {
				t.Fatalf("child said %q", s)
			}
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			t.Fatal("the child did not start")
		}
		time.Sleep(delay)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		switches := 0
		for s := range lines {
			if strings.HasPrefix(s, "switched") {
				switches++
			} else if s != "" {
				t.Logf("child: %s", s)
			}
		}

		l, err := Open(dir, []byte(testPass))
		if err != nil {
			t.Fatalf("round %d: the library after kill -9: %v", round, err)
		}
		active, err := l.ActiveModel(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		got := faceDescriptors(t, l, false)
		mixed := 0
		for id, x := range raw {
			want := x
			if active == model {
				want, _ = m.Apply(x)
			}
			if !slices.Equal(got[id], want) {
				mixed++
			}
		}
		if mixed > 0 || (active != identity && active != model) {
			t.Fatalf("round %d: active %d with %d of %d faces in the other state", round, active, mixed, len(raw))
		}
		if decisionRows(t, l) != decisions {
			t.Fatalf("round %d: a decision's row changed", round)
		}
		t.Logf("round %d: killed after %v and %d committed switches; library in state %d, consistent", round, delay, switches, active)
		l.Close()
	}
}
