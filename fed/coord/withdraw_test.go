package coord_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
)

// syncBuffer is a log sink safe for the coordinator's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// anHour is the round deadline of these tests: each has a safety net of
// three minutes (the harness's), so a test that passes proves the round
// closed without waiting for its deadline.
const anHour = time.Hour

// waitRun waits for the coordinator's loop to return, which it does once
// its only round has closed.
func waitRun(t *testing.T, h *harness, log *syncBuffer) {
	t.Helper()
	if err := <-h.done; err != nil {
		t.Fatalf("the coordinator's loop: %v (the round was still waiting for a client that had left)\n%s", err, log)
	}
}

// roundRow reads round 1 and the withdrawal recorded for a client.
func roundRow(t *testing.T, state, who string) (st string, updates int, reason, withdrawn string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+state+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRow(`SELECT state, updates, reason FROM rounds WHERE round = 1`).Scan(&st, &updates, &reason); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT withdrawn FROM round_clients WHERE round = 1 AND client = ?`, who).Scan(&withdrawn); err != nil {
		t.Fatal(err)
	}
	return st, updates, reason, withdrawn
}

// withdrawals is an Observer that records the withdrawals it is told of.
type withdrawals struct {
	mu      sync.Mutex
	reasons []string
}

func (w *withdrawals) RoundClosed(string, time.Duration, time.Duration) {}
func (w *withdrawals) UpdateAccepted(string, int, float64)              {}
func (w *withdrawals) UpdateRefused(string)                             {}
func (w *withdrawals) BytesOut(int)                                     {}

func (w *withdrawals) ClientWithdrew(reason string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reasons = append(w.reasons, reason)
}

func (w *withdrawals) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.reasons)
}

// round1Withdrawals is the withdrawals round 1 of st lists.
func round1Withdrawals(t *testing.T, st *fedpb.StatusResponse) []*fedpb.Withdrawal {
	t.Helper()
	for _, r := range st.GetRounds() {
		if r.GetRound() == 1 {
			return r.GetWithdrawals()
		}
	}
	t.Fatalf("the status has no round 1: %v", st.GetRounds())
	return nil
}

// localStatus reads the status from the state file, as veil fed status
// --state does.
func localStatus(t *testing.T, state string) *fedpb.StatusResponse {
	t.Helper()
	db, err := coord.OpenStatus(state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := coord.ReadStatus(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestRoundStopsWaitingForAClientThatDeclines: a selected client that
// refuses the round (a setting of its owner's policy, or its budget) tells
// the coordinator, which logs the reason and closes the round as soon as
// the other client has answered, not at the deadline an hour away; with
// too few updates left the round fails at once. The refusing client's
// ledger is unchanged. The status, from the state file and over the
// network, lists the withdrawal with its reason in the round (to the
// operator, and to the client itself, never to another client), and the
// observer is told of it once.
func TestRoundStopsWaitingForAClientThatDeclines(t *testing.T) {
	tr := fixedTrainer{0.1, 1, 0.1}
	one := chargeFor(t, tr, 6, 1)
	for _, c := range []struct {
		name       string
		policy     func(p *client.Policy)
		minUpdates int
		reason     string
		state      string
		wantErr    error
	}{
		{"policy", func(p *client.Policy) { p.MaxClip = 0.5 }, 1, "policy: clip", "done", client.ErrPolicy},
		{"budget", func(p *client.Policy) { p.Budget.Epsilon = one / 2 }, 1, "budget", "done", client.ErrBudgetExhausted},
		{"too few left", func(p *client.Policy) { p.MaxClip = 0.5 }, 2, "policy: clip", "failed", client.ErrPolicy},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := &syncBuffer{}
			o := options(filepath.Join(t.TempDir(), "state.db"), 1)
			o.MinAvailable, o.MinUpdates, o.RoundTimeout = 2, c.minUpdates, anHour
			o.Logger = slog.New(slog.NewTextHandler(log, nil))
			obs := &withdrawals{}
			o.Metrics = obs
			h := startHarness(t, o, filepath.Join(t.TempDir(), "pki"))
			good := h.client(t, "client-1", tr, 100)
			p := client.DefaultPolicy(dp.Budget{Epsilon: 100, Delta: 1e-5})
			c.policy(&p)
			dir := filepath.Join(h.dir, "clients", "client-2")
			refuser, err := client.New(client.Options{Addr: h.addr, Creds: h.creds(t, "client-2"), Policy: p, Dir: dir,
				LedgerDir: filepath.Join(dir, "ledgers"), DataSet: "client-2", Trainer: tr})
			if err != nil {
				t.Fatal(err)
			}
			defer refuser.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			goodErr := make(chan error, 1)
			go func() { goodErr <- good.Run(ctx) }()
			if err := refuser.Run(ctx); !errors.Is(err, c.wantErr) {
				t.Fatalf("the refusing client returned %v, want %v", err, c.wantErr)
			}
			waitRun(t, h, log)
			if err := <-goodErr; err != nil {
				t.Fatalf("client-1: %v", err)
			}
			st, updates, reason, withdrawn := roundRow(t, h.state, "client-2")
			if st != c.state || withdrawn != c.reason {
				t.Fatalf("round 1 is %s (%d updates, %q) with client-2's withdrawal %q; want %s and %q", st, updates, reason, withdrawn, c.state, c.reason)
			}
			if c.state == "done" && updates != 1 {
				t.Fatalf("round 1 aggregated %d updates, want client-1's only", updates)
			}
			if c.state == "failed" && !strings.Contains(reason, "withdrew") {
				t.Fatalf("the failed round's reason %q does not say a client withdrew", reason)
			}
			want := c.reason
			if strings.Contains(want, " ") {
				want = strconv.Quote(want)
			}
			if l := log.String(); !strings.Contains(l, `msg="client withdrew from the round" round=1 client=client-2 reason=`+want) {
				t.Fatalf("the coordinator's log does not record the withdrawal with its reason:\n%s", l)
			}
			if s, _ := refuser.Spent(); s.Epsilon != 0 {
				t.Fatalf("the refusing client's ledger holds ε = %g", s.Epsilon)
			}
			wantW := &fedpb.Withdrawal{Client: "client-2", Reason: c.reason}
			remote := func(name string) *fedpb.StatusResponse {
				st, err := askStatus(ctx, h.api(t, name))
				if err != nil {
					t.Fatalf("%s asking the status: %v", name, err)
				}
				return st
			}
			for name, st := range map[string]*fedpb.StatusResponse{"the state file": localStatus(t, h.state),
				"the operator's": remote("operator"), "client-2's own": remote("client-2")} {
				if got := round1Withdrawals(t, st); len(got) != 1 || !proto.Equal(got[0], wantW) {
					t.Errorf("round 1 in %s status lists withdrawals %v, want [%v]", name, got, wantW)
				}
			}
			if got := round1Withdrawals(t, remote("client-1")); len(got) != 0 {
				t.Errorf("client-1's status tells of other clients' withdrawals: %v", got)
			}
			if got := obs.seen(); !slices.Equal(got, []string{c.reason}) {
				t.Errorf("the observer was told of withdrawals %q, want [%q]", got, c.reason)
			}
		})
	}
}

// TestRoundStopsWaitingForARevokedClient: a client selected for the open
// round whose certificate is then revoked, and which never calls again, is
// waited for no more: the round closes with the other client's update,
// not at the deadline an hour away, and the withdrawal is recorded.
func TestRoundStopsWaitingForARevokedClient(t *testing.T) {
	log := &syncBuffer{}
	o := options(filepath.Join(t.TempDir(), "state.db"), 1)
	o.MinAvailable, o.MinUpdates, o.RoundTimeout = 2, 1, anHour
	o.Logger = slog.New(slog.NewTextHandler(log, nil))
	h := startHarness(t, o, filepath.Join(t.TempDir(), "pki"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(h.creds(t, "client-2")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gone := fedpb.NewCoordinatorClient(conn)
	if _, err := gone.Join(ctx, &fedpb.JoinRequest{ProtocolVersion: fedpb.ProtocolVersion, BudgetEpsilon: 100, BudgetDelta: 1e-5, PrivacyUnit: "identity"}); err != nil {
		t.Fatal(err)
	}
	good := h.client(t, "client-1", fixedTrainer{0.1, 1, 0.1}, 100)
	goodErr := make(chan error, 1)
	go func() { goodErr <- good.Run(ctx) }()
	// client-2 learns it is selected, is revoked, and is heard of no more.
	for {
		r, err := gone.Poll(ctx, &fedpb.PollRequest{ProtocolVersion: fedpb.ProtocolVersion})
		if err != nil {
			t.Fatal(err)
		}
		if r.GetTask() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := h.ca.Revoke("client-2"); err != nil {
		t.Fatal(err)
	}
	waitRun(t, h, log)
	if err := <-goodErr; err != nil {
		t.Fatalf("client-1: %v", err)
	}
	st, updates, _, withdrawn := roundRow(t, h.state, "client-2")
	if st != "done" || updates != 1 || withdrawn != coord.ReasonRevoked {
		t.Fatalf("round 1 is %s with %d updates and client-2's withdrawal %q; want done, 1 and %q", st, updates, withdrawn, coord.ReasonRevoked)
	}
	if !strings.Contains(log.String(), `client=client-2 reason=revoked`) {
		t.Fatalf("the coordinator's log does not record the revoked client:\n%s", log)
	}
	// A revoked client cannot decline (nor do anything else).
	_, err = gone.Decline(ctx, &fedpb.DeclineRequest{ProtocolVersion: fedpb.ProtocolVersion, Round: 1, Reason: "budget"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a revoked client's Decline answered %v", err)
	}
}

// TestDeclineRefusesWhatItCannotRecord: a decline's reason is held to a
// small alphabet (it is logged), and a client can decline only a round it
// is selected for and not yet counted in; anything else is refused and
// recorded nowhere.
func TestDeclineRefusesWhatItCannotRecord(t *testing.T) {
	o := options(filepath.Join(t.TempDir(), "state.db"), 1)
	o.MinAvailable, o.MinUpdates, o.RoundTimeout = 1, 1, anHour
	h := startHarness(t, o, filepath.Join(t.TempDir(), "pki"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(h.creds(t, "client-1")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := fedpb.NewCoordinatorClient(conn)
	decline := func(round uint64, reason string) error {
		_, err := api.Decline(ctx, &fedpb.DeclineRequest{ProtocolVersion: fedpb.ProtocolVersion, Round: round, Reason: reason})
		return err
	}
	if err := decline(1, "budget"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a decline before joining answered %v", err)
	}
	if _, err := api.Join(ctx, &fedpb.JoinRequest{ProtocolVersion: fedpb.ProtocolVersion, BudgetEpsilon: 100, BudgetDelta: 1e-5, PrivacyUnit: "identity"}); err != nil {
		t.Fatal(err)
	}
	var task *fedpb.RoundConfig
	for task == nil {
		r, err := api.Poll(ctx, &fedpb.PollRequest{ProtocolVersion: fedpb.ProtocolVersion})
		if err != nil {
			t.Fatal(err)
		}
		task = r.GetTask()
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range []struct {
		round  uint64
		reason string
		code   codes.Code
	}{
		{task.Round, "", codes.InvalidArgument},
		{task.Round, "Budget", codes.InvalidArgument},
		{task.Round, "budget\nlevel=ERROR msg=forged", codes.InvalidArgument},
		{task.Round, " budget", codes.InvalidArgument},
		{task.Round, strings.Repeat("a", 65), codes.InvalidArgument},
		{task.Round + 1, "budget", codes.FailedPrecondition},
	} {
		if err := decline(c.round, c.reason); status.Code(err) != c.code {
			t.Errorf("decline of round %d for %q answered %v, want %v", c.round, c.reason, err, c.code)
		}
	}
	if _, _, _, w := roundRow(t, h.state, "client-1"); w != "" {
		t.Fatalf("refused declines recorded a withdrawal %q", w)
	}
	// The genuine decline ends the round (its only client withdrew).
	if err := decline(task.Round, "policy: noise multiplier"); err != nil {
		t.Fatal(err)
	}
	waitRun(t, h, &syncBuffer{})
	if st, _, _, w := roundRow(t, h.state, "client-1"); st != "failed" || w != "policy: noise multiplier" {
		t.Fatalf("round 1 is %s with the withdrawal %q", st, w)
	}
}
