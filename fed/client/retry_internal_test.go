package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeClock is the retrier's time, advanced only by the fake join and
// the retrier's waits: the tests assert on what the retrier asked for,
// never on the wall clock, so a loaded machine cannot fail them.
type fakeClock struct {
	t     time.Time
	waits []time.Duration
}

func (c *fakeClock) Now() time.Time { return c.t }

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.waits = append(c.waits, d)
	c.t = c.t.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.t
	return ch
}

func explainTest(err error) error { return Explain("192.0.2.1:7001", "alice", err) }

// TestRetryWindowBoundsTheTotalTime: veil fed client --retry-for 3s gave
// up after 10.9 s (20 s against a listener that never answers): each
// attempt waited for the transport's 20 s connect timeout, and a wait
// between attempts could overrun the window. Every join's timeout and
// every wait is clipped to what is left of the window, so the client
// gives up when the window ends. The join behaves as a coordinator that
// holds connections open without answering: every attempt uses all the
// time it is given, up to hang (the transport's own connect timeout), and
// fails as unavailable.
func TestRetryWindowBoundsTheTotalTime(t *testing.T) {
	for _, tc := range []struct {
		name         string
		window, hang time.Duration
		wantTotal    time.Duration
	}{
		{"silent coordinator, 3s", 3 * time.Second, 20 * time.Second, 3 * time.Second},
		{"silent coordinator, 1m", time.Minute, 20 * time.Second, time.Minute},
		{"refused at once, 3.5s", 3500 * time.Millisecond, time.Millisecond, 3500 * time.Millisecond},
		// No window still tries once, for FirstJoinTimeout.
		{"silent coordinator, 0s", 0, 20 * time.Second, FirstJoinTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			start := clock.t
			var timeouts []time.Duration
			r := &retrier{
				join: func(ctx context.Context, timeout time.Duration) error {
					timeouts = append(timeouts, timeout)
					clock.t = clock.t.Add(min(timeout, tc.hang))
					if timeout < tc.hang {
						return status.Error(codes.DeadlineExceeded, "context deadline exceeded")
					}
					return status.Error(codes.Unavailable, "connection error: desc = \"transport: authentication handshake failed: context deadline exceeded\"")
				},
				follow:   func(context.Context) (bool, error) { return false, errors.New("not joined") },
				clock:    clock,
				explain:  explainTest,
				progress: func(string) {},
				window:   tc.window,
			}
			err := r.run(context.Background())
			var gave *GaveUpError
			if !errors.As(err, &gave) || gave.After != tc.window || !strings.Contains(err.Error(), "gave up after trying for "+tc.window.String()+": cannot reach the coordinator") {
				t.Fatalf("err = %v", err)
			}
			if total := clock.t.Sub(start); total != tc.wantTotal {
				t.Errorf("gave up after %s of the retrier's time, want %s (join timeouts %v, waits %v)", total, tc.wantTotal, timeouts, clock.waits)
			}
			// Each attempt was given at most what was left.
			used := time.Duration(0)
			for i, to := range timeouts {
				if left := tc.wantTotal - used; to > left || to <= 0 {
					t.Errorf("attempt %d: join timeout %s with %s left", i, to, left)
				}
				used += min(to, tc.hang)
				if i < len(clock.waits) {
					used += clock.waits[i]
				}
			}
			if tc.hang < time.Second && len(timeouts) < 4 {
				t.Errorf("a coordinator refusing at once was tried %d times in %s", len(timeouts), tc.window)
			}
		})
	}
}

// TestRetrierRejoinsAfterLosingTheCoordinator: following the stream is
// not bounded by the window, and losing the coordinator after it opens a
// new window; a break before the stream delivered anything, within the
// window, does not; a permanent error is not retried.
func TestRetrierRejoinsAfterLosingTheCoordinator(t *testing.T) {
	refused := status.Error(codes.Unavailable, "connection error: desc = \"transport: error while dialing: dial tcp 192.0.2.1:7001: connect: connection refused\"")
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	joins, follows := 0, 0
	r := &retrier{
		join: func(ctx context.Context, timeout time.Duration) error {
			joins++
			if timeout <= 0 || timeout > 3*time.Second {
				t.Errorf("join %d: timeout %s", joins, timeout)
			}
			return nil
		},
		follow: func(context.Context) (bool, error) {
			follows++
			clock.t = clock.t.Add(time.Hour) // a long run: not cut
			if follows == 1 {
				return true, refused
			}
			return true, nil
		},
		clock:    clock,
		explain:  explainTest,
		progress: func(string) {},
		window:   3 * time.Second,
	}
	if err := r.run(context.Background()); err != nil || joins != 2 || follows != 2 {
		t.Fatalf("err %v after %d joins and %d follows, want nil after 2 and 2", err, joins, follows)
	}
	// A stream that breaks at once, every time, is bounded by the window.
	joins = 0
	r.follow = func(context.Context) (bool, error) { clock.t = clock.t.Add(time.Millisecond); return false, refused }
	err := r.run(context.Background())
	var gave *GaveUpError
	if !errors.As(err, &gave) || joins < 2 || joins > 20 {
		t.Errorf("a stream breaking at once: %v after %d joins", err, joins)
	}
	// A permanent error is not retried.
	r.follow = func(context.Context) (bool, error) { return true, status.Error(codes.PermissionDenied, "not enrolled") }
	joins = 0
	if err := r.run(context.Background()); err == nil || !strings.Contains(err.Error(), "refused: not enrolled") || joins != 1 {
		t.Errorf("permanent error: %v after %d joins", err, joins)
	}
}
