//go:build unix

package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/veil-privacy/veil/tagging"
)

// lockedBuffer is a bytes.Buffer safe to write from a running command and
// read from the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLibraryAddWaitsForAnotherRun: while another process holds the
// library's indexing lock (here the test, as pid 4242 would), veil library
// add says who is indexing and waits, then runs when the lock is released.
func TestLibraryAddWaitsForAnotherRun(t *testing.T) {
	lib := initTestLibrary(t)
	f, err := os.OpenFile(filepath.Join(lib, tagging.IndexLockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("4242\n"); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main([]string{"library", "add", "--library", lib, "--quiet", t.TempDir()}, strings.NewReader(""), &stdout, &stderr)
	}()
	want := "another veil library add is indexing this library (pid 4242); waiting for it to finish"
	for i := 0; !strings.Contains(stderr.String(), want); i++ {
		select {
		case code := <-done:
			t.Fatalf("library add did not wait: exit %d, %q %q", code, stdout.String(), stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if i > 1200 {
			t.Fatalf("no word of waiting after a minute: %q", stderr.String())
		}
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(stdout.String(), "found 0 photos") {
			t.Fatalf("after the wait: exit %d, %q %q", code, stdout.String(), stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("library add still waiting a minute after the lock was released")
	}
}
