package dp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

var lfwLike = DataSet{Name: "lfw", Unit: UnitIdentity}

func people(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("Person_%04d", i))
	}
	return out
}

func openDir(t *testing.T, dir string) *LedgerDir {
	t.Helper()
	d, err := OpenLedgerDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func epochEvent(t *testing.T) Event {
	t.Helper()
	return mustEvent(SubsampledGaussianEvent(0.05, 2, 20))
}

// composed is the ε of events composed by the RDP accountant at δ.
func composed(t *testing.T, delta float64, events ...Event) float64 {
	t.Helper()
	a, err := NewAccountant(nil)
	must(t, err)
	must(t, a.Add(events...))
	e, _, err := a.Epsilon(delta)
	must(t, err)
	return e
}

func budgetOf(eps float64) func(*DataLedger) error {
	return func(l *DataLedger) error { return l.SetBudget(Budget{Epsilon: eps, Delta: 1e-5}) }
}

func charge(c Charge) func(*DataLedger) error {
	return func(l *DataLedger) error { _, err := l.Charge(c); return err }
}

// TestSubsetComposesWithSuperset plays a user who trains on 50 people,
// then on all 120 (the --max-people 50 run, then the full one): the 50
// carry both charges, the other 70 one, and the budget check is the worst
// person's. A third charge on the 50 alone is refused although the other
// 70 have budget left.
func TestSubsetComposesWithSuperset(t *testing.T) {
	d := openDir(t, t.TempDir())
	ev := epochEvent(t)
	one, two, three := composed(t, 1e-5, ev), composed(t, 1e-5, ev, ev), composed(t, 1e-5, ev, ev, ev)
	if _, err := d.Update(lfwLike, budgetOf((two+three)/2)); err != nil {
		t.Fatal(err)
	}
	all := people(0, 120)
	if _, err := d.Update(lfwLike, charge(Charge{Label: "max-people 50", Members: all[:50], Events: []Event{ev}})); err != nil {
		t.Fatal(err)
	}
	l, err := d.Update(lfwLike, charge(Charge{Label: "all people", Members: all, Events: []Event{ev}}))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		who  []string
		want float64
	}{{all[:50], two}, {all[10:20], two}, {all[50:], one}, {all[40:60], two}, {nil, two}, {people(500, 501), 0}} {
		s, err := l.Spent(c.who)
		must(t, err)
		if math.Abs(s.Epsilon-c.want) > 1e-9*c.want {
			t.Errorf("spent of %d people: ε = %g, want %g", len(c.who), s.Epsilon, c.want)
		}
	}
	g, err := l.Groups()
	must(t, err)
	if len(g) != 3 || g[0].Members != 50 || g[1].Members != 70 || g[2].Members != -1 {
		t.Errorf("groups %+v: want 50 people with two charges, 70 with one, and the others", g)
	}
	// A third charge on anyone of the 50 is over budget; on the 70 it fits.
	before, err := os.ReadFile(d.Path(lfwLike))
	must(t, err)
	if _, err := d.Update(lfwLike, charge(Charge{Members: all[45:55], Events: []Event{ev}})); !errors.Is(err, ErrBudgetExceeded) {
		t.Errorf("a third charge touching 5 of the 50: err = %v, want ErrBudgetExceeded", err)
	}
	after, err := os.ReadFile(d.Path(lfwLike))
	must(t, err)
	if !bytes.Equal(before, after) {
		t.Error("a refused charge changed the ledger file")
	}
	if _, err := d.Update(lfwLike, charge(Charge{Members: all[60:], Events: []Event{ev}})); err != nil {
		t.Errorf("a second charge on people charged once: %v", err)
	}
	// A charge on everyone (a command that cannot name its members) counts
	// for people never named too.
	_, err = d.Update(lfwLike, func(l *DataLedger) error { return l.SetBudget(Budget{Epsilon: three + 1e-9, Delta: 1e-5}) })
	if !errors.Is(err, ErrBudgetLocked) {
		t.Fatalf("raise after charges: %v", err)
	}
	l, err = d.Read(lfwLike)
	must(t, err)
	if _, err := l.Charge(Charge{Events: []Event{ev}}); !errors.Is(err, ErrBudgetExceeded) {
		t.Errorf("a charge on everyone while 50 people are at two charges: err = %v", err)
	}
}

// TestBudgetRaiseRefusedAndResetRecorded plays an owner who spends, then
// raises the budget or changes δ to spend again: refused, and the spending
// still reads. Lowering is allowed; an explicit reset is recorded in the
// history with its time, reason and what it forgave.
func TestBudgetRaiseRefusedAndResetRecorded(t *testing.T) {
	d := openDir(t, t.TempDir())
	ev := epochEvent(t)
	one := composed(t, 1e-5, ev)
	if _, err := d.Update(lfwLike, budgetOf(3)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Update(lfwLike, budgetOf(4)); err != nil {
		t.Fatalf("a raise before any charge: %v", err)
	}
	if _, err := d.Update(lfwLike, charge(Charge{Members: people(0, 10), Events: []Event{ev}})); err != nil {
		t.Fatal(err)
	}
	for _, b := range []Budget{{Epsilon: 40, Delta: 1e-5}, {Epsilon: 4, Delta: 1e-3}, {Epsilon: 4, Delta: 1e-9}} {
		_, err := d.Update(lfwLike, func(l *DataLedger) error { return l.SetBudget(b) })
		if !errors.Is(err, ErrBudgetLocked) || !strings.Contains(err.Error(), "veil privacy ledger reset") {
			t.Errorf("budget %+v after a charge: err = %v, want ErrBudgetLocked naming the reset", b, err)
		}
		l, err := d.Read(lfwLike)
		must(t, err)
		s, err := l.Spent(nil)
		must(t, err)
		if got, _ := l.Budget(); got != (Budget{Epsilon: 4, Delta: 1e-5}) || math.Abs(s.Epsilon-one) > 1e-12 {
			t.Errorf("after the refused %+v: budget %+v, spent %g (want 4 and %g)", b, got, s.Epsilon, one)
		}
	}
	if _, err := d.Update(lfwLike, budgetOf(one/2)); !errors.Is(err, ErrBudgetExceeded) {
		t.Errorf("lowering below what is spent: %v", err)
	}
	if _, err := d.Update(lfwLike, budgetOf(2)); err != nil {
		t.Errorf("lowering: %v", err)
	}
	if _, err := d.Update(lfwLike, func(l *DataLedger) error { return l.Reset(ResetOptions{}) }); err == nil {
		t.Error("a reset without a reason was accepted")
	}
	keep := Budget{Epsilon: 10, Delta: 1e-5}
	l, err := d.Update(lfwLike, func(l *DataLedger) error {
		return l.Reset(ResetOptions{Reason: "the owner raised the budget", Budget: &keep, KeepCharges: true})
	})
	must(t, err)
	if s, _ := l.Spent(nil); math.Abs(s.Epsilon-one) > 1e-12 {
		t.Errorf("a reset keeping the charges left ε = %g, want %g", s.Epsilon, one)
	}
	fresh := Budget{Epsilon: 1, Delta: 1e-6}
	l, err = d.Update(lfwLike, func(l *DataLedger) error { return l.Reset(ResetOptions{Reason: "new consent form", Budget: &fresh}) })
	must(t, err)
	if s, _ := l.Spent(nil); s.Epsilon != 0 {
		t.Errorf("after a reset ε = %g", s.Epsilon)
	}
	h := l.History()
	var kinds []string
	for _, e := range h {
		kinds = append(kinds, string(e.Kind))
		if e.Time.IsZero() {
			t.Errorf("history entry %+v has no time", e)
		}
	}
	if got := strings.Join(kinds, ","); got != "budget,budget,charge,budget,reset,reset" {
		t.Fatalf("history %s", got)
	}
	if r := h[5]; r.Note != "new consent form" || r.Budget != fresh || math.Abs(r.Worst-one) > 1e-12 {
		t.Errorf("reset entry %+v: want the reason, the new budget and the forgiven ε %g", r, one)
	}
}

// TestLedgerFileRefusesTampering plays a user who edits the ledger file,
// copies it into a fresh ledger folder, puts another data set's file in
// its place, or an old-format file: each is refused, naming the reason.
func TestLedgerFileRefusesTampering(t *testing.T) {
	dir := t.TempDir()
	d := openDir(t, dir)
	if _, err := d.Update(lfwLike, budgetOf(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Update(lfwLike, charge(Charge{Members: people(0, 3), Events: []Event{epochEvent(t)}})); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(d.Path(lfwLike))
	must(t, err)
	write := func(b []byte) {
		t.Helper()
		must(t, os.WriteFile(d.Path(lfwLike), b, 0o600))
	}
	check := func(name, want string) {
		t.Helper()
		_, err := d.Read(lfwLike)
		if !errors.Is(err, ErrLedgerCorrupt) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want ErrLedgerCorrupt mentioning %q", name, err, want)
		}
		if _, err := d.Update(lfwLike, budgetOf(2)); !errors.Is(err, ErrLedgerCorrupt) {
			t.Errorf("%s: an update went ahead: %v", name, err)
		}
	}
	write(bytes.Replace(good, []byte(`"epsilon":2,`), []byte(`"epsilon":20,`), 1))
	check("raised budget", "MAC")
	write(good[:len(good)/2])
	check("truncated", "not a ledger file")
	old, err := json.Marshal(map[string]any{"version": 1, "orders": []float64{2}, "principals": map[string]any{}})
	must(t, err)
	write(old)
	check("old format", "older Veil versions")
	write(good)
	if _, err := d.Read(lfwLike); err != nil {
		t.Fatal(err)
	}
	// The same file in another ledger folder (another key).
	other := openDir(t, t.TempDir())
	must(t, os.WriteFile(other.Path(lfwLike), good, 0o600))
	if _, err := other.Read(lfwLike); !errors.Is(err, ErrLedgerCorrupt) {
		t.Errorf("a ledger copied into another folder: %v", err)
	}
	// Another data set's ledger renamed into place.
	orl := DataSet{Name: "orl", Unit: UnitIdentity}
	if _, err := d.Update(orl, budgetOf(50)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(d.Path(orl))
	must(t, err)
	write(b)
	check("another data set's file", "data set orl")
	// A damaged key.
	must(t, os.WriteFile(filepath.Join(dir, ledgerKeyFile), []byte("xyz\n"), 0o600))
	if _, err := OpenLedgerDir(dir); !errors.Is(err, ErrLedgerCorrupt) {
		t.Errorf("a damaged key: %v", err)
	}
}

// TestFingerprintsHideNames: the file holds keyed fingerprints, not the
// members' names.
func TestFingerprintsHideNames(t *testing.T) {
	d := openDir(t, t.TempDir())
	if _, err := d.Update(lfwLike, budgetOf(5)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Update(lfwLike, charge(Charge{Label: "epoch 1", Members: []string{"Aaron_Eckhart", "Zico"}, Events: []Event{epochEvent(t)}})); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(d.Path(lfwLike))
	must(t, err)
	if bytes.Contains(b, []byte("Aaron")) || bytes.Contains(b, []byte("Zico")) {
		t.Errorf("the ledger file holds a member's name: %s", b)
	}
}

// chargeN charges n one-event charges to dir's lfw ledger.
func chargeN(dir string, n int, ev Event) error {
	d, err := OpenLedgerDir(dir)
	if err != nil {
		return err
	}
	for range n {
		if _, err := d.Update(lfwLike, charge(Charge{Label: "concurrent", Members: people(0, 5), Events: []Event{ev}})); err != nil {
			return err
		}
	}
	return nil
}

// TestConcurrentChargesAllCount runs chargers at once, in goroutines each
// with its own LedgerDir and in two other processes: without the lock,
// read-modify-write would lose charges; with it every one is in the file.
func TestConcurrentChargesAllCount(t *testing.T) {
	dir := t.TempDir()
	d := openDir(t, dir)
	if _, err := d.Update(lfwLike, budgetOf(1000)); err != nil {
		t.Fatal(err)
	}
	ev := mustEvent(GaussianEvent(50, 1))
	const goroutines, procs, each = 4, 2, 10
	var wg sync.WaitGroup
	errs := make(chan error, goroutines+procs)
	for range goroutines {
		wg.Go(func() { errs <- chargeN(dir, each, ev) })
	}
	for range procs {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^TestLedgerChargerProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), "VEIL_TEST_LEDGER_CHARGER="+dir, "VEIL_TEST_LEDGER_CHARGES="+strconv.Itoa(each))
			if out, err := cmd.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("charger process: %v: %s", err, out)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	l, err := d.Read(lfwLike)
	must(t, err)
	n := 0
	for _, h := range l.History() {
		if h.Kind == HistoryCharge {
			n++
		}
	}
	if want := (goroutines + procs) * each; n != want {
		t.Errorf("%d charges recorded, want %d", n, want)
	}
	g, err := l.Groups()
	must(t, err)
	if g[0].Events != (goroutines+procs)*each {
		t.Errorf("the charged people compose %d events, want %d", g[0].Events, (goroutines+procs)*each)
	}
}

// TestLedgerChargerProcess is the other process of
// TestConcurrentChargesAllCount (it does nothing when run alone).
func TestLedgerChargerProcess(t *testing.T) {
	dir := os.Getenv("VEIL_TEST_LEDGER_CHARGER")
	if dir == "" {
		return
	}
	n, err := strconv.Atoi(os.Getenv("VEIL_TEST_LEDGER_CHARGES"))
	must(t, err)
	must(t, chargeN(dir, n, mustEvent(GaussianEvent(50, 1))))
}

// FuzzLedgerFile feeds the parser arbitrary files, and arbitrary bodies
// under a valid MAC (so the fuzzer reaches the checks behind it): it must
// never panic, and whatever it accepts must be within its budget and
// survive a write and a read unchanged.
func FuzzLedgerFile(f *testing.F) {
	key := bytes.Repeat([]byte{7}, 32)
	c, err := NewCurveCache(nil, 0)
	if err != nil {
		f.Fatal(err)
	}
	l, err := newDataLedger(lfwLike, key, c)
	if err != nil {
		f.Fatal(err)
	}
	if err := l.SetBudget(Budget{Epsilon: 8, Delta: 1e-5}); err != nil {
		f.Fatal(err)
	}
	ev := mustEvent(SubsampledGaussianEvent(0.1, 1.2, 50))
	for _, ch := range []Charge{{Members: people(0, 4), Events: []Event{ev}}, {Events: []Event{mustEvent(LaplaceEvent(20, 1))}}, {Members: people(2, 6), Events: []Event{ev}}} {
		if _, err := l.Charge(ch); err != nil {
			f.Fatal(err)
		}
	}
	good, err := encodeDataLedger(l)
	if err != nil {
		f.Fatal(err)
	}
	var file ledgerFileJSON
	if err := json.Unmarshal(good, &file); err != nil {
		f.Fatal(err)
	}
	f.Add(good, false)
	f.Add([]byte(file.Body), true)
	f.Add([]byte(`{"version":2,"data_set":{"name":"lfw","unit":"identity"},"budget":{"epsilon":1,"delta":1e-5},"groups":[{"members":["00"],"events":[]}],"others":[],"history":[]}`), true)
	f.Add([]byte(`{"version":1,"principals":{}}`), false)
	f.Fuzz(func(t *testing.T, b []byte, wrap bool) {
		if wrap {
			var body bytes.Buffer
			if json.Compact(&body, b) != nil {
				return
			}
			w, err := json.Marshal(ledgerFileJSON{Format: ledgerFormat, Body: body.Bytes(), MAC: fmt.Sprintf("%x", ledgerMAC(key, body.Bytes()))})
			if err != nil {
				return
			}
			b = w
		}
		got, err := decodeDataLedger(b, key, lfwLike, c)
		if err != nil {
			if !errors.Is(err, ErrLedgerCorrupt) {
				t.Fatalf("refusal %v does not wrap ErrLedgerCorrupt", err)
			}
			return
		}
		s, err := got.Spent(nil)
		if err != nil {
			t.Fatalf("accepted ledger: %v", err)
		}
		if bud, _ := got.Budget(); s.Epsilon > bud.Epsilon*(1+1e-12) {
			t.Fatalf("accepted a ledger over budget: %g > %g", s.Epsilon, bud.Epsilon)
		}
		again, err := encodeDataLedger(got)
		if err != nil {
			t.Fatalf("re-encoding an accepted ledger: %v", err)
		}
		back, err := decodeDataLedger(again, key, lfwLike, c)
		if err != nil {
			t.Fatalf("re-reading an accepted ledger: %v", err)
		}
		s2, err := back.Spent(nil)
		if err != nil || s2 != s {
			t.Fatalf("round trip: %+v then %+v (%v)", s, s2, err)
		}
	})
}

// TestUpdateWithoutChangeWritesNothing: an update that changes nothing
// (the same budget set again, as every start of a client does) leaves
// the file itself in place: same inode, not a rewritten copy.
func TestUpdateWithoutChangeWritesNothing(t *testing.T) {
	d := openDir(t, t.TempDir())
	if _, err := d.Update(lfwLike, budgetOf(2)); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(d.Path(lfwLike))
	must(t, err)
	if _, err := d.Update(lfwLike, budgetOf(2)); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(d.Path(lfwLike))
	must(t, err)
	if !os.SameFile(before, after) {
		t.Error("setting the same budget again rewrote the ledger file")
	}
}
