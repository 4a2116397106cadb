// Package fedbench measures the federation's coordinator: N simulated
// clients send precomputed updates of a model's size to a real coordinator
// (package coord, its SQLite state file, its gRPC service) over real gRPC
// on loopback, with or without mutual TLS, for a few rounds.
//
// The two halves run apart so that the coordinator's memory can be measured
// alone: Serve runs the coordinator (veil bench fed starts it in a child
// process and reads its peak resident set from the kernel), Drive runs the
// clients. Prepare makes the certificates both use.
//
// What a round looks like to the coordinator is what a real round costs it,
// minus the clients' training: every client holds its stream of work open
// (Subscribe) and is pushed the round's task, downloads the model, and once every client has it (a
// barrier, so that the submissions are measured on their own) all send
// their update at once: a header with the DP metadata of what they "ran"
// (the coordinator charges each client's ledger from it) and the payload
// in 1 MiB chunks. The coordinator decodes, checks the SHA-256, the
// finiteness and the norm of each, charges and folds it in group-committed
// SQLite transactions, and aggregates when all are counted.
//
// Measures: updates per second is the updates accepted divided by the time
// from the barrier's release to the last acceptance (summed over rounds);
// a round's wall time is the coordinator's own, from the round's start to
// its close (pushing the task, downloads, submissions and aggregation:
// all but client compute); bytes per update are the bytes the clients' sockets
// wrote during their submissions (TLS records, HTTP/2 frames, protobuf
// framing and the payload), divided by the updates.
//
// Without TLS the service identifies a client by a request header
// (coord.Coordinator.LoopbackService): that mode exists for this
// measurement only, listens on loopback and answers loopback callers only.
package fedbench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/internal/cputime"
)

// HeadParams is the number of values of the embedding head federated by
// veil fed sim and veil fed client (2048→256→128 on age/gender features,
// with the distillation loss's centre vector).
const HeadParams = 557824

// Layout returns the tensors (names and shapes, zero values) of a model of
// params values: the federated embedding head's own when params is
// HeadParams (the layout of ops.InitialHead, the model veil fed
// init-model writes), otherwise one tensor "w" of params values.
func Layout(params int) (wire.Weights, error) {
	if params < 1 {
		return nil, fmt.Errorf("fedbench: a model needs at least one value, got %d", params)
	}
	if params != HeadParams {
		return wire.Weights{{Name: "w", Shape: []int{params}, Values: make([]float32, params)}}, nil
	}
	ck, err := ops.InitialHead(ops.InitialHeadOptions{})
	if err != nil {
		return nil, err
	}
	w, err := ops.WeightsFromCheckpoint(ck)
	if err != nil {
		return nil, err
	}
	if w.Len() != HeadParams {
		return nil, fmt.Errorf("fedbench: the head has %d values, not %d", w.Len(), HeadParams)
	}
	for i := range w {
		clear(w[i].Values)
	}
	return w, nil
}

// CoordinatorName is the coordinator certificate's name in the folder
// Prepare writes.
const CoordinatorName = "coordinator"

// ClientName is the name (and federation id) of client i (0-based).
func ClientName(i int) string { return fmt.Sprintf("bench-client-%03d", i+1) }

// Prepare makes a certificate authority in dir (which must not hold one),
// a coordinator certificate for loopback and one client certificate per
// client.
func Prepare(dir string, clients int) error {
	if clients < 1 {
		return fmt.Errorf("fedbench: at least one client, got %d", clients)
	}
	ca, err := pki.Init(dir, "veil-bench")
	if err != nil {
		return err
	}
	if _, err := ca.Issue(pki.IssueOptions{Name: CoordinatorName, Role: pki.Server, Validity: 24 * time.Hour}); err != nil {
		return err
	}
	for i := range clients {
		if _, err := ca.Issue(pki.IssueOptions{Name: ClientName(i), Role: pki.Client, Validity: 24 * time.Hour}); err != nil {
			return err
		}
	}
	return nil
}

// Settings are what both halves must agree on.
type Settings struct {
	// Clients is the number of simulated clients (default 100).
	Clients int
	// Params is the model's size (default HeadParams; see Layout).
	Params int
	// Rounds is the number of rounds (default 3).
	Rounds int
	// TLS turns mutual TLS on (certificates from Prepare in Dir).
	TLS bool
	// Dir holds the certificates (from Prepare) and the state file.
	Dir string
	// SecAgg is the rounds' secure aggregation: "off" (or "", each update
	// in plaintext) or "masking" (the real clients' secure round; needs
	// TLS and at least 3 clients; see driveSecure).
	SecAgg string
	// CoordinatorCPU, if set, returns the processor time the coordinator
	// has used so far: Drive reads it at each submission phase's start
	// and end (DriveReport.CoordinatorSubmitCPUSeconds). Drive only.
	CoordinatorCPU func() time.Duration
	// MemoryLimit is the coordinator child's soft memory limit in bytes
	// (0: none of its own), which RunOptions.ChildCommand passes on and
	// the child gives to runtime/debug.SetMemoryLimit. Child runs only.
	MemoryLimit int64
}

func (s *Settings) validate() error {
	if s.Clients == 0 {
		s.Clients = 100
	}
	if s.Params == 0 {
		s.Params = HeadParams
	}
	if s.Rounds == 0 {
		s.Rounds = 3
	}
	if s.Clients < 1 || s.Params < 1 || s.Rounds < 1 {
		return fmt.Errorf("fedbench: clients, params and rounds must be positive, got %d, %d and %d", s.Clients, s.Params, s.Rounds)
	}
	if s.Dir == "" {
		return errors.New("fedbench: a working folder is required")
	}
	return s.validateSecAgg()
}

// The DP the simulated clients state (the coordinator charges their
// ledgers from it; the values are a plausible local epoch).
var (
	benchDP     = &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity", NoiseMultiplier: 1}
	clientDP    = &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity", NoiseMultiplier: 1, SamplingRate: 0.05, Steps: 20}
	benchBudget = 1e6
)

// clientHeader names the client in a request without TLS.
const clientHeader = "veil-bench-client"

// ServeReport is what the coordinator saw.
type ServeReport struct {
	// RoundSeconds is each round's wall time, start to close.
	RoundSeconds []float64 `json:"round_s"`
	// AggregateSeconds is each round's aggregation time.
	AggregateSeconds []float64 `json:"aggregate_s"`
	// Accepted and Refused count updates.
	Accepted int `json:"accepted"`
	Refused  int `json:"refused"`
	// BytesAccepted is the payload bytes of the accepted updates.
	BytesAccepted int64 `json:"bytes_accepted"`
	// Timings is where each round's time went at the coordinator.
	Timings []ServeTiming `json:"timings"`
}

// ServeTiming is one round's coordinator.RoundTiming: wall-clock instants
// in Unix nanoseconds (the driver's are comparable: both halves run on one
// machine), durations in seconds.
type ServeTiming struct {
	StartedNs     int64   `json:"started_unix_ns"`
	ClosedNs      int64   `json:"closed_unix_ns"`
	LastArrivalNs int64   `json:"last_arrival_unix_ns"`
	FoldS         float64 `json:"fold_s"`
	CommitS       float64 `json:"commit_s"`
	CloseS        float64 `json:"close_s"`
}

type observer struct {
	mu sync.Mutex
	r  ServeReport
}

func (o *observer) RoundClosed(state string, d, agg time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.r.RoundSeconds = append(o.r.RoundSeconds, d.Seconds())
	o.r.AggregateSeconds = append(o.r.AggregateSeconds, agg.Seconds())
}

func (o *observer) UpdateAccepted(_ string, bytes int, _ float64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.r.Accepted++
	o.r.BytesAccepted += int64(bytes)
}

func (o *observer) UpdateRefused(string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.r.Refused++
}

func (o *observer) BytesOut(int) {}

func (o *observer) RoundTimed(t coord.RoundTiming) {
	o.mu.Lock()
	defer o.mu.Unlock()
	st := ServeTiming{StartedNs: t.Started.UnixNano(), ClosedNs: t.Closed.UnixNano(), FoldS: t.Fold.Seconds(), CommitS: t.Commit.Seconds(),
		CloseS: t.Close.Seconds()}
	if !t.LastArrival.IsZero() {
		st.LastArrivalNs = t.LastArrival.UnixNano()
	}
	o.r.Timings = append(o.r.Timings, st)
}

// Serve runs a coordinator for s on listen (e.g. 127.0.0.1:0), calls
// ready with its address once it accepts connections, and returns what it
// saw when all s.Rounds rounds have closed (or ctx ends). Its state file is
// new, in s.Dir.
func Serve(ctx context.Context, s Settings, listen string, ready func(addr string)) (*ServeReport, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	layout, err := Layout(s.Params)
	if err != nil {
		return nil, err
	}
	init := layout.Clone()
	fill(init, 1, 0.01)
	obs := &observer{}
	sec, err := secAggOptions(s)
	if err != nil {
		return nil, err
	}
	state := filepath.Join(s.Dir, fmt.Sprintf("bench-%d.db", time.Now().UnixNano()))
	co, err := coord.New(coord.Options{StatePath: state, Init: init, Strategy: strategy.Options{Name: "fedavg", DP: true},
		Rounds: s.Rounds, Fraction: 1, MinAvailable: s.Clients, MinUpdates: s.Clients, RoundTimeout: 30 * time.Minute,
		Task:          coord.Task{LocalEpochs: 1, LearningRate: 0.01, Batch: 32, DP: benchDP},
		MaxUpdateNorm: 1e9, Available: 10 * time.Minute, Metrics: obs, SecAgg: sec})
	if err != nil {
		return nil, err
	}
	defer co.Close()
	var srv *grpc.Server
	if s.TLS {
		id, err := pki.LoadIdentity(filepath.Join(s.Dir, CoordinatorName+".crt"), filepath.Join(s.Dir, CoordinatorName+".key"), filepath.Join(s.Dir, "ca.crt"))
		if err != nil {
			return nil, err
		}
		rev := pki.NewRevocations(filepath.Join(s.Dir, "revoked.crl"), id.CA)
		srv = grpc.NewServer(append(co.ServerOptions(), grpc.Creds(credentials.NewTLS(pki.ServerTLS(id, rev))))...)
		fedpb.RegisterCoordinatorServer(srv, co.Service(rev))
	} else {
		// The coordinator's options drop gRPC's read buffer because TLS
		// buffers; a plain TCP connection does not, so it gets gRPC's
		// default buffer back (a later option wins).
		srv = grpc.NewServer(append(co.ServerOptions(), grpc.ReadBufferSize(32<<10))...)
		fedpb.RegisterCoordinatorServer(srv, co.LoopbackService(func(ctx context.Context) (string, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			if v := md.Get(clientHeader); len(v) == 1 && v[0] != "" {
				return v[0], nil
			}
			return "", errors.New("no client name")
		}))
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	go srv.Serve(ln)
	// The last round closes as soon as its last update is folded in,
	// which can be before that update's handler has sent its answer: a
	// plain Stop would cut the connection under it and the client would
	// see "error reading from server: EOF" (TestBenchFedInProcess failed
	// so about once in 12 runs). Let the handlers finish, for a while.
	defer func() {
		stopped := make(chan struct{})
		go func() {
			srv.GracefulStop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			srv.Stop()
		}
	}()
	if ready != nil {
		ready(ln.Addr().String())
	}
	if err := co.Run(ctx); err != nil {
		return nil, err
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	r := obs.r
	return &r, nil
}

// fill sets w's values to independent uniform values in [-scale, scale)
// from a seeded generator.
func fill(w wire.Weights, seed uint64, scale float32) {
	rng := mrand.New(mrand.NewPCG(seed, 0x5eed))
	for i := range w {
		for j := range w[i].Values {
			w[i].Values[j] = scale * (2*rng.Float32() - 1)
		}
	}
}

// DriveReport is what the clients measured.
type DriveReport struct {
	// Updates is the number of updates accepted.
	Updates int `json:"updates"`
	// SubmitSeconds is each round's submission phase: from the barrier's
	// release to the last acceptance.
	SubmitSeconds []float64 `json:"submit_s"`
	// DownloadSeconds is each round's time from the first client given
	// the task to the last one holding the model.
	DownloadSeconds []float64 `json:"download_s"`
	// UpdatesPerSecond is Updates over the summed submission phases.
	UpdatesPerSecond float64 `json:"updates_per_s"`
	// BytesPerUpdate is the bytes written by the clients' sockets during
	// their submissions, per update.
	BytesPerUpdate float64 `json:"bytes_per_update"`
	// PayloadBytes is an update's payload (4 bytes per value).
	PayloadBytes int `json:"payload_bytes"`
	// ClientSubmitCPUSeconds is the processor time this process (the
	// simulated clients, and the coordinator too when it runs in the same
	// process) used during the submission phases, summed over rounds.
	ClientSubmitCPUSeconds float64 `json:"client_submit_cpu_s"`
	// CoordinatorSubmitCPUSeconds is the coordinator's processor time
	// during the submission phases, summed over rounds (0 without
	// Settings.CoordinatorCPU).
	CoordinatorSubmitCPUSeconds float64 `json:"coordinator_submit_cpu_s,omitempty"`
	// Phases are each round's instants as the clients saw them (none
	// with masking).
	Phases []DrivePhases `json:"phases"`
	// SecAgg is "masking" for a run of masking rounds (driveSecure):
	// there, ClientSubmitCPUSeconds, CoordinatorSubmitCPUSeconds and
	// BytesPerUpdate cover the whole run (enrolment, downloads, every
	// phase), and RunSeconds is its wall time.
	SecAgg       string  `json:"secagg,omitempty"`
	SparseGraphs bool    `json:"sparse_graphs,omitempty"`
	RunSeconds   float64 `json:"run_s,omitempty"`
}

// DrivePhases are one round's instants at the clients, in Unix
// nanoseconds: the last client given its task, the last holding the
// model, and the submissions' start (the barrier's release).
type DrivePhases struct {
	LastTaskNs  int64 `json:"last_task_unix_ns"`
	LastModelNs int64 `json:"last_model_unix_ns"`
	ReleaseNs   int64 `json:"release_unix_ns"`
}

// Split is where a round's time goes, in seconds, averaged over the
// rounds: what the two halves measured put together (both read the same
// machine's wall clock).
type Split struct {
	// WaitS is from the round's start to the last client holding its
	// task (the push).
	WaitS float64 `json:"wait_s"`
	// DownloadS is from then to the last client holding the model.
	DownloadS float64 `json:"download_s"`
	// UploadS is from the submissions' start to the last counted update
	// received whole at the coordinator.
	UploadS float64 `json:"upload_s"`
	// FoldS and CommitS are the coordinator's folds (checks, charges, the
	// running sum) and their commits and log wipes; they overlap the
	// upload of other updates.
	FoldS   float64 `json:"fold_s"`
	CommitS float64 `json:"commit_s"`
	// CloseS is the close: aggregation, its commit and wipe.
	CloseS float64 `json:"close_s"`
	// LastUpdateToCloseS is from the last counted update's arrival to
	// the round's close being committed: folding and committing it, then
	// closing.
	LastUpdateToCloseS float64 `json:"last_update_to_close_s"`
}

// SplitOf puts the halves' timings together, round by round.
func SplitOf(sr *ServeReport, dr *DriveReport) Split {
	var sp Split
	n := min(len(sr.Timings), len(dr.Phases))
	if n == 0 {
		return sp
	}
	sec := func(a, b int64) float64 { return float64(b-a) / 1e9 }
	for i := range n {
		t, p := sr.Timings[i], dr.Phases[i]
		sp.WaitS += sec(t.StartedNs, p.LastTaskNs)
		sp.DownloadS += sec(p.LastTaskNs, p.LastModelNs)
		sp.FoldS += t.FoldS
		sp.CommitS += t.CommitS
		sp.CloseS += t.CloseS
		if t.LastArrivalNs != 0 {
			sp.UploadS += sec(p.ReleaseNs, t.LastArrivalNs)
			sp.LastUpdateToCloseS += sec(t.LastArrivalNs, t.ClosedNs)
		}
	}
	f := float64(n)
	sp.WaitS, sp.DownloadS, sp.UploadS, sp.FoldS, sp.CommitS, sp.CloseS, sp.LastUpdateToCloseS =
		sp.WaitS/f, sp.DownloadS/f, sp.UploadS/f, sp.FoldS/f, sp.CommitS/f, sp.CloseS/f, sp.LastUpdateToCloseS/f
	return sp
}

// distinct is the number of different precomputed updates the clients
// cycle through (the coordinator cannot tell; it keeps the driver's
// memory small).
const distinct = 4

type benchClient struct {
	name    string
	conn    *grpc.ClientConn
	api     fedpb.CoordinatorClient
	ctx     context.Context
	written atomic.Int64
	// work is the client's stream of work (Subscribe).
	work grpc.ServerStreamingClient[fedpb.Push]
}

type countConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// Drive runs s.Clients simulated clients against the coordinator at addr
// for s.Rounds rounds.
func Drive(ctx context.Context, s Settings, addr string) (*DriveReport, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	layout, err := Layout(s.Params)
	if err != nil {
		return nil, err
	}
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, err
	}
	if s.SecAgg == SecAggMasking {
		return driveSecure(ctx, s, addr, layout, binary.LittleEndian.Uint64(seed[:]))
	}
	type update struct {
		header *fedpb.WeightsHeader
		chunks [][]byte
	}
	var updates [distinct]update
	for k := range updates {
		w := layout.Clone()
		fill(w, binary.LittleEndian.Uint64(seed[:])+uint64(k), 0.01)
		p := w.Payload()
		var chunks [][]byte
		for off := 0; off < len(p); off += wire.DefaultChunk {
			chunks = append(chunks, p[off:min(off+wire.DefaultChunk, len(p))])
		}
		updates[k] = update{header: w.Header(), chunks: chunks}
	}
	clients := make([]*benchClient, s.Clients)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.conn.Close()
			}
		}
	}()
	for i := range clients {
		c := &benchClient{name: ClientName(i), ctx: ctx}
		creds := insecure.NewCredentials()
		if s.TLS {
			id, err := pki.LoadIdentity(filepath.Join(s.Dir, c.name+".crt"), filepath.Join(s.Dir, c.name+".key"), filepath.Join(s.Dir, "ca.crt"))
			if err != nil {
				return nil, err
			}
			creds = credentials.NewTLS(pki.ClientTLS(id, "localhost"))
		} else {
			c.ctx = metadata.AppendToOutgoingContext(ctx, clientHeader, c.name)
		}
		dial := func(ctx context.Context, a string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
			if err != nil {
				return nil, err
			}
			return countConn{Conn: conn, n: &c.written}, nil
		}
		if c.conn, err = grpc.NewClient(addr, append(wire.DialOptions(), grpc.WithTransportCredentials(creds), grpc.WithContextDialer(dial))...); err != nil {
			return nil, err
		}
		c.api = fedpb.NewCoordinatorClient(c.conn)
		clients[i] = c
	}
	// Join (enrolment and the handshakes), all at once.
	if err := each(clients, func(i int, c *benchClient) error {
		_, err := c.api.Join(c.ctx, &fedpb.JoinRequest{ProtocolVersion: fedpb.ProtocolVersion, BudgetEpsilon: benchBudget,
			BudgetDelta: clientDP.GetDelta(), PrivacyUnit: clientDP.GetPrivacyUnit()})
		if err != nil {
			return fmt.Errorf("%s joining: %w", c.name, err)
		}
		if c.work, err = c.api.Subscribe(c.ctx, &fedpb.SubscribeRequest{ProtocolVersion: fedpb.ProtocolVersion}); err != nil {
			return fmt.Errorf("%s subscribing: %w", c.name, err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	rep := &DriveReport{PayloadBytes: 4 * layout.Len()}
	var submitTotal time.Duration
	var written int64
	var last uint64
	for range s.Rounds {
		tasks := make([]*fedpb.RoundConfig, len(clients))
		var mu sync.Mutex
		var firstTask, lastTask, lastModel time.Time
		// Wait for the task to be pushed and download the model.
		if err := each(clients, func(i int, c *benchClient) error {
			for tasks[i] == nil {
				p, err := c.work.Recv()
				if err != nil {
					return fmt.Errorf("%s waiting for its task: %w", c.name, err)
				}
				if d := p.GetDone(); d != "" {
					return fmt.Errorf("%s: the coordinator ended the run early: %s", c.name, d)
				}
				if t := p.GetTask(); t != nil && t.GetRound() > last {
					tasks[i] = t
				}
			}
			now := time.Now()
			mu.Lock()
			if firstTask.IsZero() || now.Before(firstTask) {
				firstTask = now
			}
			if now.After(lastTask) {
				lastTask = now
			}
			mu.Unlock()
			if err := download(c, tasks[i].GetModelVersion()); err != nil {
				return err
			}
			now = time.Now()
			mu.Lock()
			if now.After(lastModel) {
				lastModel = now
			}
			mu.Unlock()
			return nil
		}); err != nil {
			return nil, err
		}
		rep.DownloadSeconds = append(rep.DownloadSeconds, lastModel.Sub(firstTask).Seconds())
		phases := DrivePhases{LastTaskNs: lastTask.UnixNano(), LastModelNs: lastModel.UnixNano()}
		last = tasks[0].GetRound()
		before := make([]int64, len(clients))
		for i, c := range clients {
			before[i] = c.written.Load()
		}
		// Submit, all at once.
		cpu0, coordCPU0 := cputime.Process(), coordinatorCPU(s)
		start := time.Now()
		phases.ReleaseNs = start.UnixNano()
		rep.Phases = append(rep.Phases, phases)
		if err := each(clients, func(i int, c *benchClient) error {
			u := updates[i%distinct]
			h := &fedpb.UpdateHeader{ProtocolVersion: fedpb.ProtocolVersion, Round: tasks[i].GetRound(), ModelVersion: tasks[i].GetModelVersion(),
				Examples: 100, Dp: clientDP, Weights: u.header}
			resp, err := submit(c, h, u.chunks)
			if err != nil {
				return fmt.Errorf("%s submitting: %w", c.name, err)
			}
			if !resp.GetAccepted() {
				return fmt.Errorf("%s: the coordinator refused the update: %s", c.name, resp.GetReason())
			}
			return nil
		}); err != nil {
			return nil, err
		}
		d := time.Since(start)
		rep.ClientSubmitCPUSeconds += (cputime.Process() - cpu0).Seconds()
		rep.CoordinatorSubmitCPUSeconds += (coordinatorCPU(s) - coordCPU0).Seconds()
		submitTotal += d
		rep.SubmitSeconds = append(rep.SubmitSeconds, d.Seconds())
		rep.Updates += len(clients)
		for i, c := range clients {
			written += c.written.Load() - before[i]
		}
	}
	rep.UpdatesPerSecond = float64(rep.Updates) / submitTotal.Seconds()
	rep.BytesPerUpdate = math.Round(float64(written) / float64(rep.Updates))
	return rep, nil
}

func coordinatorCPU(s Settings) time.Duration {
	if s.CoordinatorCPU == nil {
		return 0
	}
	return s.CoordinatorCPU()
}

// each runs f for every client concurrently and returns the first error.
func each(clients []*benchClient, f func(i int, c *benchClient) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(clients))
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i, c)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func download(c *benchClient, version string) error {
	stream, err := c.api.DownloadModel(c.ctx, &fedpb.ModelRequest{ProtocolVersion: fedpb.ProtocolVersion, ModelVersion: version})
	if err != nil {
		return fmt.Errorf("%s downloading the model: %w", c.name, err)
	}
	for {
		_, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s downloading the model: %w", c.name, err)
		}
	}
}

func submit(c *benchClient, h *fedpb.UpdateHeader, chunks [][]byte) (*fedpb.SubmitResponse, error) {
	return client.SendPayload(c.ctx, c.api, h, func(send func([]byte) error) error {
		for _, b := range chunks {
			if err := send(b); err != nil {
				return err
			}
		}
		return nil
	})
}
