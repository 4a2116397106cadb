package client

import (
	"context"
	"crypto"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/secround"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/secagg/masking"
	"github.com/veil-privacy/veil/secagg/quant"
)

// A securely aggregated round (RoundConfig.secagg, mode masking) runs in
// four phases after the task: the client checks the round against its
// owner's policy (the threshold, the modulus, and that the sum of the
// roster's encodings with its own noise share cannot wrap; a distributed
// DP-SGD plan, ddp.Accept; a graph whose seed cannot matter, checkGraph)
// and that its charge fits the budget, downloads the model, then sends
// its key advert, signed by its certificate's key over the digest of the
// round's whole secure aggregation configuration and of the model it
// received (secround.RoundContext); on the neighbours' adverts (each checked
// against the certificate relayed with it, which must be the authority's
// client certificate of the name the roster gives, and made under this
// client's own configuration digest: a coordinator that sent clients
// different plans or models is refused here, having received only the
// advert) it sends its encrypted shares; on the shares addressed to it,
// once they check out, it charges its ledger (chargeSecure), trains,
// quantises the update with its noise share (SecureInput), masks it and
// streams the masked vector; on the unmasking request it sends its shares of the
// survivors' self-mask seeds and of the dropped clients' mask keys. Its
// update never leaves it otherwise, and a round refused before the
// masked vector costs it nothing.
//
// A phase message pushed again (after a reconnection, or a restarted
// coordinator) is answered with the same answer; a different message for
// a phase already answered is refused (ErrSecAgg), as is anything the
// masking state machine refuses: a substituted or unsigned advert, a
// replayed or forged share, an unmasking request that would reveal a
// client's input.

// ErrSecAgg is what a client refuses a secure round's message with.
var ErrSecAgg = errors.New("secure aggregation refused")

// secureRound is the client's state in a secure round.
type secureRound struct {
	task  *fedpb.RoundConfig
	plan  *fedpb.DPParams
	model wire.Weights
	mc    *masking.Client
	dir   *secround.Directory
	// id and signer make mc once the model is in hand (advertise).
	id     uint32
	signer crypto.Signer
	q      *quant.Quantizer
	// ddp is a distributed DP-SGD round (nil otherwise: q quantises the
	// trainer's update), with the plan the owner's policy accepted.
	ddp *ddp.Round
	acc *ddp.Accepted
	// ev and label are a local DP round's charge (nil: none, or ddp's);
	// charged records that the round's charge is in the ledger.
	ev      *dp.Event
	label   string
	charged bool
	// advert is this client's signed advert; seen and sent the phase
	// messages answered (by phase 2–4: adverts, shares, unmask) and the
	// answers.
	advert []byte
	seen   [5]*fedpb.SecAggPhase
	sent   [5][]byte
}

// prepareSecure checks task's secure aggregation against what this client
// can run, before anything is charged: a roster naming it, an identity to
// sign with, valid masking parameters, and a quantiser at its own noise
// share whose sum over the roster cannot wrap.
func (c *Client) prepareSecure(task *fedpb.RoundConfig) (*secureRound, error) {
	sa := task.GetSecagg()
	n := task.GetRound()
	// Bounded before the quantiser allocates for it: no more values than
	// a model this client accepts.
	d := uint64(sa.GetQuant().GetDim())
	if plan, ok := secround.PlanOf(sa); ok {
		d = uint64(plan.Dim)
	}
	if d == 0 || 4*d > c.o.MaxModelBytes {
		return nil, refuse(n, SettingSecAgg, "quantises %d values; this client accepts models of at most %d bytes", d, c.o.MaxModelBytes)
	}
	if c.o.Identity == nil {
		return nil, refuse(n, SettingSecAgg, "is securely aggregated and this client has no identity to sign its key advert with")
	}
	signer, ok := c.o.Identity.Cert.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("client: the certificate's key (%T) cannot sign", c.o.Identity.Cert.PrivateKey)
	}
	// The parameters are checked here, before anything is downloaded;
	// the advert binds the model's digest once it is (advertise).
	p, err := secround.Params(sa, [32]byte{})
	if err != nil {
		return nil, refuse(n, SettingSecAgg, "has secure aggregation parameters this client refuses: %v", err)
	}
	id, ok := secround.ID(sa, c.id)
	if !ok {
		return nil, refuse(n, SettingSecAgg, "does not list this client (%q) in its secure aggregation roster", c.id)
	}
	s := &secureRound{task: task}
	if _, ok := secround.PlanOf(sa); ok {
		// Distributed DP-SGD: the plan's noise share, which CheckRound
		// found at least what this client's own T, rounds and budget
		// need (ddp.RequiredNoise), and the plan's encoding.
		if s.ddp, s.acc, err = c.prepareDistributed(n, sa); err != nil {
			return nil, err
		}
	} else {
		noise, err := c.o.Policy.NoiseShare(sa)
		if err != nil {
			return nil, refuse(n, SettingSecAggNoise, "%v", err)
		}
		if s.q, err = secround.Quantizer(sa, noise); err != nil {
			return nil, refuse(n, SettingSecAggNoise, "cannot be quantised with this client's noise share σ = %d: %v", noise, err)
		}
	}
	if minT := max(2, c.o.Policy.SecAgg.MinHonest); p.Threshold < minT {
		return nil, refuse(n, SettingThreshold, "has the secure aggregation threshold %d, below this client's minimum %d", p.Threshold, minT)
	}
	if err := c.checkGraph(n, &p); err != nil {
		return nil, err
	}
	s.id, s.signer = id, signer
	return s, nil
}

// checkGraph refuses a round whose communication graph this client's
// protection could depend on the graph seed for, unless the owner
// accepts that (SecAggPolicy.SparseGraphs). The seed is the
// coordinator's, picked after it chose the roster: one that controls
// some of the roster's clients could try seeds until this client's
// neighbours are all its own. With the owner's T, at most n − T of the
// roster collude, and masking.Params.SeedIndependent says whether that
// many colluders are tolerated wherever they sit (always, on the
// complete graph).
func (c *Client) checkGraph(n uint64, p *masking.Params) error {
	if c.o.Policy.SecAgg.SparseGraphs {
		return nil
	}
	r := len(p.Roster)
	if colluders := max(0, r-max(2, c.o.Policy.SecAgg.MinHonest)); !p.SeedIndependent(colluders) {
		return refuse(n, SettingGraph, "has a sparse secure aggregation graph (%d neighbours among %d clients, threshold %d) drawn from a seed the coordinator chose: the %d clients this client's T = %d leaves possibly colluding could be placed all around it by a chosen seed, more than the round tolerates (%d); this client accepts only a graph whose seed cannot matter (the complete graph)",
			p.EffectiveDegree(), r, p.Threshold, colluders, max(2, c.o.Policy.SecAgg.MinHonest), min(p.ToleratedColluders(), p.EffectiveDegree()-1))
	}
	return nil
}

// declinePolicy declines task when err is a refusal of the owner's
// policy (a *PolicyError) and returns the error that stops the round.
func (c *Client) declinePolicy(ctx context.Context, task *fedpb.RoundConfig, err error) error {
	var pe *PolicyError
	if errors.As(err, &pe) {
		c.o.Progress(fmt.Sprintf("refused: %v", err))
		c.decline(ctx, task, err)
		return fmt.Errorf("client: %w", err)
	}
	return err
}

// advertise makes the round's masking client and its signed key advert
// once the round's model is in hand: the parameters bind, besides the
// round's whole configuration, the digest of model computed here over
// the bytes this client received and trains from (secround.RoundContext),
// so a neighbour served another model in the same round made its advert
// under another context and is refused at the adverts (ShareKeys), before
// anything is charged.
func (c *Client) advertise(s *secureRound, model wire.Weights) error {
	n := s.task.GetRound()
	md, err := secround.ModelDigest(wire.Version(model.Header()))
	if err != nil {
		return fmt.Errorf("client: round %d: %w", n, err)
	}
	sa := s.task.GetSecagg()
	p, err := secround.Params(sa, md)
	if err != nil {
		return refuse(n, SettingSecAgg, "has secure aggregation parameters this client refuses: %v", err)
	}
	dir := secround.NewDirectory(sa, c.o.Identity.Pool)
	mc, ad, err := masking.NewClient(masking.ClientConfig{ID: s.id, Signer: s.signer, Keys: dir, MinThreshold: max(2, c.o.Policy.SecAgg.MinHonest)}, p, rand.Reader)
	if err != nil {
		return refuse(n, SettingThreshold, "%v", err)
	}
	b, err := ad.MarshalBinary()
	if err != nil {
		return err
	}
	s.mc, s.dir, s.advert, s.model = mc, dir, b, model
	return nil
}

// DistributedTrainer is a Trainer that takes part in distributed DP-SGD
// rounds (package fed/ddp).
type DistributedTrainer interface {
	// ClippedSum Poisson-samples the client's units at the plan's rate
	// and returns the sum of their gradients at model, each clipped to the
	// plan's C, in the model's tensor order and without noise: the client
	// encodes it with its noise share before anything leaves it.
	ClippedSum(ctx context.Context, model wire.Weights, task *fedpb.RoundConfig, plan ddp.Plan) ([]float32, error)
}

// prepareDistributed builds a distributed DP-SGD round's encoding and the
// accepted plan (its per-round charge), after CheckRound accepted the
// plan against the owner's policy.
func (c *Client) prepareDistributed(n uint64, sa *fedpb.SecAggConfig) (*ddp.Round, *ddp.Accepted, error) {
	if _, ok := c.o.Trainer.(DistributedTrainer); !ok {
		return nil, nil, refuse(n, SettingDDP, "is a distributed DP-SGD round and this client's trainer computes no clipped gradient sums")
	}
	r, plan, err := secround.Round(sa)
	if err != nil {
		return nil, nil, refuse(n, SettingDDP, "is a distributed DP-SGD round this client cannot encode: %v", err)
	}
	pol, err := c.o.Policy.Distributed()
	if err != nil {
		return nil, nil, refuse(n, SettingDDP, "%v", err)
	}
	acc, err := ddp.Accept(pol, plan)
	if err != nil {
		return nil, nil, refuse(n, SettingDDP, "is a distributed DP-SGD round whose plan this client refuses: %v", err)
	}
	return r, acc, nil
}

// fitsBudget refuses task, declining it, when ev would take the client's
// members past the budget; it charges nothing.
func (c *Client) fitsBudget(ctx context.Context, task *fedpb.RoundConfig, ev dp.Event) error {
	ok, err := c.canCharge(ev)
	if err != nil {
		return err
	}
	if !ok {
		return c.overBudget(ctx, task)
	}
	return nil
}

// overBudget declines task for the budget and returns the error that
// stops the client.
func (c *Client) overBudget(ctx context.Context, task *fedpb.RoundConfig) error {
	b := c.o.Policy.Budget
	c.o.Progress(fmt.Sprintf("budget: round %d would take this client past ε = %g; stopping", task.GetRound(), b.Epsilon))
	c.decline(ctx, task, ErrBudgetExhausted)
	return fmt.Errorf("client: round %d would take this client past its budget ε = %g at δ = %g: %w", task.GetRound(), b.Epsilon, b.Delta, ErrBudgetExhausted)
}

// chargeSecure charges the ledger for a secure round, once: for a
// distributed DP-SGD round one round of the accepted plan (its label
// names the mechanism and the trust assumption), for a local DP round
// the checked plan. It runs when the shares addressed to this client
// arrive and check out, so after every neighbour's advert was found
// signed over this client's own configuration (masking.Client.ShareKeys)
// and before the data are touched: a round refused before then, for a
// coordinator that equivocated or a forged share, is not charged, and a
// crash after it over-counts at worst. A round past the budget (another
// command may have charged the data set since the round was accepted) is
// refused and the ledger left as it was.
func (c *Client) chargeSecure(ctx context.Context, s *secureRound) error {
	if s.charged {
		return nil
	}
	task := s.task
	var err error
	switch {
	case s.acc != nil:
		_, err = s.acc.Charge(c.ledger, c.set, c.o.Members, fmt.Sprintf("veil fed client: round %d (distributed DP-SGD)", task.GetRound()))
	case s.ev != nil:
		err = c.charge(s.label, *s.ev)
	}
	if errors.Is(err, dp.ErrBudgetExceeded) {
		return c.overBudget(ctx, task)
	}
	if err != nil {
		return fmt.Errorf("client: round %d: %w", task.GetRound(), err)
	}
	s.charged = true
	return nil
}

// distributedInput is a distributed round's vector to mask: the trainer's
// clipped sum at the round's model, encoded with the plan's noise share.
func (c *Client) distributedInput(ctx context.Context, s *secureRound) ([]uint32, error) {
	n := s.task.GetRound()
	c.o.Progress(fmt.Sprintf("round %d: clipped gradient sum (distributed DP-SGD)", n))
	g, err := c.o.Trainer.(DistributedTrainer).ClippedSum(ctx, s.model, s.task, s.acc.Plan())
	if err != nil {
		return nil, c.trainingFailed(ctx, s.task, fmt.Errorf("client: round %d: %w: %w", n, ErrTrainingFailed, err))
	}
	defer clear(g)
	x, err := s.ddp.Encode(g, rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("client: round %d: %w", n, err)
	}
	return x, nil
}

// sendSecure sends a phase's message and fails unless it is accepted.
func (c *Client) sendSecure(ctx context.Context, m *fedpb.SecAggMessage) error {
	m.ProtocolVersion = fedpb.ProtocolVersion
	a, err := c.api.SecAggSend(ctx, m)
	if err != nil {
		return fmt.Errorf("client: round %d: sending a secure aggregation message: %w", m.GetRound(), err)
	}
	if !a.GetAccepted() {
		return fmt.Errorf("client: round %d: the coordinator refused this client's secure aggregation message: %s", m.GetRound(), a.GetReason())
	}
	return nil
}

// secPhase answers a phase message of the current secure round.
func (c *Client) secPhase(ctx context.Context, ph *fedpb.SecAggPhase) error {
	s := c.sec
	n := ph.GetRound()
	if s == nil || s.task.GetRound() != n {
		c.o.Logger.Warn("a secure aggregation message of a round this client is not in; ignored", "round", n)
		return nil
	}
	var phase int
	switch ph.GetMsg().(type) {
	case *fedpb.SecAggPhase_Adverts:
		phase = 2
	case *fedpb.SecAggPhase_Shares:
		phase = 3
	case *fedpb.SecAggPhase_Unmask:
		phase = 4
	default:
		return fmt.Errorf("client: round %d: an empty secure aggregation message: %w", n, ErrSecAgg)
	}
	if prev := s.seen[phase]; prev != nil {
		if !proto.Equal(prev, ph) {
			return fmt.Errorf("client: round %d: the coordinator sent a second, different message for a phase this client answered: %w", n, ErrSecAgg)
		}
		return c.resend(ctx, n, phase, s.sent[phase])
	}
	if c.o.DropSecure != nil && c.o.DropSecure(n, phase) {
		c.o.Progress(fmt.Sprintf("round %d: dropping out of secure aggregation before phase %d", n, phase))
		c.sec = nil
		return nil
	}
	out, err := c.answer(ctx, s, ph)
	if err != nil {
		if errors.Is(err, ErrSecAgg) {
			c.o.Progress(fmt.Sprintf("round %d: refused: %v", n, err))
		}
		c.sec = nil
		return err
	}
	s.seen[phase], s.sent[phase] = ph, out
	return c.resend(ctx, n, phase, out)
}

// answer works out the answer to a phase message (its bytes).
func (c *Client) answer(ctx context.Context, s *secureRound, ph *fedpb.SecAggPhase) ([]byte, error) {
	n := ph.GetRound()
	bad := func(err error) error { return fmt.Errorf("client: round %d: %w: %w", n, ErrSecAgg, err) }
	switch m := ph.GetMsg().(type) {
	case *fedpb.SecAggPhase_Adverts:
		for _, ct := range m.Adverts.GetCerts() {
			if err := s.dir.Add(ct.GetId(), ct.GetDer()); err != nil {
				return nil, bad(err)
			}
		}
		round, ads, err := masking.DecodeAdverts(m.Adverts.GetAdverts())
		if err != nil {
			return nil, bad(err)
		}
		if round != [32]byte(s.task.GetSecagg().GetRoundId()) {
			return nil, bad(errors.New("adverts of another round"))
		}
		shares, err := s.mc.ShareKeys(ads, rand.Reader)
		if errors.Is(err, masking.ErrParamsMismatch) {
			return nil, bad(fmt.Errorf("a neighbour's key advert was made under another configuration of this round than this client's: the coordinator sent the round's clients different settings (distributed DP plan, quantiser, threshold, roster or graph) or different models, so the sum would not carry the noise this client's plan promises; nothing was charged: %w", err))
		}
		if err != nil {
			return nil, bad(err)
		}
		return masking.EncodeShares(round, shares)
	case *fedpb.SecAggPhase_Shares:
		_, shares, err := masking.DecodeShares(m.Shares)
		if err != nil {
			return nil, bad(err)
		}
		// The shares first, then the charge, then the data.
		if err := s.mc.CheckShares(shares); err != nil {
			return nil, bad(err)
		}
		if err := c.chargeSecure(ctx, s); err != nil {
			return nil, err
		}
		var x []uint32
		if s.ddp != nil {
			if x, err = c.distributedInput(ctx, s); err != nil {
				return nil, err
			}
		} else {
			up, err := c.train(ctx, s.model, s.task, s.plan)
			if err != nil {
				return nil, err
			}
			if x, err = SecureInput(s.q, up, rand.Reader); err != nil {
				return nil, fmt.Errorf("client: round %d: %w", n, err)
			}
			s.plan = up.DP
		}
		if c.o.Quantised != nil {
			c.o.Quantised(n, slices.Clone(x))
		}
		mi, err := s.mc.MaskInput(shares, x)
		clear(x)
		if err != nil {
			return nil, bad(err)
		}
		c.o.Progress(fmt.Sprintf("round %d: masked vector ready", n))
		return mi.MarshalBinary()
	case *fedpb.SecAggPhase_Unmask:
		var req masking.UnmaskRequest
		if err := req.UnmarshalBinary(m.Unmask); err != nil {
			return nil, bad(err)
		}
		resp, err := s.mc.Unmask(&req)
		if err != nil {
			return nil, bad(err)
		}
		return resp.MarshalBinary()
	}
	return nil, bad(errors.New("an empty message"))
}

// resend sends (again) the answer to phase's message.
func (c *Client) resend(ctx context.Context, n uint64, phase int, out []byte) error {
	switch phase {
	case 2:
		return c.sendSecure(ctx, &fedpb.SecAggMessage{Round: n, Msg: &fedpb.SecAggMessage_Shares{Shares: out}})
	case 3:
		s := c.sec
		h := &fedpb.UpdateHeader{ProtocolVersion: fedpb.ProtocolVersion, Round: n, ModelVersion: s.task.GetModelVersion(), Dp: s.plan,
			Masked: &fedpb.MaskedHeader{TotalBytes: uint64(len(out))}}
		resp, err := SendMasked(ctx, c.api, h, out)
		if err != nil {
			return fmt.Errorf("client: round %d: sending the masked vector: %w", n, err)
		}
		if !resp.GetAccepted() {
			return fmt.Errorf("client: round %d: the coordinator refused the masked vector: %s", n, resp.GetReason())
		}
		c.o.Progress(fmt.Sprintf("round %d: masked vector accepted (coordinator's ledger: ε = %.4g)", n, resp.GetSpentEpsilon()))
		return nil
	default:
		return c.sendSecure(ctx, &fedpb.SecAggMessage{Round: n, Msg: &fedpb.SecAggMessage_Unmask{Unmask: out}})
	}
}

// SendMasked streams a masked vector's header and encoding in chunks.
func SendMasked(ctx context.Context, api fedpb.CoordinatorClient, h *fedpb.UpdateHeader, payload []byte) (*fedpb.SubmitResponse, error) {
	stream, err := api.SubmitMasked(ctx)
	if err != nil {
		return nil, err
	}
	return sendChunks(stream, h, func(send func([]byte) error) error {
		for p := payload; len(p) > 0; {
			b := p[:min(wire.DefaultChunk, len(p))]
			p = p[len(b):]
			if err := send(b); err != nil {
				return err
			}
		}
		return nil
	})
}

// SecureInput is the one point where the trainer's update enters secure
// aggregation: its values, in the model's tensor order, quantised by q
// (clip, rotation, conditional rounding, this client's noise share,
// modulo 2^b) into the vector the client masks. The charge of the round
// is the client's own DP-SGD plan, charged before training (round); the
// distributed DP-SGD work replaces both here and in Policy.NoiseShare.
func SecureInput(q *quant.Quantizer, up Update, r io.Reader) ([]uint32, error) {
	x := make([]float32, 0, up.Weights.Len())
	for _, t := range up.Weights {
		x = append(x, t.Values...)
	}
	defer clear(x)
	return q.Encode(x, r)
}
