package client

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/veil-privacy/veil/fed/fedpb"
)

// DefaultReconnectFor is how long a client keeps reconnecting to an
// unreachable coordinator by default.
const DefaultReconnectFor = 2 * time.Minute

// FirstJoinTimeout is the least time the first attempt to join may take,
// so that a client told not to retry (ReconnectFor negative) still tries
// once.
const FirstJoinTimeout = 2 * time.Second

// The reconnection backoff's bounds.
const (
	minBackoff = 200 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// GaveUpError is Run's error when the coordinator stayed unreachable for
// the whole retry window (Options.ReconnectFor).
type GaveUpError struct {
	// After is the retry window that passed.
	After time.Duration
	// Err is the last failure, worded by Explain.
	Err error
}

func (e *GaveUpError) Error() string {
	return fmt.Sprintf("gave up after trying for %s: %v", e.After, e.Err)
}

func (e *GaveUpError) Unwrap() error { return e.Err }

// Run joins the coordinator and takes part in rounds until the coordinator
// says the run is over (nil), the budget is exhausted (ErrBudgetExhausted,
// wrapped), the owner's policy refuses a round (ErrPolicy, wrapped), a
// permanent error, or ctx ends. Errors reaching the coordinator are worded
// for the user (Explain).
//
// The client holds one stream to the coordinator (Subscribe) and waits on
// it: the coordinator pushes each round's task the moment the round
// opens, so the client never polls and starts no timer while the stream is
// healthy. When the coordinator is unreachable (restarting, the network
// down) or goes away mid-call, the client joins again and reopens the
// stream, with backoff (200 ms doubling to 5 s, with jitter), within a
// retry window of ReconnectFor: the window opens at the first attempt to
// join, and again when a stream breaks that delivered work or outlived the
// window, and bounds the whole wait, each
// attempt's included (a coordinator that accepts connections but never
// answers costs ReconnectFor, not a connect timeout per attempt). When it
// has passed, Run returns a *GaveUpError. A round still open is pushed
// again after a reconnection, and its update, trained once, is sent again.
// A certificate the other side refuses is not retried, though gRPC calls
// it unavailable.
func (c *Client) Run(ctx context.Context) error {
	r := retrier{
		join: func(ctx context.Context, timeout time.Duration) error {
			jctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			return c.join(jctx)
		},
		follow:   c.follow,
		clock:    c.o.Clock,
		explain:  func(err error) error { return Explain(c.o.Addr, c.o.Name, err) },
		progress: c.o.Progress,
		window:   max(c.o.ReconnectFor, 0),
	}
	return r.run(ctx)
}

// join joins the coordinator.
func (c *Client) join(ctx context.Context) error {
	j, err := c.api.Join(ctx, &fedpb.JoinRequest{ProtocolVersion: fedpb.ProtocolVersion,
		BudgetEpsilon: c.o.Policy.Budget.Epsilon, BudgetDelta: c.o.Policy.Budget.Delta, PrivacyUnit: c.o.Policy.Unit})
	if err != nil {
		return fmt.Errorf("client: joining: %w", err)
	}
	c.id = j.GetClientId()
	c.o.Logger.Info("joined", "client", c.id)
	return nil
}

// retrier is Run's retry policy, apart from the network so that its time
// can be simulated: it joins, then follows the stream of work, and after a
// transient failure joins again within a retry window (see Run). Every
// join is bounded by what is left of the window, and so is every wait
// between attempts. Following a stream, once joined, is not bounded.
type retrier struct {
	// join joins, waiting at most timeout.
	join func(ctx context.Context, timeout time.Duration) error
	// follow takes part in rounds after a join; healthy says whether the
	// stream delivered a message before err (its break opens a new
	// window, as does one after the window's end).
	follow func(ctx context.Context) (healthy bool, err error)
	clock  Clock
	// explain words an error for the user; a permanent one (see
	// Permanent) is not retried.
	explain  func(error) error
	progress func(string)
	window   time.Duration
}

func (r *retrier) run(ctx context.Context) error {
	var end time.Time // the window's end; zero: not in a window
	backoff := minBackoff
	for {
		if end.IsZero() {
			end = r.clock.Now().Add(max(r.window, FirstJoinTimeout))
		}
		err := r.join(ctx, end.Sub(r.clock.Now()))
		if err == nil {
			var healthy bool
			healthy, err = r.follow(ctx)
			if err == nil || ctx.Err() != nil {
				return err
			}
			if healthy || !r.clock.Now().Before(end) {
				// Served, then lost: a new window from now.
				end, backoff = r.clock.Now().Add(r.window), minBackoff
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		xerr := r.explain(err)
		if !transient(err) || Permanent(xerr) {
			return xerr
		}
		left := end.Sub(r.clock.Now())
		if left <= 0 {
			return &GaveUpError{After: r.window, Err: xerr}
		}
		// ±20% of jitter (not privacy noise), so that clients cut off
		// together do not all come back in the same instant.
		wait := min(time.Duration(float64(backoff)*(0.8+0.4*mrand.Float64())), left)
		r.progress(fmt.Sprintf("%v; retrying in %s", xerr, wait.Round(time.Millisecond)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.clock.After(wait):
		}
		if end.Sub(r.clock.Now()) <= 0 {
			return &GaveUpError{After: r.window, Err: xerr}
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// transient reports whether err is worth retrying: the coordinator is
// unreachable, did not answer in time, went away mid-call or ended the
// stream of work before the run was over.
func transient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return errors.Is(err, errStreamEnded)
}

// errStreamEnded is a stream the coordinator ended without saying the run
// is over (it is shutting down).
var errStreamEnded = errors.New("the coordinator ended the stream of work before the run was over")
