// Package progress prints a progress bar for long work on a terminal, and
// occasional plain lines when the output is not a terminal (logs, CI).
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Bar reports progress of a known number of steps. It is safe for
// concurrent use. A nil *Bar does nothing.
type Bar struct {
	mu       sync.Mutex
	w        io.Writer
	label    string
	total    int
	done     int
	start    time.Time
	last     time.Time
	terminal bool
	every    time.Duration
}

// New starts a bar writing to w (normally stderr). quiet disables it.
func New(w io.Writer, label string, total int, quiet bool) *Bar {
	if quiet || w == nil || total <= 0 {
		return nil
	}
	b := &Bar{w: w, label: label, total: total, start: time.Now(), every: 10 * time.Second}
	if IsTerminal(w) {
		b.terminal, b.every = true, 200*time.Millisecond
	}
	return b
}

// IsTerminal reports whether w is a terminal (a character device), where a
// line may be redrawn with a carriage return; a file or pipe gets plain
// lines instead.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Add records n more finished steps.
func (b *Bar) Add(n int) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done += n
	now := time.Now()
	if b.done < b.total && now.Sub(b.last) < b.every {
		return
	}
	b.last = now
	b.print(now)
}

func (b *Bar) print(now time.Time) {
	el := now.Sub(b.start)
	frac := float64(b.done) / float64(b.total)
	eta := "?"
	if b.done > 0 {
		eta = (time.Duration(float64(el)/frac) - el).Round(time.Second).String()
	}
	rate := float64(b.done) / el.Seconds()
	if b.terminal {
		const width = 30
		fill := int(frac * width)
		fmt.Fprintf(b.w, "\r%s [%s%s] %d/%d %.1f/s eta %s ", b.label, strings.Repeat("=", fill),
			strings.Repeat(" ", width-fill), b.done, b.total, rate, eta)
		return
	}
	fmt.Fprintf(b.w, "%s: %d/%d (%.0f%%) %.1f/s eta %s\n", b.label, b.done, b.total, 100*frac, rate, eta)
}

// Done finishes the bar's line.
func (b *Bar) Done() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.terminal {
		fmt.Fprintln(b.w)
	}
}
