package cli

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// fakeClock is the retrier's time, advanced only by the fake join and
// sleep: the test asserts on what the retrier asked for, never on the wall
// clock, so a loaded machine cannot fail it.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// retrierFor returns a retrier over clock whose join behaves as a
// coordinator that holds connections open without answering: every
// attempt uses all the time it is given, up to hang (the transport's own
// connect timeout), and fails as unavailable. It records each timeout.
func retrierFor(clock *fakeClock, retryFor, hang time.Duration, timeouts *[]time.Duration, sleeps *[]time.Duration) *retrier {
	return &retrier{
		join: func(ctx context.Context, timeout time.Duration) error {
			*timeouts = append(*timeouts, timeout)
			clock.t = clock.t.Add(min(timeout, hang))
			if timeout < hang {
				return grpcstatus.Error(codes.DeadlineExceeded, "context deadline exceeded")
			}
			return grpcstatus.Error(codes.Unavailable, "connection error: desc = \"transport: authentication handshake failed: context deadline exceeded\"")
		},
		serve: func(context.Context) error { return errors.New("not joined") },
		now:   clock.now,
		sleep: func(_ context.Context, d time.Duration) error {
			*sleeps = append(*sleeps, d)
			clock.t = clock.t.Add(d)
			return nil
		},
		explain:  func(err error) error { return explainCoordinatorError("192.0.2.1:7001", "alice", err) },
		progress: func(string) {},
		retryFor: retryFor,
	}
}

// TestRetryForBoundsTheTotalTime: veil fed client --retry-for 3s gave up
// after 10.9 s (20 s against a listener that never answers): each attempt
// waited for the transport's 20 s connect timeout, and a wait between
// attempts could overrun the window. Now every join's timeout and every
// wait is clipped to what is left of the window, so the client gives up
// when the window ends.
func TestRetryForBoundsTheTotalTime(t *testing.T) {
	for _, tc := range []struct {
		name           string
		retryFor, hang time.Duration
		wantTotal      time.Duration
	}{
		{"silent coordinator, 3s", 3 * time.Second, 20 * time.Second, 3 * time.Second},
		{"silent coordinator, 1m", time.Minute, 20 * time.Second, time.Minute},
		{"refused at once, 3.5s", 3500 * time.Millisecond, time.Millisecond, 3500 * time.Millisecond},
		// --retry-for 0 still tries once, for firstJoinTimeout.
		{"silent coordinator, 0s", 0, 20 * time.Second, firstJoinTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			start := clock.t
			var timeouts, sleeps []time.Duration
			r := retrierFor(clock, tc.retryFor, tc.hang, &timeouts, &sleeps)
			err := r.run(context.Background())
			if err == nil || !strings.Contains(err.Error(), "gave up after trying for "+tc.retryFor.String()+" (--retry-for): cannot reach the coordinator") {
				t.Fatalf("err = %v", err)
			}
			if total := clock.t.Sub(start); total != tc.wantTotal {
				t.Errorf("gave up after %s of the retrier's time, want %s (join timeouts %v, waits %v)", total, tc.wantTotal, timeouts, sleeps)
			}
			// Each attempt was given at most what was left.
			used := time.Duration(0)
			for i, to := range timeouts {
				if left := tc.wantTotal - used; to > left || to <= 0 {
					t.Errorf("attempt %d: join timeout %s with %s left", i, to, left)
				}
				used += min(to, tc.hang)
				if i < len(sleeps) {
					used += sleeps[i]
				}
			}
			if tc.hang < time.Second && len(timeouts) < 4 {
				t.Errorf("a coordinator refusing at once was tried %d times in %s", len(timeouts), tc.retryFor)
			}
		})
	}
}

// TestRetrierRejoinsAfterLosingTheCoordinator: serving is not bounded by
// the window, and losing the coordinator after joining opens a new one.
func TestRetrierRejoinsAfterLosingTheCoordinator(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	joins, serves := 0, 0
	r := &retrier{
		join: func(ctx context.Context, timeout time.Duration) error {
			joins++
			if timeout <= 0 || timeout > 3*time.Second {
				t.Errorf("join %d: timeout %s", joins, timeout)
			}
			return nil
		},
		serve: func(context.Context) error {
			serves++
			clock.t = clock.t.Add(time.Hour) // a long run: not cut
			if serves == 1 {
				return grpcstatus.Error(codes.Unavailable, "connection error: desc = \"transport: error while dialing: dial tcp 192.0.2.1:7001: connect: connection refused\"")
			}
			return nil
		},
		now:      clock.now,
		sleep:    func(_ context.Context, d time.Duration) error { clock.t = clock.t.Add(d); return nil },
		explain:  func(err error) error { return explainCoordinatorError("192.0.2.1:7001", "alice", err) },
		progress: func(string) {},
		retryFor: 3 * time.Second,
	}
	if err := r.run(context.Background()); err != nil || joins != 2 || serves != 2 {
		t.Fatalf("err %v after %d joins and %d serves, want nil after 2 and 2", err, joins, serves)
	}
	// A permanent error is not retried.
	r.serve = func(context.Context) error {
		return grpcstatus.Error(codes.PermissionDenied, "not enrolled")
	}
	joins = 0
	if err := r.run(context.Background()); err == nil || !strings.Contains(err.Error(), "refused: not enrolled") || joins != 1 {
		t.Errorf("permanent error: %v after %d joins", err, joins)
	}
}
