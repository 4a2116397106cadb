package fedbench

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/secround"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/internal/cputime"
)

// The secure aggregation modes of Settings.SecAgg.
const (
	SecAggOff     = "off"
	SecAggMasking = secround.Masking
)

// sparseGraphClients is the number of clients above which the
// coordinator's default masking graph is sparse (coord.SecAggOptions):
// the bench's clients then accept it (client.SecAggPolicy.SparseGraphs),
// which a client does not by default.
const sparseGraphClients = 16

// SparseGraphs reports whether s's clients accept a sparse masking graph:
// with masking and more than 16 clients, the coordinator's default graph
// is sparse and the bench's clients opt in to it explicitly.
func (s Settings) SparseGraphs() bool {
	return s.SecAgg == SecAggMasking && s.Clients > sparseGraphClients
}

// validateSecAgg checks s's secure aggregation mode.
func (s *Settings) validateSecAgg() error {
	switch s.SecAgg {
	case "", SecAggOff:
		s.SecAgg = SecAggOff
		return nil
	case SecAggMasking:
	default:
		return fmt.Errorf("fedbench: secure aggregation %q: want %s or %s", s.SecAgg, SecAggOff, SecAggMasking)
	}
	if !s.TLS {
		return errors.New("fedbench: masking needs mutual TLS: the clients sign their key adverts with their certificates' keys and the coordinator relays the certificates")
	}
	if s.Clients < 3 {
		return fmt.Errorf("fedbench: masking needs rounds of at least 3 clients, got %d", s.Clients)
	}
	return nil
}

// secAggOptions are the coordinator's masking options for s (nil without
// masking): the coordinator's defaults (graph, threshold, 32 bits), T = 2,
// the clients' authority from s.Dir.
func secAggOptions(s Settings) (*coord.SecAggOptions, error) {
	if s.SecAgg != SecAggMasking {
		return nil, nil
	}
	pem, err := os.ReadFile(filepath.Join(s.Dir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, errors.New("fedbench: no certificate in ca.crt")
	}
	return &coord.SecAggOptions{Mode: SecAggMasking, MinHonest: 2, Roots: roots}, nil
}

// fixedTrainer is a client.Trainer that trains nothing: it plans the
// bench's DP and returns a precomputed update.
type fixedTrainer struct {
	update wire.Weights
}

func (fixedTrainer) Plan(*fedpb.RoundConfig, float64) (*fedpb.DPParams, error) {
	return proto.Clone(clientDP).(*fedpb.DPParams), nil
}

func (t fixedTrainer) Train(_ context.Context, _ wire.Weights, _ *fedpb.RoundConfig, plan *fedpb.DPParams) (client.Update, error) {
	return client.Update{Weights: t.update.Clone(), DP: plan}, nil
}

// countingCreds counts the bytes a client's connection writes on the
// wire (TLS records included).
type countingCreds struct {
	credentials.TransportCredentials
	n *atomic.Int64
}

func (c countingCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.TransportCredentials.ClientHandshake(ctx, authority, countConn{Conn: conn, n: c.n})
}

func (c countingCreds) Clone() credentials.TransportCredentials {
	return countingCreds{TransportCredentials: c.TransportCredentials.Clone(), n: c.n}
}

// driveSecure runs s.Clients real federation clients (package
// fed/client: its secure round, adverts signed with each client's
// certificate key, shares, quantisation with its noise share, masking and
// unmasking) against the coordinator at addr until the coordinator ends
// the run, each training nothing but returning a precomputed update. The
// phases run in sequence without a barrier: updates per second are worked
// out from the coordinator's round times (ResultOf), the CPU and bytes
// are the whole run's.
func driveSecure(ctx context.Context, s Settings, addr string, layout wire.Weights, seed uint64) (*DriveReport, error) {
	var updates [distinct]wire.Weights
	for k := range updates {
		updates[k] = layout.Clone()
		fill(updates[k], seed+uint64(k), 0.01)
	}
	var written atomic.Int64
	var accepted atomic.Int64
	clients := make([]*client.Client, s.Clients)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range clients {
		name := ClientName(i)
		id, err := pki.LoadIdentity(filepath.Join(s.Dir, name+".crt"), filepath.Join(s.Dir, name+".key"), filepath.Join(s.Dir, "ca.crt"))
		if err != nil {
			return nil, err
		}
		pol := client.DefaultPolicy(dp.Budget{Epsilon: benchBudget, Delta: clientDP.GetDelta()})
		pol.SecAgg = client.SecAggPolicy{Require: true, MinHonest: 2, SparseGraphs: s.SparseGraphs()}
		dir := filepath.Join(s.Dir, "clients", name)
		c, err := client.New(client.Options{Addr: addr, ServerName: "localhost", Name: name, Identity: id, Policy: pol,
			Creds: countingCreds{TransportCredentials: credentials.NewTLS(pki.ClientTLS(id, "localhost")), n: &written},
			Dir:   dir, LedgerDir: filepath.Join(dir, "ledgers"), DataSet: name, Trainer: fixedTrainer{update: updates[i%distinct]},
			MaxModelBytes: uint64(8*layout.Len() + 1<<20),
			Progress: func(ev string) {
				if isAccepted(ev) {
					accepted.Add(1)
				}
			}})
		if err != nil {
			return nil, err
		}
		clients[i] = c
	}
	cpu0, coord0 := cputime.Process(), coordinatorCPU(s)
	start := time.Now()
	errs := make(chan error, len(clients))
	for i, c := range clients {
		go func() {
			if err := c.Run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", ClientName(i), err)
				return
			}
			errs <- nil
		}()
	}
	var all []error
	for range clients {
		all = append(all, <-errs)
	}
	if err := errors.Join(all...); err != nil {
		return nil, err
	}
	rep := &DriveReport{PayloadBytes: 4 * layout.Len(), Updates: int(accepted.Load()), SecAgg: SecAggMasking, SparseGraphs: s.SparseGraphs(),
		RunSeconds: time.Since(start).Seconds(), ClientSubmitCPUSeconds: (cputime.Process() - cpu0).Seconds(),
		CoordinatorSubmitCPUSeconds: (coordinatorCPU(s) - coord0).Seconds()}
	if rep.Updates != s.Clients*s.Rounds {
		return nil, fmt.Errorf("fedbench: %d masked vectors accepted, want %d clients × %d rounds", rep.Updates, s.Clients, s.Rounds)
	}
	rep.BytesPerUpdate = float64(written.Load()) / float64(rep.Updates)
	return rep, nil
}

// isAccepted tells the client's progress event of an accepted masked
// vector.
func isAccepted(ev string) bool {
	return strings.HasPrefix(ev, "round ") && strings.Contains(ev, ": masked vector accepted")
}

// secureResultOf is ResultOf for masking rounds: their phases run one
// after another with no barrier, so updates per second are the updates
// over the rounds' summed wall time at the coordinator (start to close:
// task, downloads, adverts, shares, masked vectors, unmasking and the
// unmasked sum), to set beside a plaintext run's updates over its round
// time (Result.RoundUpdatesPerS).
func secureResultOf(s Settings, sr *ServeReport, dr *DriveReport) Result {
	r := Result{Clients: s.Clients, Params: s.Params, RoundS: mean(sr.RoundSeconds), BytesPerUpdate: dr.BytesPerUpdate, TLS: s.TLS,
		Rounds: s.Rounds, PayloadBytes: dr.PayloadBytes, AggregateS: mean(sr.AggregateSeconds), SecAgg: SecAggMasking,
		SparseGraphs: dr.SparseGraphs}
	var total float64
	for _, x := range sr.RoundSeconds {
		total += x
	}
	if total > 0 {
		r.UpdatesPerS = float64(dr.Updates) / total
		r.RoundUpdatesPerS = r.UpdatesPerS
	}
	if n := min(len(sr.Timings), s.Rounds); n > 0 {
		for _, t := range sr.Timings[:n] {
			r.Split.FoldS += t.FoldS / float64(n)
			r.Split.CommitS += t.CommitS / float64(n)
			r.Split.CloseS += t.CloseS / float64(n)
			if t.LastArrivalNs != 0 {
				r.Split.LastUpdateToCloseS += float64(t.ClosedNs-t.LastArrivalNs) / 1e9 / float64(n)
			}
		}
	}
	return r
}
