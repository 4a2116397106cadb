package secround

import (
	"errors"
	"fmt"

	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/secagg/quant"
)

// PlanProto is plan in the protocol's form (SecAggConfig.ddp).
func PlanProto(p ddp.Plan) *fedpb.DDPPlan {
	return &fedpb.DDPPlan{Unit: p.Unit, Delta: p.Delta, Clip: p.Clip, SamplingRate: p.SamplingRate, Rounds: uint32(p.Rounds),
		Clients: uint32(p.Clients), Threshold: uint32(p.Threshold), Noise: p.Noise, Dim: uint32(p.Dim), Block: uint32(p.Block),
		Scale: p.Scale, SumClip: p.SumClip, Bits: uint32(p.Bits), WrapProb: p.WrapProb, ExpectedBatch: p.ExpectedBatch}
}

// PlanOf is the distributed DP-SGD plan of a round's secure aggregation
// section, unchecked (ddp.CheckPlan and Round check it), or false when the
// round is not distributed DP-SGD.
func PlanOf(cfg *fedpb.SecAggConfig) (ddp.Plan, bool) {
	p := cfg.GetDdp()
	if p == nil {
		return ddp.Plan{}, false
	}
	return ddp.Plan{Unit: p.GetUnit(), Delta: p.GetDelta(), Clip: p.GetClip(), SamplingRate: p.GetSamplingRate(), Rounds: int(p.GetRounds()),
		Clients: int(p.GetClients()), Threshold: int(p.GetThreshold()), Noise: p.GetNoise(), Dim: int(p.GetDim()), Block: int(p.GetBlock()),
		Scale: p.GetScale(), SumClip: p.GetSumClip(), Bits: int(p.GetBits()), WrapProb: p.GetWrapProb(), ExpectedBatch: p.GetExpectedBatch()}, true
}

// Round returns the distributed DP-SGD round of cfg (ddp.NewRound with the
// rotation seeded by the round id), checking what the plan must share with
// the masking: its wrap bound covers the roster, the masking threshold is
// at least the plan's (the plan's threshold is what clients check against
// their trust), and the masked length is the encoding's.
func Round(cfg *fedpb.SecAggConfig) (*ddp.Round, ddp.Plan, error) {
	plan, ok := PlanOf(cfg)
	switch {
	case !ok:
		return nil, plan, errors.New("the round is not distributed DP-SGD")
	case len(cfg.GetRoundId()) != 32:
		return nil, plan, fmt.Errorf("the round id has %d bytes, not 32", len(cfg.GetRoundId()))
	case plan.Clients < len(cfg.GetRoster()):
		return nil, plan, fmt.Errorf("the plan's wrap bound covers %d clients, the roster has %d", plan.Clients, len(cfg.GetRoster()))
	case int(cfg.GetThreshold()) < plan.Threshold:
		return nil, plan, fmt.Errorf("the masking threshold %d is below the plan's %d", cfg.GetThreshold(), plan.Threshold)
	}
	r, err := ddp.NewRound(plan, quant.RotationSeed([32]byte(cfg.GetRoundId())))
	if err != nil {
		return nil, plan, err
	}
	if int(cfg.GetLength()) != r.Padded() {
		return nil, plan, fmt.Errorf("the masked length %d is not the encoding's %d", cfg.GetLength(), r.Padded())
	}
	return r, plan, nil
}
