// Package fedjoin makes a tagging library a federated client (issue 22
// §1: veil library join, leave, status). The library trains the shared
// model ψ (collab's head on the descriptor) on its owner's decisions —
// the faces the owner named and the suggestions the owner accepted,
// decrypted in memory only, each person replaced by a hashed tag
// (tagging.TrainingData) — through package fed/client, so the owner's
// privacy policy rules exactly as for any client: a round outside it is
// refused with the setting's name, and nothing the coordinator sends can
// weaken the noise, the unit, the clip or the budget. The unit of privacy
// is one person of the library (all their faces); the ledger is the
// library's own (tagging.Library.Ledger, inside the encrypted library),
// charged before the faces are touched. Secure aggregation (masking) is
// used whenever the coordinator runs it; Policy.SecAgg.Require refuses
// rounds without it.
//
// A library with too few named people is refused before anything is
// dialled: it sends nothing. After the federation's last round the
// library downloads the model, imports it as a new version and runs the
// library's adoption (tagging.Library.UseModel): it adopts the model only
// if it measures at least as good on the owner's own names, and records
// the decision with its reason. No user decision (names, rejections,
// accepted suggestions) is changed by any of this.
package fedjoin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/tagging"
)

// DataSet is the name of the library's data set in its ledger.
const DataSet = "library"

// DefaultMinPeople is the fewest named people a library trains with.
const DefaultMinPeople = 4

// ErrTooFewPeople is returned (wrapped) when the library has too few named
// people to take part: nothing is sent.
var ErrTooFewPeople = errors.New("too few named people to train under the privacy budget")

// Options configure Join.
type Options struct {
	// Library is the open library.
	Library *tagging.Library
	// Addr is the coordinator's host:port and ServerName the name its
	// certificate must carry (default: Addr's host).
	Addr, ServerName string
	// Identity is the library's federation certificate and key (pki).
	Identity *pki.Identity
	// PKI is the certificate folder, recorded for status and a later join.
	PKI string
	// Policy is the owner's privacy policy; its unit must be identity (one
	// person of the library).
	Policy client.Policy
	// MinPeople is the fewest people with named faces the library trains
	// with (0: DefaultMinPeople).
	MinPeople int
	// Trainer configures the local training.
	Trainer TrainerOptions
	// ReconnectFor is the client's retry window (client.Options).
	ReconnectFor time.Duration
	// Engine runs the training (nil: a private default engine).
	Engine *engine.Engine
	Logger *slog.Logger
	// Progress, if set, is told what the client does.
	Progress func(string)
}

// Report is what a Join did.
type Report struct {
	Client string `json:"client"`
	// Outcome is done, budget_exhausted or refused.
	Outcome string `json:"outcome"`
	Refusal string `json:"refusal,omitempty"`
	// People is the number of people (privacy units) trained on.
	People        int     `json:"people"`
	EpsilonSpent  float64 `json:"epsilon_spent"`
	BudgetEpsilon float64 `json:"budget_epsilon"`
	Delta         float64 `json:"delta"`
	// Imported is the model version the federation's result was stored
	// as (0: none), Decision the adoption's.
	Imported int64                  `json:"imported_version,omitempty"`
	Decision *tagging.ModelDecision `json:"decision,omitempty"`
}

// Membership is the owner's record of the federation the library joined,
// sealed inside the library.
type Membership struct {
	Coordinator string    `json:"coordinator"`
	ServerName  string    `json:"server_name,omitempty"`
	PKI         string    `json:"pki,omitempty"`
	Client      string    `json:"client"`
	JoinedAt    time.Time `json:"joined_at"`
	// Last is the last run's report.
	Last *Report `json:"last,omitempty"`
}

func (o *Options) validate() error {
	switch {
	case o.Library == nil:
		return errors.New("fedjoin: no library")
	case o.Addr == "":
		return errors.New("fedjoin: the coordinator's address is required")
	case o.Identity == nil:
		return errors.New("fedjoin: the library's federation certificate is required")
	case o.Policy.Unit != client.DefaultUnit:
		return fmt.Errorf("fedjoin: a library's privacy unit is one person (identity), not %q", o.Policy.Unit)
	case o.MinPeople < 0:
		return fmt.Errorf("fedjoin: the fewest people must not be negative, got %d", o.MinPeople)
	}
	if o.MinPeople == 0 {
		o.MinPeople = DefaultMinPeople
	}
	if err := o.Policy.Validate(); err != nil {
		return fmt.Errorf("fedjoin: %w", err)
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	o.Trainer.Engine = o.Engine
	o.Trainer.MinNoiseMultiplier = max(o.Trainer.MinNoiseMultiplier, o.Policy.MinNoiseMultiplier)
	return nil
}

// classes is the number of hashed-tag classes for people named people:
// a power of two at least 4 per person (collisions rare), at least 16.
func classes(people int) int {
	n := 16
	for n < 4*people && n < tagging.MaxTagClasses {
		n *= 2
	}
	return n
}

// Prepare reads the owner's decisions into a trainer, refusing a library
// with fewer than minPeople named people (ErrTooFewPeople) before anything
// is dialled.
func Prepare(lib *tagging.Library, minPeople int, o TrainerOptions) (*Trainer, error) {
	// Read over the most classes, then folded to the library's count:
	// both are powers of two, so a tag modulo the smaller count is the
	// tag computed with it (tagging.HashedTag is the MAC modulo classes).
	td, err := lib.TrainingData(tagging.MaxTagClasses)
	if err != nil {
		return nil, err
	}
	people := 0
	for _, p := range td.People {
		if len(p.Named) > 0 {
			people++
		}
	}
	if people < minPeople {
		return nil, fmt.Errorf("fedjoin: this library has %d people with named faces; taking part needs at least %d, so that each round's noise, calibrated to the budget per person, does not drown what the library contributes: name more people first; nothing was sent: %w",
			people, minPeople, ErrTooFewPeople)
	}
	td.Classes = classes(people)
	for i := range td.People {
		td.People[i].Class %= td.Classes
	}
	return NewTrainer(td, o)
}

// Join takes part in the coordinator's federation until its run is over,
// then imports the federation's model and runs the library's adoption. A
// refusal (policy, budget) is a Report with the outcome and a non-nil
// error wrapping client.ErrPolicy or client.ErrBudgetExhausted.
func Join(ctx context.Context, o Options) (*Report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	tr, err := Prepare(o.Library, o.MinPeople, o.Trainer)
	if err != nil {
		return nil, err
	}
	name := o.Identity.Leaf.Subject.CommonName
	serverName := o.ServerName
	if serverName == "" {
		serverName = hostOf(o.Addr)
	}
	dir, err := os.MkdirTemp("", "veil-join-")
	if err != nil {
		return nil, fmt.Errorf("fedjoin: %w", err)
	}
	defer os.RemoveAll(dir)
	c, err := client.New(client.Options{Addr: o.Addr, ServerName: serverName, Name: name, Creds: credentials.NewTLS(pki.ClientTLS(o.Identity, serverName)),
		Policy: o.Policy, Identity: o.Identity, Dir: dir, Ledger: o.Library.Ledger(), DataSet: DataSet, Trainer: tr,
		Logger: o.Logger, Progress: o.Progress, ReconnectFor: o.ReconnectFor})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	m := &Membership{Coordinator: o.Addr, ServerName: o.ServerName, PKI: o.PKI, Client: name, JoinedAt: time.Now().UTC().Truncate(time.Second)}
	if old, err := ReadMembership(ctx, o.Library); err == nil && old != nil && old.Coordinator == o.Addr {
		m.JoinedAt = old.JoinedAt
	}
	if err := saveMembership(ctx, o.Library, m); err != nil {
		return nil, err
	}
	runErr := c.Run(ctx)
	rep := &Report{Client: name, People: tr.People(), BudgetEpsilon: o.Policy.Budget.Epsilon, Delta: o.Policy.Budget.Delta}
	if s, err := c.Spent(); err == nil {
		rep.EpsilonSpent = s.Epsilon
	}
	switch {
	case runErr == nil:
		rep.Outcome = "done"
		err = adopt(ctx, o, c, tr, rep)
	case errors.Is(runErr, client.ErrBudgetExhausted):
		rep.Outcome, err = "budget_exhausted", runErr
	case errors.Is(runErr, client.ErrPolicy):
		rep.Outcome, rep.Refusal, err = "refused", runErr.Error(), runErr
	default:
		return nil, runErr
	}
	m.Last = rep
	if serr := saveMembership(context.WithoutCancel(ctx), o.Library, m); serr != nil && err == nil {
		err = serr
	}
	return rep, err
}

// adopt downloads the federation's model, imports it and runs the
// library's adoption, filling rep.
func adopt(ctx context.Context, o Options, c *client.Client, tr *Trainer, rep *Report) error {
	w, err := c.LatestModel(ctx)
	if err != nil {
		return err
	}
	file, err := tr.psiFile(w)
	if err != nil {
		return err
	}
	info, err := o.Library.ImportModel(ctx, file)
	if err != nil {
		return err
	}
	rep.Imported = info.Version
	o.Progress(fmt.Sprintf("imported the federation's model as version %d; measuring it on this library's names", info.Version))
	d, err := o.Library.UseModel(ctx, info.Version)
	if err != nil {
		return err
	}
	rep.Decision = &d
	return nil
}

func hostOf(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			h := addr[:i]
			if len(h) > 1 && h[0] == '[' && h[len(h)-1] == ']' {
				h = h[1 : len(h)-1]
			}
			return h
		}
	}
	return addr
}

// ReadMembership returns the library's record of the federation it
// joined (nil when it has none).
func ReadMembership(ctx context.Context, lib *tagging.Library) (*Membership, error) {
	b, err := lib.Membership(ctx)
	if err != nil || b == nil {
		return nil, err
	}
	var m Membership
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("fedjoin: the library's federation record: %w", err)
	}
	return &m, nil
}

func saveMembership(ctx context.Context, lib *tagging.Library, m *Membership) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("fedjoin: %w", err)
	}
	return lib.SetMembership(ctx, b)
}

// Leave forgets the federation the library joined (the record), reporting
// whether there was one. The ledger stays: what was spent on the
// library's people stays spent.
func Leave(ctx context.Context, lib *tagging.Library) (bool, error) {
	m, err := ReadMembership(ctx, lib)
	if err != nil || m == nil {
		return false, err
	}
	return true, lib.SetMembership(ctx, nil)
}

// Status is the library's federation status.
type Status struct {
	Member     *Membership `json:"membership,omitempty"`
	Ledger     *LedgerInfo `json:"ledger,omitempty"`
	ModelInUse int64       `json:"model_in_use"`
}

// LedgerInfo is the library ledger's budget and what was spent, per person.
type LedgerInfo struct {
	Budget  dp.Budget `json:"budget"`
	Spent   float64   `json:"epsilon_spent"`
	Charges int       `json:"charges"`
}

// ReadStatus reads the library's federation status.
func ReadStatus(ctx context.Context, lib *tagging.Library) (*Status, error) {
	m, err := ReadMembership(ctx, lib)
	if err != nil {
		return nil, err
	}
	st := &Status{Member: m}
	if st.ModelInUse, err = lib.ActiveModel(ctx); err != nil {
		return nil, err
	}
	led, err := lib.Ledger().Read(dp.DataSet{Name: DataSet, Unit: client.DefaultUnit})
	if errors.Is(err, dp.ErrNoLedger) {
		return st, nil
	}
	if err != nil {
		return nil, err
	}
	b, _ := led.Budget()
	s, err := led.Spent(nil)
	if err != nil {
		return nil, err
	}
	info := &LedgerInfo{Budget: b, Spent: s.Epsilon}
	for _, h := range led.History() {
		if h.Kind == dp.HistoryCharge {
			info.Charges++
		}
	}
	st.Ledger = info
	return st, nil
}
