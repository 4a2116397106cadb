package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/veil-privacy/veil/tagging"
)

// openPTY opens a pseudo-terminal pair through /dev/ptmx (no dependency
// beyond package syscall): the controller, which plays the keyboard and
// screen, and the terminal the program under test reads.
func openPTY(t *testing.T) (controller, tty *os.File) {
	t.Helper()
	c, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	var unlock int32
	if err := ioctl(c.Fd(), syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		t.Fatalf("unlocking the pseudo-terminal: %v", err)
	}
	var n uint32
	if err := ioctl(c.Fd(), syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		t.Fatalf("numbering the pseudo-terminal: %v", err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); tty.Close() })
	return c, tty
}

func ioctl(fd uintptr, req uint, arg unsafe.Pointer) error {
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, uintptr(req), uintptr(arg)); e != 0 {
		return e
	}
	return nil
}

// echoing reports whether the terminal echoes what is typed.
func echoing(t *testing.T, tty *os.File) bool {
	t.Helper()
	var st syscall.Termios
	if err := ioctl(tty.Fd(), syscall.TCGETS, unsafe.Pointer(&st)); err != nil {
		t.Fatal(err)
	}
	return st.Lflag&syscall.ECHO != 0
}

// screen collects what the program writes to the terminal.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.buf.String() }

// TestPassphrasePromptDoesNotEcho runs `veil library init` with no key file
// and no VEIL_PASSPHRASE on a pseudo-terminal, as a user at a keyboard: it
// asks twice, turns echo off before each answer is typed, and the screen
// never shows the passphrase; the library then opens with it. Two different
// answers are refused and create nothing.
func TestPassphrasePromptDoesNotEcho(t *testing.T) {
	bin := buildVeil(t)
	const secret = "typed-at-the-keyboard-42"
	env := []string{"VEIL_LIBRARY="}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VEIL_PASSPHRASE=") && !strings.HasPrefix(kv, "VEIL_LIBRARY=") {
			env = append(env, kv)
		}
	}
	// session runs veil init on a new terminal, typing each answer once
	// its prompt is shown and echo is off, and returns the exit status,
	// the screen and stdout.
	session := func(lib string, answers ...string) (int, string, string) {
		t.Helper()
		c, tty := openPTY(t)
		cmd := exec.Command(bin, "library", "init", "--library", lib,
			"--argon2-time", "1", "--argon2-memory", "8", "--argon2-threads", "1")
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, &out, tty
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		scr := &screen{}
		// The reader ends when the terminal has no writer left (the
		// controller then reads what is buffered, then fails with EIO).
		read := make(chan struct{})
		go func() {
			defer close(read)
			b := make([]byte, 256)
			for {
				n, err := c.Read(b)
				scr.mu.Lock()
				scr.buf.Write(b[:n])
				scr.mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
		prompts := []string{"Passphrase: ", "Passphrase again: "}
		for i, a := range answers {
			deadline := time.Now().Add(30 * time.Second)
			for strings.Count(scr.String(), prompts[i]) < 1 || echoing(t, tty) {
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					t.Fatalf("no %q prompt with echo off within 30 s (echo on: %v); the screen:\n%s", prompts[i], echoing(t, tty), scr)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if _, err := c.Write([]byte(a + "\n")); err != nil {
				t.Fatal(err)
			}
		}
		err := cmd.Wait()
		// Everything the program wrote is on the screen once the reader
		// has drained the terminal: close the test's end of it (the
		// program's is closed) and wait for the reader to finish, rather
		// than sleep and hope the reader has run by then.
		tty.Close()
		select {
		case <-read:
		case <-time.After(30 * time.Second):
			t.Fatalf("the screen was not drained within 30 s after the program exited; it shows:\n%s", scr)
		}
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, scr.String(), out.String()
		case errors.As(err, &ee):
			return ee.ExitCode(), scr.String(), out.String()
		}
		t.Fatal(err)
		return 0, "", ""
	}

	lib := filepath.Join(t.TempDir(), "lib")
	code, scr, out := session(lib, secret, secret)
	if code != 0 || !strings.Contains(out, "created the library") {
		t.Fatalf("veil library init on a terminal: exit %d, stdout %q, screen %q", code, out, scr)
	}
	if strings.Contains(scr, secret) || strings.Contains(scr, secret[:8]) {
		t.Errorf("the passphrase was echoed: the screen shows %q", scr)
	}
	if !strings.Contains(scr, "Passphrase: ") || !strings.Contains(scr, "Passphrase again: ") {
		t.Errorf("the screen %q lacks the two prompts", scr)
	}
	l, err := tagging.Open(lib, []byte(secret))
	if err != nil {
		t.Fatalf("the library does not open with the passphrase typed: %v", err)
	}
	l.Close()

	other := filepath.Join(t.TempDir(), "lib")
	code, scr, _ = session(other, secret, secret+"!")
	if code != 1 || !strings.Contains(scr, "the two passphrases typed differ") {
		t.Errorf("two different answers: exit %d, screen %q; want exit 1 and a clear message", code, scr)
	}
	if _, err := os.Stat(other); err == nil {
		t.Errorf("a refused init created %s", other)
	}
}
