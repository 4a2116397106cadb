package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/ddpserver"
	"github.com/veil-privacy/veil/fed/dphefed"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/training"
)

// CoordinatorOptions configure RunCoordinator.
type CoordinatorOptions struct {
	// Config is the coordinator's configuration (veil fed coordinator's
	// flags and configuration file), checked by RunCoordinator.
	Config Config
	// Logger receives structured logs (default: discard).
	Logger *slog.Logger
	// Evaluation returns the networks that describe the evaluation's
	// images for a head reading features ("descriptor" or "agegender"),
	// and the engine that runs the evaluation: required with
	// Config.EvalData, called only then.
	Evaluation func(features string) (training.Describers, *engine.Engine, error)
	// Serving, if set, is told the gRPC address once the coordinator
	// serves (useful with port 0).
	Serving func(addr string)
}

// CoordinatorResult is a finished run of a coordinator.
type CoordinatorResult struct {
	// Status is the coordinator's state at the end: its clients, rounds
	// and last evaluation.
	Status *fedpb.StatusResponse
	// Done and Failed count the rounds that closed each way (with an
	// asynchronous strategy, Done counts the model versions made).
	Done, Failed int
	// Privacy says what the federation's ε means (nil without DP rounds,
	// clients or Config.DP); with Config.Out, the final model's record.
	Privacy *checkpoint.Federation
	// Out is the final model's checkpoint, if Config.Out was given.
	Out string
}

// StoppedError is RunCoordinator's error when its context ended before
// the run was over; the state file holds everything, and a coordinator
// started again on it continues.
type StoppedError struct {
	// Closed is the number of rounds closed, Rounds the configured number.
	Closed, Rounds int
	// State is the coordinator's state file.
	State string
	// Err is the context's error.
	Err error
}

func (e *StoppedError) Error() string {
	return fmt.Sprintf("stopped after %d of %d rounds; start again with --state %s to continue", e.Closed, e.Rounds, e.State)
}

func (e *StoppedError) Unwrap() error { return e.Err }

// RunCoordinator assembles a coordinator from its configuration (the
// initial model, its certificate and revocation list, its state file,
// metrics and evaluation) and serves it until the configured rounds have
// closed, then writes the final model (Config.Out) and returns the run's
// result; or until ctx ends (a *StoppedError). Bad settings and missing
// files are refused, in the words of the configuration's keys, before
// anything is created.
func RunCoordinator(ctx context.Context, o CoordinatorOptions) (*CoordinatorResult, error) {
	cfg := o.Config
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	co, err := cfg.Options()
	if err != nil {
		return nil, err
	}
	if err := cfg.checkFiles(); err != nil {
		return nil, err
	}
	certP, keyP, caP, crlP, err := IdentityFiles(cfg.PKI, cfg.Name, cfg.Cert, cfg.Key, cfg.CA, cfg.CRL)
	if err != nil {
		return nil, err
	}
	id, err := LoadIdentity(certP, keyP, caP)
	if err != nil {
		return nil, err
	}
	initCk, err := cfg.loadInit(ctx, &co)
	if err != nil {
		return nil, err
	}
	var ddpSrv *ddpserver.Server
	if co.SecAgg != nil {
		// Adverts are checked against client certificates of the
		// coordinator's own authority.
		co.SecAgg.Roots = id.Pool
		if co.SecAgg.DDP, ddpSrv, err = cfg.ddpOptions(initCk, &co); err != nil {
			return nil, err
		}
	}
	if co.DPHE != nil {
		if err := checkAddress("keygen", cfg.KeyGen, false); err != nil {
			return nil, err
		}
		kg, err := dphefed.Dial(dphefed.DialOptions{Addr: cfg.KeyGen, Identity: id, Name: cfg.KeyGenName})
		if err != nil {
			return nil, err
		}
		defer kg.Close()
		co.DPHE.KeyGen = kg
	}
	if a := co.Async; a != nil {
		log.Info("strategy", "name", a.Strategy, "asynchronous", true, "max_staleness", a.MaxStaleness, "thin_p", a.Thin.Drop)
	} else {
		log.Info("strategy", "name", co.Strategy.Name, "server_lr", co.Strategy.ServerLRText())
	}
	m := NewMetrics()
	co.Logger, co.Metrics = log, m
	var evals *Evaluator
	if cfg.EvalData != "" {
		if evals, err = cfg.evaluator(o.Evaluation, initCk, m, log); err != nil {
			return nil, err
		}
		co.Metrics = evals
	}
	c, err := coord.New(co)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if evals != nil {
		evals.Start(c)
	}
	if st, err := ReadStatus(ctx, cfg.State); err == nil {
		m.Seed(st)
	}
	rev, err := pki.OpenRevocations(pki.RevocationsOptions{Path: crlP, CA: id.CA, Numbers: c})
	if err != nil {
		return nil, err
	}
	// Served, the list's absence would refuse every client: said now.
	if _, err := rev.IsRevoked(id.Leaf.SerialNumber); err != nil {
		return nil, fmt.Errorf("--crl %s: %w (veil fed certs crl --pki DIR signs a list for an authority folder that has none)", crlP, err)
	}
	srv, err := NewServer(ServerOptions{Coordinator: c, StatePath: cfg.State, Identity: id,
		Revocations: rev, Listen: cfg.Listen, MetricsListen: cfg.MetricsListen, MetricsTLS: cfg.MetricsTLS, Metrics: m,
		Linger: time.Duration(cfg.Linger), AwaitFinalDownload: cfg.AwaitFinalDownload, Logger: log})
	if err != nil {
		return nil, err
	}
	if o.Serving != nil {
		o.Serving(srv.Addr())
	}
	runErr := srv.Run(ctx)
	if evals != nil {
		evals.Stop(runErr == nil)
	}
	if runErr != nil {
		if ctx.Err() != nil {
			_, closed := c.Round()
			return nil, &StoppedError{Closed: int(closed), Rounds: cfg.Rounds, State: cfg.State, Err: runErr}
		}
		return nil, runErr
	}
	return cfg.result(ctx, c, initCk, ddpSrv)
}

// checkFiles checks the settings that name files: --out and --eval-data
// need --init, --eval-data an LFW folder, and a new --state an --init.
func (c *Config) checkFiles() error {
	if (c.Out != "" || c.EvalData != "") && c.Init == "" {
		if c.EvalData != "" {
			return errors.New("--eval-data needs --init: the evaluation rebuilds the initial checkpoint's network")
		}
		return errors.New("--out needs --init: the final model is written as a checkpoint of the initial one's network")
	}
	if c.EvalData != "" {
		if _, err := os.Stat(filepath.Join(c.EvalData, "pairsDevTest.txt")); err != nil {
			return fmt.Errorf("--eval-data %s: no LFW development pairs there (pairsDevTest.txt); give an LFW-layout folder", c.EvalData)
		}
	}
	if _, err := os.Stat(c.State); errors.Is(err, os.ErrNotExist) && c.Init == "" {
		return fmt.Errorf("--state %s is new, so the coordinator needs its initial model: give --init FILE "+
			"(veil fed init-model --out FILE makes one)", c.State)
	}
	return nil
}

// loadInit loads --init (nil without one) into co after checking that it
// may start this federation: under DP, public or DP-trained, and fit for
// the state file.
func (c *Config) loadInit(ctx context.Context, co *coord.Options) (*checkpoint.Checkpoint, error) {
	if c.Init == "" {
		return nil, nil
	}
	ck, err := checkpoint.Load(c.Init)
	if err != nil {
		return nil, fmt.Errorf("--init: %w", err)
	}
	if co.Init, err = WeightsFromCheckpoint(ck); err != nil {
		return nil, fmt.Errorf("--init %s: %w", c.Init, err)
	}
	if err := CheckInit(ck, c.DP); err != nil {
		return nil, fmt.Errorf("--init %s: %w", c.Init, err)
	}
	if err := CheckInitState(ctx, c.State, ck); err != nil {
		return nil, fmt.Errorf("--init %s: %w", c.Init, err)
	}
	return ck, nil
}

// evaluator makes the --eval-data evaluation of the head initCk starts.
func (c *Config) evaluator(networks func(string) (training.Describers, *engine.Engine, error), initCk *checkpoint.Checkpoint,
	m *Metrics, log *slog.Logger) (*Evaluator, error) {
	if networks == nil {
		return nil, errors.New("--eval-data: no face networks to describe the evaluation's images with")
	}
	log.Info("loading the evaluation pairs", "data", c.EvalData)
	features := initCk.Header.Model.Features
	if features == "" {
		features = "descriptor"
	}
	d, eng, err := networks(features)
	if err != nil {
		return nil, err
	}
	ev, err := NewEvaluator(EvaluatorOptions{Init: initCk, LFW: c.EvalData, CentreImages: c.CentreImages, CentreCount: c.CentreCount,
		Describers: d, Observer: m, Metrics: m, Engine: eng, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--eval-data %s: %w", c.EvalData, err)
	}
	return ev, nil
}

// result reads the finished run's state and writes the final model.
func (c *Config) result(ctx context.Context, co *coord.Coordinator, initCk *checkpoint.Checkpoint, ddpSrv *ddpserver.Server) (*CoordinatorResult, error) {
	st, err := ReadStatus(ctx, c.State)
	if err != nil {
		return nil, err
	}
	res := &CoordinatorResult{Status: st}
	if c.asyncStrategy() {
		// No rounds: every model version an asynchronous run made.
		_, res.Done = co.Round()
	}
	for _, r := range st.GetRounds() {
		switch r.GetState() {
		case "done":
			res.Done++
		case "failed":
			res.Failed++
		}
	}
	fed, plog, err := ReadFederationPrivacy(ctx, c.State)
	if err != nil {
		return nil, err
	}
	if c.DP || fed.DPRounds > 0 || fed.Clients > 0 {
		res.Privacy = fed
	}
	if c.Out == "" {
		return res, nil
	}
	w, _ := co.Model()
	mo := ModelOptions{DP: c.DP, Unit: train.Unit(c.Unit), Delta: c.Delta, Clip: c.Clip, NoiseMultiplier: c.NoiseMultiplier}
	if ddpSrv != nil {
		// The weights' moving average, as veil train writes, with the
		// distributed mechanism's effective σ.
		w, mo.NoiseMultiplier = ddpSrv.Average(), ddpSrv.Privacy().NoiseMultiplier
	}
	out, err := FederatedModel(initCk, w, plog, mo)
	if err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	if err := out.Save(c.Out); err != nil {
		return nil, err
	}
	res.Out = c.Out
	if res.Privacy != nil {
		res.Privacy = out.Header.Federation
	}
	return res, nil
}

// ReadStatus reads a coordinator's state file (also while it runs),
// saying so when there is none at path or the file is not one.
func ReadStatus(ctx context.Context, path string) (*fedpb.StatusResponse, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no coordinator's state file at %s (veil fed coordinator --state makes one; or ask a running coordinator with --coordinator HOST:PORT)", path)
	} else if err != nil {
		return nil, fmt.Errorf("the coordinator's state file: %w", err)
	}
	notState := func(err error) error {
		if m := err.Error(); strings.Contains(m, "not a database") || strings.Contains(m, "no such table") {
			return fmt.Errorf("%s is not a coordinator's state file (veil fed coordinator --state makes one)", path)
		}
		return err
	}
	db, err := coord.OpenStatus(path)
	if err != nil {
		return nil, notState(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := coord.ReadStatus(ctx, db)
	if err != nil {
		return nil, notState(err)
	}
	return st, nil
}
