package coord_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/wire"
)

// failingTrainer plans like fixedTrainer but its training fails, or with
// stall set blocks until its context ends (the owner stopping the client
// mid-round), after telling started.
type failingTrainer struct {
	fixedTrainer
	stall   bool
	started chan struct{}
}

// errDiskFull is the trainer's failure; its text must not reach the
// coordinator.
var errDiskFull = errors.New("no space left on /home/alice/photos")

func (f failingTrainer) Train(ctx context.Context, _ wire.Weights, _ *fedpb.RoundConfig, _ *fedpb.DPParams) (client.Update, error) {
	if !f.stall {
		return client.Update{}, errDiskFull
	}
	close(f.started)
	<-ctx.Done()
	return client.Update{}, ctx.Err()
}

// TestRoundStopsWaitingForAClientWhoseTrainingFails: a selected client
// whose training fails, or whose owner stops it while it trains, declines
// the round ("training", "stopped"), so the coordinator closes the round
// with the other client's update at once, not at its deadline an hour
// away; the withdrawal is recorded and logged with that reason and
// nothing of the trainer's error.
func TestRoundStopsWaitingForAClientWhoseTrainingFails(t *testing.T) {
	tr := fixedTrainer{0.1, 1, 0.1}
	for _, c := range []struct {
		name   string
		stall  bool
		reason string
	}{
		{"training fails", false, "training"},
		{"owner stops it", true, "stopped"},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := &syncBuffer{}
			o := options(filepath.Join(t.TempDir(), "state.db"), 1)
			o.MinAvailable, o.MinUpdates, o.RoundTimeout = 2, 1, anHour
			o.Logger = slog.New(slog.NewTextHandler(log, nil))
			h := startHarness(t, o, filepath.Join(t.TempDir(), "pki"))
			good := h.client(t, "client-1", tr, 100)
			ft := failingTrainer{fixedTrainer: tr, stall: c.stall, started: make(chan struct{})}
			failing := h.client(t, "client-2", ft, 100)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			goodErr := make(chan error, 1)
			go func() { goodErr <- good.Run(ctx) }()
			fctx, stop := context.WithCancel(ctx)
			defer stop()
			if c.stall {
				go func() {
					select {
					case <-ft.started:
						stop()
					case <-ctx.Done():
					}
				}()
			}
			err := failing.Run(fctx)
			switch {
			case c.stall && !errors.Is(err, context.Canceled):
				t.Fatalf("the stopped client returned %v, want it stopped", err)
			case !c.stall && (!errors.Is(err, client.ErrTrainingFailed) || !errors.Is(err, errDiskFull)):
				t.Fatalf("the failing client returned %v, want its training's failure", err)
			}
			waitRun(t, h, log)
			if err := <-goodErr; err != nil {
				t.Fatalf("client-1: %v", err)
			}
			st, updates, reason, withdrawn := roundRow(t, h.state, "client-2")
			if st != "done" || updates != 1 || withdrawn != c.reason {
				t.Fatalf("round 1 is %s with %d updates (%q), client-2's withdrawal %q; want done with client-1's update and %q", st, updates, reason, withdrawn, c.reason)
			}
			l := log.String()
			if !strings.Contains(l, `msg="client withdrew from the round" round=1 client=client-2 reason=`+c.reason) {
				t.Fatalf("the coordinator's log does not record the withdrawal with its reason:\n%s", l)
			}
			if strings.Contains(l, "alice") || strings.Contains(l, "space left") {
				t.Fatalf("the trainer's error reached the coordinator's log:\n%s", l)
			}
		})
	}
}
