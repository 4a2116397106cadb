// Package ops runs a federation's coordinator as a service: the gRPC
// server with mutual TLS and the standard gRPC health service, Prometheus
// metrics on an HTTP endpoint, a graceful stop, the coordinator's
// configuration file, and the evaluation of its model on LFW's
// development pairs after every aggregated round (Evaluator).
//
// Metrics live in a private registry (never Prometheus's global default),
// so several coordinators in one process (tests) keep their counts apart.
// They name clients (the per-client ε gauge) and so reveal who takes part
// and how much of its budget each has spent: serve them on a loopback or
// otherwise trusted address. Update values never reach a metric or a log.
package ops

import (
	"context"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/stats"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
)

// RefusalReasons are the reasons the coordinator gives when it refuses an
// update; each has a series from the start (at zero).
var RefusalReasons = []string{"protocol", "stale", "not_selected", "replay", "dp", "unknown_client", "budget",
	"weight", "shape", "size", "malformed", "non_finite", "norm", "internal", "concurrent", "stalled", "busy"}

// WithdrawalReasons are the reasons a selected client withdraws from a
// round for, as the metric veil_fed_withdrawals_total labels them, each
// with a series from the start (at zero): coord.ReasonRevoked, and the
// reasons a Veil client declines with (fed/client.DeclineReason: a policy
// setting, its budget, a failed training, its owner stopping it). Any
// other reason a client gives is counted as "other", so that no client
// can add series to the metrics.
var WithdrawalReasons = []string{coord.ReasonRevoked, "budget", "withdrawn", "training", "stopped",
	"policy: dp", "policy: privacy unit", "policy: delta", "policy: noise multiplier", "policy: clip",
	"policy: sampling rate", "policy: steps", "other"}

// withdrawalLabel is the label veil_fed_withdrawals_total counts reason
// under.
func withdrawalLabel(reason string) string {
	for _, r := range WithdrawalReasons {
		if r == reason {
			return r
		}
	}
	return "other"
}

// Metrics is the coordinator's Prometheus metrics. It implements
// coord.Observer (pass it as coord.Options.Metrics) and, through
// StatsHandler, counts the gRPC connections and bytes.
type Metrics struct {
	reg *prometheus.Registry

	rounds       *prometheus.CounterVec
	accepted     prometheus.Counter
	refused      *prometheus.CounterVec
	withdrawals  *prometheus.CounterVec
	updateBytes  prometheus.Counter
	modelBytes   prometheus.Counter
	bytesIn      prometheus.Counter
	bytesOut     prometheus.Counter
	connections  prometheus.Gauge
	roundSeconds prometheus.Histogram
	aggSeconds   prometheus.Histogram
	epsilon      *prometheus.GaugeVec
	evalAccuracy prometheus.Gauge
	evalRound    prometheus.Gauge
	watchOnce    sync.Once
}

var (
	_ coord.Observer           = (*Metrics)(nil)
	_ coord.WithdrawalObserver = (*Metrics)(nil)
)

// NewMetrics returns metrics registered on a new private registry, with
// the Go runtime and process collectors.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		reg: reg,
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "veil_fed_rounds_total",
			Help: "Rounds closed by this process, by outcome (done: aggregated; failed: too few updates by the deadline, or aggregation failed)."},
			[]string{"state"}),
		accepted: prometheus.NewCounter(prometheus.CounterOpts{Name: "veil_fed_updates_accepted_total",
			Help: "Client updates accepted (charged to the client's ledger and folded into the round's sum)."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "veil_fed_updates_refused_total",
			Help: "Client updates refused, by reason (stale, replay, budget, norm, ...)."}, []string{"reason"}),
		withdrawals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "veil_fed_withdrawals_total",
			Help: "Selected clients that withdrew from a round (declined it, or were revoked), by reason (revoked, budget, policy: SETTING, other)."},
			[]string{"reason"}),
		updateBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "veil_fed_update_bytes_accepted_total",
			Help: "Payload bytes of accepted updates."}),
		modelBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "veil_fed_model_bytes_sent_total",
			Help: "Payload bytes of models sent to clients."}),
		bytesIn: prometheus.NewCounter(prometheus.CounterOpts{Name: "veil_fed_grpc_received_bytes_total",
			Help: "Bytes of gRPC messages received (on the wire, after TLS decryption)."}),
		bytesOut: prometheus.NewCounter(prometheus.CounterOpts{Name: "veil_fed_grpc_sent_bytes_total",
			Help: "Bytes of gRPC messages sent (on the wire, before TLS encryption)."}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Name: "veil_fed_connected_clients",
			Help: "Open client connections that completed the mutual-TLS handshake."}),
		roundSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "veil_fed_round_duration_seconds",
			Help:    "Time from a round's start (or the coordinator's restart in it) to its close.",
			Buckets: prometheus.ExponentialBuckets(0.1, 2, 16)}),
		aggSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "veil_fed_aggregation_duration_seconds",
			Help:    "Time to turn a round's sum into the next model.",
			Buckets: prometheus.ExponentialBuckets(1e-4, 4, 12)}),
		epsilon: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "veil_fed_client_epsilon_spent",
			Help: "ε each client's ledger at the coordinator records (at the client's δ, in the run's privacy unit)."},
			[]string{"client"}),
		evalAccuracy: prometheus.NewGauge(prometheus.GaugeOpts{Name: "veil_fed_eval_accuracy",
			Help: "Verification accuracy of the model's last evaluation (NaN before any)."}),
		evalRound: prometheus.NewGauge(prometheus.GaugeOpts{Name: "veil_fed_eval_round",
			Help: "Rounds closed when the model was last evaluated (-1 before any)."}),
	}
	m.evalAccuracy.Set(math.NaN())
	m.evalRound.Set(-1)
	reg.MustRegister(m.rounds, m.accepted, m.refused, m.withdrawals, m.updateBytes, m.modelBytes, m.bytesIn, m.bytesOut, m.connections,
		m.roundSeconds, m.aggSeconds, m.epsilon, m.evalAccuracy, m.evalRound,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, s := range []string{"done", "failed"} {
		m.rounds.WithLabelValues(s)
	}
	for _, r := range RefusalReasons {
		m.refused.WithLabelValues(r)
	}
	for _, r := range WithdrawalReasons {
		m.withdrawals.WithLabelValues(r)
	}
	return m
}

// Registry returns the metrics' registry.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in Prometheus's text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Watch adds gauges read from the coordinator at every scrape: the open
// round, the rounds closed (in this run, restarts included), and the
// bytes and streams of the receive budget. Call it once.
func (m *Metrics) Watch(c *coord.Coordinator) {
	m.watchOnce.Do(func() {
		m.reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "veil_fed_open_round",
				Help: "The open round's number (0 between rounds)."}, func() float64 { o, _ := c.Round(); return float64(o) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "veil_fed_rounds_closed",
				Help: "Rounds closed so far in the run (done or failed), restarts included."}, func() float64 { _, n := c.Round(); return float64(n) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "veil_fed_receive_bytes_held",
				Help: "Bytes held by the buffers of updates being received or waiting to be folded (bounded by --receive-budget-mib)."},
				func() float64 { return float64(c.ReceiveStats().Held) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "veil_fed_receive_streams_waiting",
				Help: "Update streams waiting for room in the receive budget."},
				func() float64 { return float64(c.ReceiveStats().Waiting) }),
		)
	})
}

// Seed sets the per-client ε gauges from a status read at start-up, so a
// restarted coordinator reports what its ledgers hold before the next
// update arrives.
func (m *Metrics) Seed(st *fedpb.StatusResponse) {
	for _, c := range st.GetClients() {
		m.epsilon.WithLabelValues(c.GetId()).Set(c.GetEpsilon())
	}
}

// RoundClosed implements coord.Observer.
func (m *Metrics) RoundClosed(state string, d, aggregation time.Duration) {
	m.rounds.WithLabelValues(state).Inc()
	m.roundSeconds.Observe(d.Seconds())
	if state == "done" {
		m.aggSeconds.Observe(aggregation.Seconds())
	}
}

// UpdateAccepted implements coord.Observer.
func (m *Metrics) UpdateAccepted(client string, bytes int, spentEpsilon float64) {
	m.accepted.Inc()
	m.updateBytes.Add(float64(bytes))
	m.epsilon.WithLabelValues(client).Set(spentEpsilon)
}

// UpdateRefused implements coord.Observer.
func (m *Metrics) UpdateRefused(reason string) { m.refused.WithLabelValues(reason).Inc() }

// ClientWithdrew implements coord.WithdrawalObserver.
func (m *Metrics) ClientWithdrew(reason string) {
	m.withdrawals.WithLabelValues(withdrawalLabel(reason)).Inc()
}

// Evaluated records an evaluation of the model after rounds closed
// rounds.
func (m *Metrics) Evaluated(rounds int, accuracy float64) {
	m.evalAccuracy.Set(accuracy)
	m.evalRound.Set(float64(rounds))
}

// BytesOut implements coord.Observer.
func (m *Metrics) BytesOut(n int) { m.modelBytes.Add(float64(n)) }

// StatsHandler returns a gRPC server stats handler counting connections
// and message bytes into m.
func (m *Metrics) StatsHandler() stats.Handler { return statsHandler{m} }

type statsHandler struct{ m *Metrics }

func (h statsHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (h statsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (h statsHandler) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch p := s.(type) {
	case *stats.InPayload:
		h.m.bytesIn.Add(float64(p.WireLength))
	case *stats.OutPayload:
		h.m.bytesOut.Add(float64(p.WireLength))
	}
}

func (h statsHandler) HandleConn(_ context.Context, s stats.ConnStats) {
	switch s.(type) {
	case *stats.ConnBegin:
		h.m.connections.Inc()
	case *stats.ConnEnd:
		h.m.connections.Dec()
	}
}
