package dplc

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/veil-privacy/veil/dp"
)

// TestReleaseChargesFirstAndRefusesOverBudget plays a curator asking for
// more than the data set's budget: the first release is charged to the
// ledger and returned; the second, which would take the people in it
// past the budget, is refused with dp.ErrBudgetExceeded, releases
// nothing, and leaves the ledger file byte for byte as it was. Bad input
// (a zero centre, members that do not match the centres) is refused
// before the ledger is touched, and a release charges the people named,
// not others.
func TestReleaseChargesFirstAndRefusesOverBudget(t *testing.T) {
	dir := t.TempDir()
	centres := synthetic(seeded(1), 3, 20, 16, 0.3)
	members := make([]string, len(centres))
	for i := range members {
		members[i] = "person-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	p := Params{Margin: 1.3, Clusters: 3, Epsilon: 1, Delta: 1e-5}
	c := Charge{Ledgers: dir, DataSet: "faces", Members: members, Budget: dp.Budget{Epsilon: 1.05, Delta: 1e-5}, SetBudget: true}
	file := filepath.Join(dir, "faces.identity.ledger")

	// Refused input first: nothing may be written.
	bad := append([][]float32{make([]float32, 16)}, centres[1:]...)
	if _, _, err := Release(bad, p, c, seeded(2)); err == nil {
		t.Fatal("a zero centre was accepted")
	}
	short := c
	short.Members = members[:3]
	if _, _, err := Release(centres, p, short, seeded(2)); err == nil {
		t.Fatal("3 members for 60 centres were accepted")
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused input touched the ledger: %v", err)
	}

	res, led, err := Release(centres, p, c, seeded(2))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Clusters) != 3 || led.File != file || !(led.SpentEpsilon > 0.9 && led.SpentEpsilon <= 1) || led.Budget.Epsilon != 1.05 {
		t.Fatalf("release: %d clusters, ledger %+v", len(res.Clusters), led)
	}
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	c.SetBudget = false
	res, _, err = Release(centres, p, c, seeded(3))
	if !errors.Is(err, dp.ErrBudgetExceeded) || res.Clusters != nil {
		t.Fatalf("a release past the budget: err %v, %d clusters released", err, len(res.Clusters))
	}
	after, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("a refused release changed the ledger")
	}
	// Other people of the data set have spent nothing.
	d, err := dp.OpenLedgerDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := d.Read(dp.DataSet{Name: "faces", Unit: dp.UnitIdentity})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := l.Spent([]string{"someone else"}); err != nil || s.Epsilon != 0 {
		t.Fatalf("a person not in the release: spent %+v, %v", s, err)
	}
}
