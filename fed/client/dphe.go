package client

import (
	"context"
	"errors"
	"fmt"
	"math"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/dphefed"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/secagg/dphe"
)

// A DPHE round (RoundConfig.dphe, package fed/dphefed): the client checks
// the round against its owner's settings (the key generator's
// certificate name must be the one the owner configured, so a coordinator
// cannot name itself or an accomplice as the key generator; the proposed
// noise multiplier at least the policy's floor and the clip at most its
// largest), trains without DP-SGD, and releases its whole update with
// DPHE's own DP (clip, exact discrete Gaussian noise, a DP selection of
// blocks), charged to its own ledger for its data set and members before
// any noise is drawn or anything sent; a charge past the budget is
// refused, the ledger unchanged and nothing sent. Only the encrypted
// contribution leaves the client, in one SecAggSend.
//
// The unit: the release is DP for the client's whole update (all its
// members' data at once), which protects every identity (or example) at
// least as well; each member is charged the release's events.

// DPHEOptions is the owner's settings for DPHE rounds.
type DPHEOptions struct {
	// KeyGenName is the name on the key generator's certificate this
	// client trusts; empty takes part in no DPHE round.
	KeyGenName string
	// AllowInsecureTestKeySize accepts Paillier keys below 2048 bits
	// (tests only).
	AllowInsecureTestKeySize bool
	// Source, if set, draws the release's noise (dp.NewSeededSource, for
	// tests only); nil draws from crypto/rand.
	Source *dp.Source
}

// dpheSent is a DPHE contribution sent for a round.
type dpheSent struct {
	round uint64
	msg   *fedpb.SecAggMessage
}

// dpheCharger charges a DPHE release to the client's own ledger: its data
// set's DataLedger, for its members (dphe.Charger).
type dpheCharger struct {
	c     *Client
	label string
}

// dphePrincipal is the principal a client's DPHE Privacy names.
const dphePrincipal = "update"

func (d dpheCharger) Budget(principal string) (dp.Budget, error) {
	if principal != dphePrincipal {
		return dp.Budget{}, fmt.Errorf("client: no ledger for %q", principal)
	}
	return d.c.o.Policy.Budget, nil
}

func (d dpheCharger) Charge(principal string, events ...dp.Event) (dp.Spent, error) {
	if principal != dphePrincipal {
		return dp.Spent{}, fmt.Errorf("client: no ledger for %q", principal)
	}
	var s dp.MemberSpent
	_, err := d.c.ledger.Update(d.c.set, func(l *dp.DataLedger) error {
		var err error
		s, err = l.Charge(dp.Charge{Label: d.label, Members: d.c.o.Members, Events: events})
		return err
	})
	if err != nil {
		return dp.Spent{}, fmt.Errorf("client: %w", err)
	}
	return dp.Spent{Epsilon: s.Epsilon, RDPEpsilon: s.Epsilon, Delta: s.Delta}, nil
}

// checkDPHE checks a DPHE round's settings against the owner's.
func (c *Client) checkDPHE(task *fedpb.RoundConfig) error {
	cfg, n, p := task.GetDphe(), task.GetRound(), c.o.Policy
	switch {
	case c.o.DPHE.KeyGenName == "":
		return refuse(n, SettingSecAgg, "is a DPHE round and this client trusts no key generator")
	case cfg.GetKeygenName() != c.o.DPHE.KeyGenName:
		return refuse(n, SettingSecAgg, "names key generator %q; this client trusts only %q", cfg.GetKeygenName(), c.o.DPHE.KeyGenName)
	case c.o.Identity == nil:
		return refuse(n, SettingSecAgg, "is a DPHE round and this client has no identity to reach the key generator with")
	case task.GetDp() != nil:
		return refuse(n, SettingSecAgg, "is a DPHE round that also asks for DP-SGD")
	case !(cfg.GetNoiseMultiplier() >= p.MinNoiseMultiplier) || !(cfg.GetNoiseMultiplier() > 0) || math.IsInf(cfg.GetNoiseMultiplier(), 0):
		return refuse(n, SettingNoise, "asks for noise multiplier σ = %g; this client runs σ ≥ %g", cfg.GetNoiseMultiplier(), p.MinNoiseMultiplier)
	case !(cfg.GetClip() > 0 && cfg.GetClip() <= p.MaxClip):
		return refuse(n, SettingClip, "asks for clip C = %g; this client accepts C in (0, %g]", cfg.GetClip(), p.MaxClip)
	case !(p.Budget.Delta > 0) || !(cfg.GetSelectionDelta() > 0 && cfg.GetSelectionDelta() <= p.Budget.Delta):
		return refuse(n, SettingDelta, "asks for a selection δ = %g; this client accounts at δ ≤ %g", cfg.GetSelectionDelta(), p.Budget.Delta)
	case cfg.GetCount() == 0 || uint64(cfg.GetCount()) > c.o.MaxModelBytes/4:
		return refuse(n, SettingSecAgg, "selects %d blocks", cfg.GetCount())
	}
	return nil
}

// dpheRound takes part in a DPHE round.
func (c *Client) dpheRound(ctx context.Context, task *fedpb.RoundConfig) error {
	n := task.GetRound()
	if s := c.dphe; s != nil && s.round == n {
		// Pushed again after a reconnection: the same contribution (the
		// coordinator acknowledges one it has).
		return c.sendDPHE(ctx, s.msg)
	}
	if err := c.checkDPHE(task); err != nil {
		c.o.Progress(fmt.Sprintf("refused: %v", err))
		c.decline(ctx, task, err)
		return fmt.Errorf("client: %w", err)
	}
	cfg := task.GetDphe()
	model, err := c.fetch(ctx, task.GetModelVersion())
	if err != nil {
		return err
	}
	up, err := c.train(ctx, model, task, nil)
	if err != nil {
		return err
	}
	if err := up.Weights.SameLayout(model); err != nil {
		return c.trainingFailed(ctx, task, fmt.Errorf("client: round %d: %w: the update: %w", n, ErrTrainingFailed, err))
	}
	update := make([]float64, 0, up.Weights.Len())
	for _, t := range up.Weights {
		for _, v := range t.Values {
			update = append(update, float64(v))
		}
	}
	kg, err := dphefed.Dial(dphefed.DialOptions{Addr: cfg.GetKeygenAddr(), Identity: c.o.Identity, Name: c.o.DPHE.KeyGenName,
		AllowInsecureTestKeySize: c.o.DPHE.AllowInsecureTestKeySize})
	if err != nil {
		return fmt.Errorf("client: round %d: %w", n, err)
	}
	defer kg.Close()
	priv := &dphe.Privacy{Clip: cfg.GetClip(), NoiseMultiplier: cfg.GetNoiseMultiplier(), Principal: dphePrincipal,
		Ledger: dpheCharger{c: c, label: fmt.Sprintf("veil fed client: DPHE round %d", n)}, Source: c.o.DPHE.Source,
		Select: &dphe.Selection{Epsilon: cfg.GetSelectionEpsilon(), Delta: cfg.GetSelectionDelta(), Threshold: cfg.GetSelectionThreshold(), Count: int(cfg.GetCount())}}
	ct, err := dphefed.Contribute(ctx, kg, cfg.GetRound(), update, dphefed.ContributeOptions{Privacy: priv})
	if status.Code(err) == codes.PermissionDenied {
		// The key generator gives no keys for the round (it is over:
		// this client was late): nothing was charged or sent, and the
		// client goes on to the next round.
		c.o.Progress(fmt.Sprintf("round %d: the key generator refused the round's keys; sitting it out: %v", n, err))
		c.o.Logger.Warn("DPHE round's keys refused", "round", n, "err", err)
		return nil
	}
	if err != nil {
		if errors.Is(err, dp.ErrBudgetExceeded) {
			c.o.Progress(fmt.Sprintf("budget: round %d would take this client past its budget; stopping", n))
			c.decline(ctx, task, ErrBudgetExhausted)
			return fmt.Errorf("client: round %d: %w: %w", n, ErrBudgetExhausted, err)
		}
		return fmt.Errorf("client: round %d: %w", n, err)
	}
	msg := &fedpb.SecAggMessage{Round: n, Msg: &fedpb.SecAggMessage_Dphe{Dphe: &fedpb.DPHEContribution{Messages: ct.Messages}}}
	c.dphe = &dpheSent{round: n, msg: msg}
	c.o.Progress(fmt.Sprintf("round %d: DPHE contribution sent (%d messages)", n, len(ct.Messages)))
	return c.sendDPHE(ctx, msg)
}

// sendDPHE sends a DPHE contribution. A refusal (the round past its
// deadline, or closed) ends this round for the client, not its run: it
// goes on to the next round, as after a refused plaintext update; its
// ledger keeps the charge of the release it made.
func (c *Client) sendDPHE(ctx context.Context, m *fedpb.SecAggMessage) error {
	m.ProtocolVersion = fedpb.ProtocolVersion
	a, err := c.api.SecAggSend(ctx, m)
	if err != nil {
		return fmt.Errorf("client: round %d: sending the DPHE contribution: %w", m.GetRound(), err)
	}
	if !a.GetAccepted() {
		c.o.Progress(fmt.Sprintf("round %d: DPHE contribution refused: %s", m.GetRound(), a.GetReason()))
		c.o.Logger.Warn("DPHE contribution refused", "round", m.GetRound(), "reason", a.GetReason())
	}
	return nil
}
