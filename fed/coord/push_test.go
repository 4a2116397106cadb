package coord_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/wire"
)

// watchClock is a client's clock that counts the timers the client starts.
// Its timers fire after the real duration, or never if frozen.
type watchClock struct {
	frozen bool
	afters atomic.Int64
}

func (c *watchClock) Now() time.Time { return time.Now() }

func (c *watchClock) After(d time.Duration) <-chan time.Time {
	c.afters.Add(1)
	if c.frozen {
		return nil
	}
	return time.After(d)
}

func (h *harness) clientWith(t *testing.T, name string, tr client.Trainer, clock client.Clock) *client.Client {
	t.Helper()
	c, err := client.New(client.Options{Addr: h.addr, Creds: h.creds(t, name), Policy: client.DefaultPolicy(dp.Budget{Epsilon: 100, Delta: 1e-5}),
		Dir: filepath.Join(h.dir, "clients", name), LedgerDir: filepath.Join(h.dir, "clients", name, "ledgers"), DataSet: name, Trainer: tr, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// runAll runs clients until each returns, and fails on any error.
func runAll(t *testing.T, cs map[string]*client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(cs))
	for name, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestTasksArePushedAndRoundsCloseOnTheirLastUpdate runs two rounds of
// two clients with nothing that ticks: the coordinator's loop would step
// on its own only once an hour, and the clients' clocks count every timer
// they start and fire none. So a client that polled, or waited for a
// retry, would never learn of a round, and a round that closed or opened
// at the loop's tick would never do so. Both rounds run to the end: each
// task was pushed the moment its round opened, each round closed in the
// loop step that committed its last update (and the next one opened in
// the same step), and the clients started no timer at all.
func TestTasksArePushedAndRoundsCloseOnTheirLastUpdate(t *testing.T) {
	o := options(filepath.Join(t.TempDir(), "state.db"), 2)
	o.MinAvailable, o.MinUpdates, o.RoundTimeout = 2, 2, anHour
	h := startHarnessAt(t, o, filepath.Join(t.TempDir(), "pki"), "127.0.0.1:0", func(co *coord.Coordinator) {
		coord.SetLoopTick(co, time.Hour)
	})
	clocks := map[string]*watchClock{"client-1": {frozen: true}, "client-2": {frozen: true}}
	runAll(t, map[string]*client.Client{
		"client-1": h.clientWith(t, "client-1", fixedTrainer{0.1, 1, 0.1}, clocks["client-1"]),
		"client-2": h.clientWith(t, "client-2", fixedTrainer{0.3, 1, 0.1}, clocks["client-2"]),
	})
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	for name, c := range clocks {
		if n := c.afters.Load(); n != 0 {
			t.Errorf("%s started %d timers while its stream was healthy", name, n)
		}
	}
	db, err := coord.OpenStatus(h.state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := coord.ReadStatus(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Rounds) != 2 || st.Rounds[0].State != "done" || st.Rounds[1].State != "done" || st.Rounds[0].Updates != 2 || st.Rounds[1].Updates != 2 {
		t.Fatalf("rounds %v", st.Rounds)
	}
}

// gatedTrainer trains once released, and counts its runs.
type gatedTrainer struct {
	fixedTrainer
	started chan struct{}
	release chan struct{}
	once    sync.Once
	runs    atomic.Int64
}

func (g *gatedTrainer) Train(ctx context.Context, model wire.Weights, task *fedpb.RoundConfig, plan *fedpb.DPParams) (client.Update, error) {
	g.runs.Add(1)
	g.once.Do(func() { close(g.started) })
	<-g.release
	return g.fixedTrainer.Train(ctx, model, task, plan)
}

// TestClientReconnectsAndResumesTheRound: the coordinator goes away while
// a client trains in an open round; the client's update cannot be sent and
// its stream of work breaks; it reconnects with backoff until a new
// coordinator process serves the same state file on the same address,
// which pushes it the round again; the client sends the update it trained
// (training once, charged once), and the round closes with both updates.
func TestClientReconnectsAndResumesTheRound(t *testing.T) {
	o := options(filepath.Join(t.TempDir(), "state.db"), 1)
	o.MinAvailable, o.MinUpdates, o.RoundTimeout = 2, 2, anHour
	dir := filepath.Join(t.TempDir(), "pki")
	h := startHarness(t, o, dir)
	gated := &gatedTrainer{fixedTrainer: fixedTrainer{0.1, 1, 0.1}, started: make(chan struct{}), release: make(chan struct{})}
	clock := &watchClock{}
	c1 := h.clientWith(t, "client-1", gated, clock)
	c2 := h.clientWith(t, "client-2", fixedTrainer{0.3, 1, 0.1}, &watchClock{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		runAll(t, map[string]*client.Client{"client-1": c1, "client-2": c2})
	}()
	select {
	case <-gated.started:
	case <-time.After(3 * time.Minute):
		t.Fatal("client-1 was never given its round")
	}
	h.stop()
	close(gated.release)
	// client-1 finds the coordinator gone and starts backing off.
	for deadline := time.Now().Add(3 * time.Minute); clock.afters.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("client-1 never tried to reconnect")
		}
	}
	h2 := startHarnessAt(t, o, dir, h.addr, nil)
	<-done
	if err := <-h2.done; err != nil {
		t.Fatal(err)
	}
	if n := gated.runs.Load(); n != 1 {
		t.Fatalf("client-1 trained %d times, want once", n)
	}
	s, err := c1.Spent()
	if err != nil {
		t.Fatal(err)
	}
	if want := chargeFor(t, gated.fixedTrainer, 6, 1); math.Abs(s.Epsilon-want) > 1e-9 {
		t.Fatalf("client-1 spent ε = %g, want one round's %g", s.Epsilon, want)
	}
	db, err := coord.OpenStatus(h2.state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := coord.ReadStatus(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Rounds) != 1 || st.Rounds[0].State != "done" || st.Rounds[0].Updates != 2 {
		t.Fatalf("rounds %v", st.Rounds)
	}
}
