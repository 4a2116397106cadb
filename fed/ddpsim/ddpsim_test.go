package ddpsim

import (
	"fmt"
	mrand "math/rand/v2"
	"testing"

	"github.com/veil-privacy/veil/training"
)

// labelled is identity-labelled data whose label is the example's index
// in the whole data (as under distillation, where it indexes the
// targets).
type labelled struct{ ids []int }

func (d labelled) Len() int           { return len(d.ids) }
func (d labelled) Classes() int       { return len(d.ids) }
func (d labelled) Identity(i int) int { return d.ids[i] }
func (d labelled) Identities() int    { return 30 }
func (d labelled) Batch(idx []int, _ *mrand.Rand) ([]float32, []int32, error) {
	x := make([]float32, len(idx))
	l := make([]int32, len(idx))
	for k, i := range idx {
		x[k], l[k] = float32(d.ids[i]), int32(i)
	}
	return x, l, nil
}

// Each client holds whole people, no person is in two clients, its people
// are renumbered densely for its own sampler, its ledger members are its
// people's names, and its batches keep the whole data's labels (a
// distillation label must still index the whole data's targets).
func TestSplitKeepsPeopleWholeAndLabelsGlobal(t *testing.T) {
	var ids []int
	var names []string
	for p := range 30 {
		for range 1 + p%4 {
			ids = append(ids, p)
			names = append(names, fmt.Sprintf("person-%d", p))
		}
	}
	d := &training.Data{Train: labelled{ids: ids}, Identities: 30, People: names}
	clients, err := split(d, 4, 7)
	if err != nil {
		t.Fatal(err)
	}
	owner := map[int]int{}
	total := 0
	for k, c := range clients {
		total += c.Len()
		seen := map[int]bool{}
		for i := range c.Len() {
			if c.Identity(i) < 0 || c.Identity(i) >= c.Identities() {
				t.Fatalf("client %d: example %d has local person %d of %d", k, i, c.Identity(i), c.Identities())
			}
			x, l, err := c.Batch([]int{i}, nil)
			if err != nil {
				t.Fatal(err)
			}
			p := int(x[0])
			if int(l[0]) != c.idx[i] || ids[l[0]] != p {
				t.Fatalf("client %d: example %d has label %d, want its index %d in the whole data", k, i, l[0], c.idx[i])
			}
			if o, ok := owner[p]; ok && o != k {
				t.Fatalf("person %d is in clients %d and %d", p, o, k)
			}
			owner[p] = k
			seen[p] = true
		}
		if len(seen) != c.Identities() || len(c.members) != len(seen) {
			t.Errorf("client %d: %d people, %d local identities, %d ledger members", k, len(seen), c.Identities(), len(c.members))
		}
		for _, m := range c.members {
			var p int
			fmt.Sscanf(m, "person-%d", &p)
			if !seen[p] {
				t.Errorf("client %d charges %s, who is not its", k, m)
			}
		}
	}
	if total != len(ids) || len(owner) != 30 {
		t.Errorf("the clients hold %d examples of %d people, want %d of 30", total, len(owner), len(ids))
	}
	if _, _, err := clients[0].Batch([]int{clients[0].Len()}, nil); err == nil {
		t.Error("an example beyond the client's accepted")
	}
}

func TestOptionsRefused(t *testing.T) {
	d := &training.Data{Train: labelled{}, Pairs: &training.Pairs{}}
	for _, o := range []Options{
		{},
		{Data: d, Clients: 0},
		{Data: d, Clients: 8, Drop: 8},
		{Data: d, Clients: 8, Drop: 1, MinHonest: 8},
		{Data: d, Clients: 8, Rounds: -1},
	} {
		if _, err := Run(t.Context(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
