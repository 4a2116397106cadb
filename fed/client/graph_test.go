package client_test

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/secround"
	"github.com/veil-privacy/veil/secagg/masking"
)

// TestGroundGraphSeedIsRefused plays a coordinator that controls
// client-2 and client-3 and wants client-1's masked vector alone: it
// offers a sparse graph (k = 2 among 4 clients, t = 3) and tries graph
// seeds until client-1's two neighbours are exactly its own clients, so
// that every pairwise mask on client-1's vector is known to it and
// unmasking client-1 as a survivor reveals its update. The owners trust
// T = 2 honest clients of the roster, so 2 may collude: on this graph
// they can surround a client (2 is not fewer than k), so the seed
// matters, and the coordinator chose it. Over gRPC with mutual TLS,
// every client refuses the round at the task, naming the graph setting,
// before its key advert: the coordinator receives no advert, share or
// masked vector, no client trains, every ledger is byte-identical. An
// owner who accepts sparse graphs (SparseGraphs) takes part and the same
// coordinator unmasks the sum, so the refusal is the policy's.
//
// Before the graph check (checkGraph) the default policy took part in
// this round to the unmasked sum.
func TestGroundGraphSeedIsRefused(t *testing.T) {
	names := []string{"client-1", "client-2", "client-3", "client-4"}
	dir := issueRoster(t, names)
	m0 := model0()
	task, pol := localTask(t, names, m0)
	task.Secagg.Degree, task.Secagg.Threshold = 2, 3
	pol.SecAgg.MinHonest = 2
	// The grinding: the first seed that puts client-1 between client-2
	// and client-3.
	target, own := uint32(1), []uint32{2, 3}
	found := false
	for i := range uint64(1000) {
		binary.BigEndian.PutUint64(task.Secagg.GraphSeed, i)
		p, err := secround.Params(task.Secagg, [32]byte{})
		if err != nil {
			t.Fatal(err)
		}
		g, err := masking.NewGraph(&p)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(g.Neighbours(target), own) {
			found = true
			break
		}
	}
	if !found {
		t.Fatal("no seed in 1000 surrounds client-1 with the coordinator's clients")
	}
	for _, tc := range []struct {
		name   string
		sparse bool
	}{{"default policy", false}, {"owner accepts sparse graphs", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := &equivocator{tasks: map[string]*fedpb.RoundConfig{}, model: m0}
			for _, n := range names {
				e.tasks[n] = proto.Clone(task).(*fedpb.RoundConfig)
			}
			p := pol
			p.SecAgg.SparseGraphs = tc.sparse
			results := runClients(t, e, dir, names, p)
			e.mu.Lock()
			defer e.mu.Unlock()
			if tc.sparse {
				if e.sumErr != nil || len(e.sum) != int(task.Secagg.Length) {
					t.Fatalf("with sparse graphs accepted the coordinator did not unmask the sum: %v", e.sumErr)
				}
				for i, r := range results {
					if r.err != nil || r.sums != 1 {
						t.Fatalf("%s: %v after %d trainings", names[i], r.err, r.sums)
					}
				}
				return
			}
			for i, r := range results {
				var pe *client.PolicyError
				if !errors.As(r.err, &pe) || pe.Setting != client.SettingGraph || !strings.Contains(r.err.Error(), "seed the coordinator chose") {
					t.Errorf("%s ended with %v; want a refusal naming the graph", names[i], r.err)
				}
				r.untouched(t, names[i])
			}
			if len(e.adverts) != 0 || len(e.shares) != 0 || len(e.masked) != 0 || e.sum != nil {
				t.Fatalf("the coordinator got %d adverts, %d share sets, %d masked vectors (sum %v); want nothing",
					len(e.adverts), len(e.shares), len(e.masked), e.sum != nil)
			}
		})
	}
}
