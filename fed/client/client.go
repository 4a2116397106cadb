// Package client is a federation client: it joins a coordinator over
// mutual TLS with the privacy policy its owner set (Policy: unit, budget,
// least noise, largest clip and sampling rate), waits to be selected,
// downloads the round's model, trains on its own data with the local
// trainer it is given, and sends back only the update with the privacy
// metadata of what it ran.
//
// The owner's policy rules, not the coordinator: a round whose task is
// outside it (no DP, another unit, a larger δ or clip or sampling rate,
// less noise), or whose trainer's plan is, is refused with a *PolicyError
// naming the setting, before anything is planned, charged or trained, and
// the client's folder is left as it was.
//
// The client charges the privacy ledger of the data set it trains on
// (dp.DataLedger in Options.LedgerDir, shared with every other command
// that spends on the same people). Before training in a round it works
// out what the round would cost from the plan it checked against its policy (the plan the
// trainer is then given and must run), at its own budget's δ, refuses
// (and says so) if that would take it past its budget, and otherwise
// charges the ledger before touching its data, so a crash can never lose
// a charge. It also keeps the last model it received.
//
// The client holds one stream to the coordinator (Subscribe), on which the
// coordinator pushes each round's task the moment the round opens: the
// client never polls. A round it refuses (its budget, its policy) it
// declines, naming the reason (a setting's name), so the coordinator stops
// waiting for it; so does a client whose training fails ("training") or
// whose owner stops it while it trains ("stopped").
//
// A round's update is trained once. If sending it fails or the stream
// breaks (the coordinator restarted, the network dropped), the client
// reconnects with backoff; the coordinator pushes the round again if it is
// still open, and the client sends the same update, without training or
// charging again: a second copy of an output reveals nothing more than the
// first. Once the coordinator has answered (accepted or refused), the
// client does not take part in that round again.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/wire"
)

// Update is what local training produced.
type Update struct {
	// Weights is the update: new weights minus the round's model (FedAvg),
	// or the gradient at the round's model (FedSGD).
	Weights wire.Weights
	// DP is what the training ran (nil without DP).
	DP *fedpb.DPParams
	// Examples is the local example count, sent only without DP.
	Examples uint64
}

// Trainer trains on the client's own data.
type Trainer interface {
	// Plan returns the DP-SGD the trainer would run for task (noise
	// multiplier, sampling rate, steps, clip, δ, unit), before any data is
	// used for training, so the client can check it against its Policy
	// and its budget (a plan outside the policy refuses the round).
	// remaining is the ε the client may still spend; a trainer calibrating
	// its own noise spreads it over the rounds left, with at least the
	// policy's least noise multiplier.
	Plan(task *fedpb.RoundConfig, remaining float64) (*fedpb.DPParams, error)
	// Train runs the task from model with the planned DP settings: plan
	// is the plan the client checked and charged, and the update must
	// state exactly it.
	Train(ctx context.Context, model wire.Weights, task *fedpb.RoundConfig, plan *fedpb.DPParams) (Update, error)
}

// Options configures a client.
type Options struct {
	// Addr is the coordinator's host:port; ServerName the name its
	// certificate must carry (default: the host of Addr).
	Addr       string
	ServerName string
	// Name is the client's certificate name, which errors explaining a
	// refused certificate name (default "this client").
	Name string
	// TLS is the client's mutual-TLS configuration (pki.ClientTLS).
	Creds credentials.TransportCredentials
	// Policy is the owner's privacy policy: the unit, the budget, and the
	// least noise and largest clip and sampling rate the client accepts
	// (DefaultPolicy gives the defaults).
	Policy Policy
	// Dir holds the client's last model.
	Dir string
	// LedgerDir is the privacy ledger folder (dp.LedgerDir) and DataSet
	// the name of the data set the client trains on: the client charges
	// the ledger of DataSet in its policy's unit there, shared with every
	// other command spending on the same people. Members names the people
	// (or, with the example unit, the images) the client trains on; nil
	// charges every member of the data set. LedgerDir and DataSet are
	// required.
	LedgerDir string
	DataSet   string
	Members   []string
	// Ledger, if set, keeps the data set's ledger instead of LedgerDir
	// (a tagging library keeps its own inside its encrypted database).
	Ledger dp.DataLedgerStore

	Trainer Trainer
	Logger  *slog.Logger
	// MaxModelBytes bounds a downloaded model (default 256 MiB).
	MaxModelBytes uint64
	// Progress, if set, is told what the client is doing.
	Progress func(event string)
	// SitOut, if set, is asked about each round the client is selected
	// for; true makes the client drop out of that round (no training, no
	// charge, no update) until the round's deadline. Simulations inject
	// drop-outs with it.
	SitOut func(task *fedpb.RoundConfig) bool
	// ReconnectFor is the retry window of Run: how long in all the client
	// keeps joining a coordinator that is unreachable or went away (0:
	// DefaultReconnectFor; negative: no retrying, except that the first
	// window lasts at least FirstJoinTimeout, so the client tries to join).
	ReconnectFor time.Duration
	// Clock makes the client's timers (default: the system's); tests
	// inject one to see that no timer runs while the client waits.
	Clock Clock
	// Identity is the client's certificate and key and the authority it
	// trusts: it signs the client's key adverts in securely aggregated
	// rounds and checks its neighbours' (required for those rounds).
	Identity *pki.Identity
	// DropSecure, if set, is asked before the client answers each phase
	// (2: adverts, 3: shares, 4: unmasking) of a secure round; true makes
	// it drop out of the round there. Tests and simulations inject
	// drop-outs with it.
	DropSecure func(round uint64, phase int) bool
	// Quantised, if set, is shown the client's quantised update before
	// it is masked (its own data, for tests that check the coordinator's
	// unmasked sum exactly).
	Quantised func(round uint64, x []uint32)
	// DPHE is the owner's settings for DPHE rounds (dphe.go); its zero
	// value takes part in none.
	DPHE DPHEOptions
}

// Clock is the time the client waits on: its reconnection backoff and a
// simulated drop-out's wait. While its stream of work is healthy, a client
// starts no timer at all: the coordinator pushes it what to do.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// ErrBudgetExhausted is returned when the next round would take the
// client past its budget.
var ErrBudgetExhausted = errors.New("privacy budget exhausted")

// ErrTrainingFailed is returned (wrapped) when the trainer could not plan
// or train a round, or produced an update the client will not send: the
// client declines the round ("training") so the coordinator waits for it
// no more.
var ErrTrainingFailed = errors.New("local training failed")

// Client is a federation client.
type Client struct {
	o      Options
	conn   *grpc.ClientConn
	api    fedpb.CoordinatorClient
	ledger dp.DataLedgerStore
	set    dp.DataSet
	id     string
	last   *sent        // the last round's update, kept to send again
	sec    *secureRound // the secure round the client is in
	dphe   *dpheSent    // the last DPHE contribution, kept to send again
	easgd  wire.Weights // EASGD's own parameters x^k (async.go)
}

// sent is the update trained for a round, and whether the coordinator has
// answered it.
type sent struct {
	round    uint64
	version  string
	up       Update
	answered bool
}

// New validates o, opens the client's folder and ledger, and dials the
// coordinator (the connection is made lazily by gRPC).
func New(o Options) (*Client, error) {
	if o.Addr == "" || o.Creds == nil || o.Trainer == nil || o.Dir == "" || (o.LedgerDir == "" && o.Ledger == nil) || o.DataSet == "" {
		return nil, errors.New("client: an address, TLS credentials, a trainer, a folder, a ledger (folder) and a data set name are required")
	}
	if err := o.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxModelBytes == 0 {
		o.MaxModelBytes = 256 << 20
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	if o.Name == "" {
		o.Name = "this client"
	}
	if o.ReconnectFor == 0 {
		o.ReconnectFor = DefaultReconnectFor
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	l, set, err := openLedger(&o)
	if err != nil {
		return nil, err
	}
	// wire.DialOptions: update chunks are sent without a copy into a
	// new message buffer each (the payload is made once per update).
	conn, err := grpc.NewClient(o.Addr, append(wire.DialOptions(), grpc.WithTransportCredentials(o.Creds))...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Client{o: o, conn: conn, api: fedpb.NewCoordinatorClient(conn), ledger: l, set: set}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// follow opens the stream of work and takes part in each round pushed on
// it, until the run is over (nil) or an error. healthy reports whether
// the stream was opened and delivered a message, so a later break starts
// a new backoff.
func (c *Client) follow(ctx context.Context) (healthy bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api.Subscribe(ctx, &fedpb.SubscribeRequest{ProtocolVersion: fedpb.ProtocolVersion})
	if err != nil {
		return false, fmt.Errorf("client: opening the stream of work: %w", err)
	}
	for {
		p, err := stream.Recv()
		if err == io.EOF {
			return healthy, errStreamEnded
		}
		if err != nil {
			return healthy, fmt.Errorf("client: the stream of work: %w", err)
		}
		healthy = true
		switch m := p.GetMsg().(type) {
		case *fedpb.Push_Done:
			c.o.Progress("done: " + m.Done)
			return true, nil
		case *fedpb.Push_Task:
			if m.Task.GetAsync() != nil {
				// An asynchronous coordinator: exchanges until the end.
				return true, c.asyncLoop(ctx, m.Task)
			}
			if err := c.round(ctx, m.Task); err != nil {
				return true, err
			}
		case *fedpb.Push_Secagg:
			if err := c.secPhase(ctx, m.Secagg); err != nil {
				return true, err
			}
		default:
			return true, errors.New("client: the coordinator pushed an empty message")
		}
	}
}

// round takes part in one round.
func (c *Client) round(ctx context.Context, task *fedpb.RoundConfig) error {
	if s := c.sec; s != nil && s.task.GetRound() == task.GetRound() && proto.Equal(s.task, task) {
		// Pushed again after a reconnection: the advert again (the
		// coordinator acknowledges one it has).
		return c.sendSecure(ctx, &fedpb.SecAggMessage{Round: task.GetRound(), Msg: &fedpb.SecAggMessage_Advert{Advert: s.advert}})
	}
	if l := c.last; l != nil && l.round == task.GetRound() && l.version == task.GetModelVersion() {
		if !l.answered {
			c.o.Progress(fmt.Sprintf("round %d: sending the update again", task.GetRound()))
			return c.submit(ctx, task, l.up)
		}
		// Answered already: wait for the next round's push.
		return nil
	}
	if c.o.SitOut != nil && c.o.SitOut(task) {
		c.o.Progress(fmt.Sprintf("round %d: dropping out", task.GetRound()))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.o.Clock.After(time.UnixMilli(task.GetDeadlineUnixMs()).Sub(c.o.Clock.Now())):
		}
		return nil
	}
	if task.GetDphe() != nil {
		return c.dpheRound(ctx, task)
	}
	// The owner's policy first: a round outside it is refused before
	// anything is planned, downloaded, charged or trained.
	if err := c.o.Policy.CheckRound(task); err != nil {
		c.o.Progress(fmt.Sprintf("refused: %v", err))
		c.decline(ctx, task, err)
		return fmt.Errorf("client: %w", err)
	}
	var sec *secureRound
	if task.GetSecagg() != nil {
		var err error
		if sec, err = c.prepareSecure(task); err != nil {
			return c.declinePolicy(ctx, task, err)
		}
	}
	var plan *fedpb.DPParams
	var err error
	if sec != nil && sec.ddp != nil {
		// Distributed DP-SGD: the accepted plan's round must fit the
		// budget now; it is charged once the round's configuration and
		// shares check out, before the data are touched (secagg.go).
		if err := c.fitsBudget(ctx, task, sec.acc.Event()); err != nil {
			return err
		}
	} else if task.GetDp() != nil {
		var ev dp.Event
		var label string
		if plan, ev, label, err = c.planRound(ctx, task); err != nil {
			return err
		}
		if sec != nil {
			// Charged once the round's configuration and shares check
			// out, before the data are touched (secagg.go).
			sec.ev, sec.label = &ev, label
		} else if err := c.charge(label, ev); err != nil {
			// Charge before the data are touched: a crash after this
			// point over-counts at worst, never under-counts.
			return err
		}
	}
	model, err := c.fetch(ctx, task.GetModelVersion())
	if err != nil {
		return err
	}
	if sec != nil {
		// Trained once the shares arrive (secPhase); the advert, bound to
		// this model, now.
		if err := c.advertise(sec, model); err != nil {
			return c.declinePolicy(ctx, task, err)
		}
		sec.plan = plan
		c.sec = sec
		c.o.Progress(fmt.Sprintf("round %d: securely aggregated; key advert sent", task.GetRound()))
		return c.sendSecure(ctx, &fedpb.SecAggMessage{Round: task.GetRound(), Msg: &fedpb.SecAggMessage_Advert{Advert: sec.advert}})
	}
	up, err := c.train(ctx, model, task, plan)
	if err != nil {
		return err
	}
	c.last = &sent{round: task.GetRound(), version: task.GetModelVersion(), up: up}
	return c.submit(ctx, task, up)
}

// planRound has the trainer plan task's DP-SGD and checks the plan
// against the owner's policy and the client's budget, declining the task
// if either refuses it. It returns the plan the trainer must run, its
// cost on the model served and the ledger's label for the charge, which
// the caller makes before any data are touched.
func (c *Client) planRound(ctx context.Context, task *fedpb.RoundConfig) (*fedpb.DPParams, dp.Event, string, error) {
	s, err := c.Spent()
	if err != nil {
		return nil, dp.Event{}, "", err
	}
	p, err := c.o.Trainer.Plan(task, c.o.Policy.Budget.Epsilon-s.Epsilon)
	if err != nil {
		return nil, dp.Event{}, "", c.trainingFailed(ctx, task, fmt.Errorf("client: planning round %d: %w: %w", task.GetRound(), ErrTrainingFailed, err))
	}
	// The plan is checked, charged and handed to the trainer as this
	// copy, which the trainer cannot change after the check.
	plan := proto.Clone(p).(*fedpb.DPParams)
	if err := c.o.Policy.CheckPlan(task.GetRound(), plan); err != nil {
		c.o.Progress(fmt.Sprintf("refused: %v", err))
		c.decline(ctx, task, err)
		return nil, dp.Event{}, "", fmt.Errorf("client: %w", err)
	}
	model, err := c.fetch(ctx, task.GetModelVersion())
	if err != nil {
		return nil, dp.Event{}, "", err
	}
	// The cost of the checked plan, charged to this client's own ledger
	// at its own δ.
	dim, err := c.noisedDimension(model)
	if err != nil {
		return nil, dp.Event{}, "", c.trainingFailed(ctx, task, fmt.Errorf("client: planning round %d: %w: %w", task.GetRound(), ErrTrainingFailed, err))
	}
	ev, err := Event(plan, dim)
	if err != nil {
		return nil, dp.Event{}, "", fmt.Errorf("client: round %d: %w", task.GetRound(), err)
	}
	if err := c.fitsBudget(ctx, task, ev); err != nil {
		return nil, dp.Event{}, "", err
	}
	return plan, ev, fmt.Sprintf("veil fed client: round %d", task.GetRound()), nil
}

// planAndCharge is planRound, then the charge, before any data are
// touched (a crash after it over-counts at worst, never under-counts).
func (c *Client) planAndCharge(ctx context.Context, task *fedpb.RoundConfig) (*fedpb.DPParams, error) {
	plan, ev, label, err := c.planRound(ctx, task)
	if err != nil {
		return nil, err
	}
	return plan, c.charge(label, ev)
}

// train runs the trainer on task from model with the checked plan and
// checks that the update states exactly that plan.
func (c *Client) train(ctx context.Context, model wire.Weights, task *fedpb.RoundConfig, plan *fedpb.DPParams) (Update, error) {
	c.o.Progress(fmt.Sprintf("%s %d: training", taskKind(task), task.GetRound()))
	var run *fedpb.DPParams
	if plan != nil {
		run = proto.Clone(plan).(*fedpb.DPParams)
	}
	up, err := c.o.Trainer.Train(ctx, model, task, run)
	if err != nil {
		return up, c.trainingFailed(ctx, task, fmt.Errorf("client: training in round %d: %w: %w", task.GetRound(), ErrTrainingFailed, err))
	}
	// The update states the DP it ran, and the coordinator charges that:
	// it must be the plan the client checked and charged.
	if plan != nil && !proto.Equal(up.DP, plan) {
		return up, c.trainingFailed(ctx, task, fmt.Errorf("client: round %d: %w: the trainer's update states DP %v, not the plan %v this client checked and charged; not sending it",
			task.GetRound(), ErrTrainingFailed, up.DP, plan))
	}
	if plan == nil && up.DP != nil {
		return up, c.trainingFailed(ctx, task, fmt.Errorf("client: round %d: %w: the trainer's update states DP but the round ran without", task.GetRound(), ErrTrainingFailed))
	}
	return up, nil
}

// DeclineReason is the reason a client gives the coordinator for
// refusing a round because of err: "budget", or "policy: " and the name of
// the policy setting the round (or its plan) is outside of, "stopped" if
// its owner stopped it mid-round, "training" if its training failed, or
// "withdrawn". It names a setting or a cause and nothing private: not the
// client's budget, spending or policy values, nor the trainer's error.
func DeclineReason(err error) string {
	var pe *PolicyError
	switch {
	case errors.As(err, &pe):
		return "policy: " + string(pe.Setting)
	case errors.Is(err, ErrBudgetExhausted):
		return "budget"
	case errors.Is(err, context.Canceled):
		return "stopped"
	case errors.Is(err, ErrTrainingFailed):
		return "training"
	}
	return "withdrawn"
}

// trainingFailed declines task's round after the trainer failed (err
// wraps ErrTrainingFailed), or after the owner stopped the client while
// it trained (ctx ended: the reason is then "stopped"), and returns err.
// A charge made for the round stays in the ledger: it was made before the
// data were touched, so it may over-count, never under-count.
func (c *Client) trainingFailed(ctx context.Context, task *fedpb.RoundConfig, err error) error {
	why := err
	if ctx.Err() != nil {
		why = context.Canceled
	}
	c.o.Progress(fmt.Sprintf("round %d: declining: %v", task.GetRound(), err))
	c.decline(ctx, task, why)
	return err
}

// decline tells the coordinator that this client refuses task's round,
// so the round waits for it no more. It is a courtesy: if the coordinator
// cannot be told, the round waits until its deadline, as it would for a
// client that vanished, and the client's refusal stands all the same.
func (c *Client) decline(ctx context.Context, task *fedpb.RoundConfig, why error) {
	reason := DeclineReason(why)
	// Also when the owner has just stopped the client (ctx ended): the
	// coordinator is told all the same, within declineTimeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), declineTimeout)
	defer cancel()
	_, err := c.api.Decline(ctx, &fedpb.DeclineRequest{ProtocolVersion: fedpb.ProtocolVersion, Round: task.GetRound(), Reason: reason})
	if err != nil {
		c.o.Logger.Warn("could not tell the coordinator this client declines the round", "round", task.GetRound(), "reason", reason, "err", err)
		return
	}
	c.o.Logger.Info("declined the round", "round", task.GetRound(), "reason", reason)
}

// declineTimeout bounds the wait for the coordinator to acknowledge a
// decline.
const declineTimeout = 10 * time.Second

// Event is the privacy cost of local DP-SGD with the given metadata on a
// model of dim values (the discretised Gaussian's effective multiplier).
func Event(m *fedpb.DPParams, dim int) (dp.Event, error) {
	if m.GetSteps() < 1 {
		return dp.Event{}, fmt.Errorf("DP-SGD needs at least one step, the plan has %d", m.GetSteps())
	}
	cfg := dp.SGDConfig{ClipNorm: m.GetClip(), NoiseMultiplier: m.GetNoiseMultiplier(), SamplingRate: m.GetSamplingRate(), ExpectedBatchSize: 1, Dimension: dim}
	sigma, err := cfg.EffectiveNoiseMultiplier()
	if err != nil {
		return dp.Event{}, err
	}
	return dp.SubsampledDiscreteGaussianEvent(m.GetSamplingRate(), sigma, int(m.GetSteps()))
}

// fetch returns the model version, downloading it unless it is the one
// kept on disk.
func (c *Client) fetch(ctx context.Context, version string) (wire.Weights, error) {
	path := c.o.Dir + "/model.bin"
	if w, err := readModel(path); err == nil && wire.Version(w.Header()) == version {
		return w, nil
	}
	stream, err := c.api.DownloadModel(ctx, &fedpb.ModelRequest{ProtocolVersion: fedpb.ProtocolVersion, ModelVersion: version})
	if err != nil {
		return nil, fmt.Errorf("client: downloading model %s: %w", short(version), err)
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, fmt.Errorf("client: downloading model %s: %w", short(version), err)
	}
	dec, err := wire.NewDecoder(first.GetHeader(), wire.Limits{MaxBytes: c.o.MaxModelBytes})
	if err != nil {
		return nil, fmt.Errorf("client: model %s: %w", short(version), err)
	}
	for {
		ch, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("client: downloading model %s: %w", short(version), err)
		}
		if err := dec.Write(ch.GetData()); err != nil {
			return nil, fmt.Errorf("client: model %s: %w", short(version), err)
		}
	}
	w, err := dec.Finish()
	if err != nil {
		return nil, fmt.Errorf("client: model %s: %w", short(version), err)
	}
	if got := wire.Version(w.Header()); got != version {
		return nil, fmt.Errorf("client: asked for model %s and received %s", short(version), short(got))
	}
	if err := w.CheckFinite(); err != nil {
		return nil, fmt.Errorf("client: model %s: %w", short(version), err)
	}
	if err := writeModel(path, w); err != nil {
		return nil, err
	}
	return w, nil
}

func short(v string) string {
	if len(v) > 12 {
		return v[:12]
	}
	return v
}

// submit streams the update to the coordinator.
func (c *Client) submit(ctx context.Context, task *fedpb.RoundConfig, up Update) error {
	if err := up.Weights.Validate(); err != nil {
		return fmt.Errorf("client: the update: %w", err)
	}
	h := &fedpb.UpdateHeader{ProtocolVersion: fedpb.ProtocolVersion, Round: task.GetRound(), ModelVersion: task.GetModelVersion(),
		Dp: up.DP, Weights: up.Weights.Header()}
	if up.DP == nil {
		h.Examples = up.Examples
	}
	resp, err := SendUpdate(ctx, c.api, h, up.Weights)
	if err != nil {
		return fmt.Errorf("client: sending the update of round %d: %w", task.GetRound(), err)
	}
	if c.last != nil && c.last.round == task.GetRound() {
		c.last.answered = true
	}
	if !resp.GetAccepted() {
		c.o.Progress(fmt.Sprintf("%s %d: update refused: %s", taskKind(task), task.GetRound(), resp.GetReason()))
		c.o.Logger.Warn("update refused", "round", task.GetRound(), "reason", resp.GetReason())
		return nil
	}
	c.o.Progress(fmt.Sprintf("%s %d: update accepted (coordinator's ledger: ε = %.4g)", taskKind(task), task.GetRound(), resp.GetSpentEpsilon()))
	return nil
}

// SendUpdate streams one update (header, then its payload in chunks) and
// returns the coordinator's answer.
func SendUpdate(ctx context.Context, api fedpb.CoordinatorClient, h *fedpb.UpdateHeader, w wire.Weights) (*fedpb.SubmitResponse, error) {
	return SendPayload(ctx, api, h, func(send func([]byte) error) error {
		return w.Chunks(wire.DefaultChunk, send)
	})
}

// SendPayload streams an update's header and then the payload chunks that
// chunks passes to send, and returns the coordinator's answer. It is
// SendUpdate for a payload already cut into chunks (veil bench fed sends
// precomputed ones).
func SendPayload(ctx context.Context, api fedpb.CoordinatorClient, h *fedpb.UpdateHeader, chunks func(send func([]byte) error) error) (*fedpb.SubmitResponse, error) {
	stream, err := api.SubmitUpdate(ctx)
	if err != nil {
		return nil, err
	}
	return sendChunks(stream, h, chunks)
}

// sendChunks sends the header h and then the chunks on stream (an update's
// or a masked vector's) and returns the coordinator's answer.
func sendChunks(stream grpc.ClientStreamingClient[fedpb.UpdateChunk, fedpb.SubmitResponse], h *fedpb.UpdateHeader, chunks func(send func([]byte) error) error) (*fedpb.SubmitResponse, error) {
	// A Send that fails with io.EOF means the coordinator has already ended
	// the stream (a refusal such as a revoked certificate); its status is
	// read by CloseAndRecv, so EOF is never the error the caller sees.
	if err := stream.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Header{Header: h}}); err != nil {
		if errors.Is(err, io.EOF) {
			return stream.CloseAndRecv()
		}
		return nil, err
	}
	err := chunks(func(b []byte) error {
		return stream.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Data{Data: b}})
	})
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return stream.CloseAndRecv()
}
