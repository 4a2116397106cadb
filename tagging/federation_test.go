package tagging

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/veil-privacy/veil/dp"
)

var fedSet = dp.DataSet{Name: "library", Unit: "identity"}

func fedEvent(t *testing.T, sigma float64, steps int) dp.Event {
	t.Helper()
	ev, err := dp.SubsampledGaussianEvent(0.5, sigma, steps)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestLibraryLedger: the ledger lives in the library (sealed in the
// federation table, nothing in a ledger folder), survives closing and
// reopening, refuses a charge past its budget and is then byte for byte
// what it was, and a ledger row altered in the file is refused.
func TestLibraryLedger(t *testing.T) {
	l := testLibrary(t)
	dir := l.Dir()
	store := l.Ledger()
	if _, err := store.Read(fedSet); !errors.Is(err, dp.ErrNoLedger) {
		t.Fatalf("a new library's ledger: %v, want ErrNoLedger", err)
	}
	budget := dp.Budget{Epsilon: 2, Delta: 1e-5}
	if _, err := store.Update(fedSet, func(led *dp.DataLedger) error {
		if err := led.SetBudget(budget); err != nil {
			return err
		}
		_, err := led.Charge(dp.Charge{Label: "round 1", Events: []dp.Event{fedEvent(t, 4, 5)}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	before, err := l.fedRecord(t.Context(), l.db, fedRowLedger)
	if err != nil || before == nil {
		t.Fatalf("the stored ledger: %v", err)
	}
	sealedBefore := rawFedRow(t, l, fedRowLedger)
	if bytes.Contains(sealedBefore, []byte("round 1")) {
		t.Fatal("the ledger is stored in the clear")
	}
	// A charge far past the budget is refused; the row is unchanged.
	_, err = store.Update(fedSet, func(led *dp.DataLedger) error {
		_, err := led.Charge(dp.Charge{Label: "round 2", Events: []dp.Event{fedEvent(t, 0.3, 1000)}})
		return err
	})
	if !errors.Is(err, dp.ErrBudgetExceeded) {
		t.Fatalf("a charge past the budget: %v, want ErrBudgetExceeded", err)
	}
	if after := rawFedRow(t, l, fedRowLedger); !bytes.Equal(after, sealedBefore) {
		t.Fatal("a refused charge changed the stored ledger")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := Open(dir, []byte(testPass))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	led, err := l2.Ledger().Read(fedSet)
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := led.Budget(); !ok || b != budget || charges(led) != "round 1" {
		t.Fatalf("reopened ledger: budget %v %v, history %+v", b, ok, led.History())
	}
	// Another data set (another unit) is not this ledger.
	if _, err := l2.Ledger().Read(dp.DataSet{Name: "library", Unit: "example"}); !errors.Is(err, dp.ErrLedgerCorrupt) {
		t.Fatalf("reading it as another data set: %v, want ErrLedgerCorrupt", err)
	}
	// The membership row's seal does not open as the ledger's.
	if err := l2.SetMembership(t.Context(), []byte(`{"coordinator":"x"}`)); err != nil {
		t.Fatal(err)
	}
	editOutside(l2)
	if _, err := l2.db.Exec(`UPDATE federation SET record = (SELECT record FROM federation WHERE id = ?) WHERE id = ?`, fedRowMembership, fedRowLedger); err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Ledger().Read(fedSet); !errors.Is(err, ErrTampered) {
		t.Fatalf("a ledger row replaced by another row's: %v, want ErrTampered", err)
	}
	if _, err := l2.Ledger().Update(fedSet, func(*dp.DataLedger) error { return nil }); !errors.Is(err, ErrTampered) {
		t.Fatalf("charging a replaced ledger row: %v, want ErrTampered", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.ledger")); len(m) != 0 {
		t.Fatalf("ledger files beside the library: %v", m)
	}
}

// chargeRound1 gives the library's ledger a budget of ε = 3 and charges
// "round 1".
func chargeRound1(t *testing.T, l *Library) {
	t.Helper()
	if _, err := l.Ledger().Update(fedSet, func(led *dp.DataLedger) error {
		if err := led.SetBudget(dp.Budget{Epsilon: 3, Delta: 1e-5}); err != nil {
			return err
		}
		_, err := led.Charge(dp.Charge{Label: "round 1", Events: []dp.Event{fedEvent(t, 4, 5)}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// charges lists the notes of the ledger's charges.
func charges(led *dp.DataLedger) string {
	var out []string
	for _, h := range led.History() {
		if h.Kind == dp.HistoryCharge {
			out = append(out, h.Note)
		}
	}
	return strings.Join(out, ", ")
}

func rawFedRow(t *testing.T, l *Library, row int64) []byte {
	t.Helper()
	var b []byte
	if err := l.db.QueryRow(`SELECT record FROM federation WHERE id = ?`, row).Scan(&b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLibraryLedgerSurvivesRotation: a key rotation re-seals the ledger
// and the membership record, which open under the new passphrase with
// what they held.
func TestLibraryLedgerSurvivesRotation(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	chargeRound1(t, l)
	if err := l.SetMembership(t.Context(), []byte("member")); err != nil {
		t.Fatal(err)
	}
	l.Close()
	const newPass = "another horse battery staple"
	if err := RotateKey(t.Context(), dir, []byte(testPass), func() ([]byte, error) { return []byte(newPass), nil }, cheapKDF, nil); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, []byte(newPass))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	led, err := l.Ledger().Read(fedSet)
	if err != nil || charges(led) != "round 1" {
		t.Fatalf("the ledger after rotation: %v", err)
	}
	if m, err := l.Membership(t.Context()); err != nil || string(m) != "member" {
		t.Fatalf("the membership after rotation: %q, %v", m, err)
	}
}

// TestMigrate8 opens a version 7 library: it comes up at the current
// version with an empty federation table, its integrity record accepting
// the new layout.
func TestMigrate8(t *testing.T) {
	dir := t.TempDir()
	l, err := create(t.Context(), dir, []byte(testPass), cheapKDF, 7, deriveKEK)
	if err != nil {
		t.Fatal(err)
	}
	addTestPhoto(t, l, "/a.jpg", 1, 2)
	l.Close()
	l, err = Open(dir, []byte(testPass))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if v, err := schemaVersion(t.Context(), l.db); err != nil || v != 8 {
		t.Fatalf("version %d, %v; want 8", v, err)
	}
	if err := l.CheckIntegrity(t.Context()); err != nil {
		t.Fatal(err)
	}
	if m, err := l.Membership(t.Context()); err != nil || m != nil {
		t.Fatalf("membership of a migrated library: %q, %v", m, err)
	}
}

const envFedChild = "VEIL_TEST_FEDERATION_CHILD"

// TestFederationChild is the process TestFederationKilled kills: on the
// library in $VEIL_TEST_FEDERATION_CHILD (after "migrate8:" or
// "charge:") it runs migration 8 up to its commit, or a ledger charge up to
// the end of its transaction, says so and waits to be killed.
func TestFederationChild(t *testing.T) {
	mode, dir, ok := strings.Cut(os.Getenv(envFedChild), ":")
	if !ok {
		t.Skip("run by TestFederationKilled")
	}
	if mode == "charge" {
		l, err := Open(dir, []byte(testPass))
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.Ledger().Update(fedSet, func(led *dp.DataLedger) error {
			if _, err := led.Charge(dp.Charge{Label: "round 2", Events: []dp.Event{fedEvent(t, 4, 5)}}); err != nil {
				return err
			}
			os.Stdout.WriteString("ready\n")
			time.Sleep(time.Minute) // killed before this ends
			return errors.New("not killed")
		})
		t.Fatal(err)
	}
	migrateUncommitted(t, dir, 7)
	os.Stdout.WriteString("ready\n")
	time.Sleep(time.Minute)
	t.Fatal("not killed")
}

// killChild runs TestFederationChild in mode on dir and kills it with
// SIGKILL once it is ready.
func killChild(t *testing.T, mode, dir string) {
	t.Helper()
	killWhenReady(t, "TestFederationChild", envFedChild+"="+mode+":"+dir, "ready")
}

// TestFederationKilled: migration 8 killed with SIGKILL before its commit
// leaves the library at version 7, which the next Open upgrades; a ledger
// charge killed inside its transaction leaves the ledger as it was.
func TestFederationKilled(t *testing.T) {
	dir := t.TempDir()
	l, err := create(t.Context(), dir, []byte(testPass), cheapKDF, 7, deriveKEK)
	if err != nil {
		t.Fatal(err)
	}
	addTestPhoto(t, l, "/a.jpg", 1, 2)
	l.Close()
	killChild(t, "migrate8", dir)
	db, err := openDB(filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	v, err := schemaVersion(t.Context(), db)
	db.Close()
	if err != nil || v != 7 {
		t.Fatalf("after the kill the library is version %d, %v; want 7 as it was", v, err)
	}
	l, err = Open(dir, []byte(testPass))
	if err != nil {
		t.Fatal(err)
	}
	chargeRound1(t, l)
	before := rawFedRow(t, l, fedRowLedger)
	l.Close()
	killChild(t, "charge", dir)
	l, err = Open(dir, []byte(testPass))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if after := rawFedRow(t, l, fedRowLedger); !bytes.Equal(after, before) {
		t.Fatal("a charge killed before its commit changed the ledger")
	}
	led, err := l.Ledger().Read(fedSet)
	if err != nil || charges(led) != "round 1" {
		t.Fatalf("the ledger after the kill: %v", err)
	}
}
