package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/wire"
)

// asyncLoop takes part in an asynchronous coordinator's exchanges (the
// task's AsyncConfig set: EASGD or FedBuff), starting with task: for each
// one it checks the task against its owner's policy, plans, checks and
// charges its DP-SGD as for a round, downloads the model served, trains
// and sends Δ, its parameters after training minus the model served;
// then it asks for its next exchange (Poll), until the run is over (nil)
// or an error. Under EASGD without thinning the client keeps its own
// parameters x^k between exchanges (Irene Algorithm 1): it starts each
// from x^k ← x^k − β(x^k − x̃), x̃ the centre served, and trains from
// there, so Δ = x − x̃ carries its exploration; a thinned model (a new
// subset of units each time) starts from the model served.
func (c *Client) asyncLoop(ctx context.Context, task *fedpb.RoundConfig) error {
	for {
		if err := c.exchange(ctx, task); err != nil {
			return err
		}
		next, err := c.nextExchange(ctx)
		if err != nil || next == nil {
			return err
		}
		task = next
	}
}

// nextExchange asks the coordinator for the client's next exchange (nil
// once the run is over).
func (c *Client) nextExchange(ctx context.Context) (*fedpb.RoundConfig, error) {
	for {
		resp, err := c.api.Poll(ctx, &fedpb.PollRequest{ProtocolVersion: fedpb.ProtocolVersion})
		if err != nil {
			return nil, fmt.Errorf("client: asking for the next exchange: %w", err)
		}
		switch r := resp.GetReply().(type) {
		case *fedpb.PollResponse_Done:
			c.o.Progress("done: " + r.Done)
			return nil, nil
		case *fedpb.PollResponse_Task:
			if r.Task.GetAsync() == nil {
				return nil, errors.New("client: the coordinator answered an exchange's request with a round")
			}
			return r.Task, nil
		case *fedpb.PollResponse_RetryAfterMs:
			wait := time.Duration(min(max(r.RetryAfterMs, 10), 60_000)) * time.Millisecond
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-c.o.Clock.After(wait):
			}
		default:
			return nil, errors.New("client: the coordinator sent an empty answer")
		}
	}
}

// exchange takes part in one asynchronous exchange.
func (c *Client) exchange(ctx context.Context, task *fedpb.RoundConfig) error {
	a := task.GetAsync()
	switch {
	case task.GetSecagg() != nil || task.GetDphe() != nil:
		return errors.New("client: an asynchronous exchange with secure aggregation is not supported")
	case a.GetStrategy() != "easgd" && a.GetStrategy() != "fedbuff":
		return fmt.Errorf("client: exchange %d: unknown asynchronous strategy %q", task.GetRound(), a.GetStrategy())
	case a.GetStrategy() == "easgd" && !(a.GetBeta() > 0 && a.GetBeta() <= 1):
		return fmt.Errorf("client: exchange %d: EASGD moving rate β = %g is outside (0, 1]", task.GetRound(), a.GetBeta())
	}
	if err := c.o.Policy.CheckRound(task); err != nil {
		c.o.Progress(fmt.Sprintf("refused: %v", err))
		c.decline(ctx, task, err)
		return fmt.Errorf("client: %w", err)
	}
	var plan *fedpb.DPParams
	if task.GetDp() != nil {
		var err error
		if plan, err = c.planAndCharge(ctx, task); err != nil {
			return err
		}
	}
	served, err := c.fetch(ctx, task.GetModelVersion())
	if err != nil {
		return err
	}
	start := served
	elastic := a.GetStrategy() == "easgd" && a.GetThinP() == 0
	if elastic && c.easgd != nil && c.easgd.SameLayout(served) == nil {
		// x^k ← x^k − β(x^k − x̃).
		start = c.easgd.Clone()
		for i := range start {
			for j, v := range start[i].Values {
				start[i].Values[j] = v - float32(a.GetBeta())*(v-served[i].Values[j])
			}
		}
	}
	up, err := c.train(ctx, start, task, plan)
	if err != nil {
		return err
	}
	if err := start.SameLayout(up.Weights); err != nil {
		return c.trainingFailed(ctx, task, fmt.Errorf("client: exchange %d: %w: the update: %w", task.GetRound(), ErrTrainingFailed, err))
	}
	x, delta := start.Clone(), start.Clone()
	for i := range x {
		for j := range x[i].Values {
			x[i].Values[j] += up.Weights[i].Values[j]
			delta[i].Values[j] = x[i].Values[j] - served[i].Values[j]
		}
	}
	if elastic {
		c.easgd = x
	}
	out := Update{Weights: delta, DP: up.DP, Examples: up.Examples}
	c.last = &sent{round: task.GetRound(), version: task.GetModelVersion(), up: out}
	return c.submit(ctx, task, out)
}

// taskKind names what task is: an asynchronous "exchange" or a "round".
func taskKind(task *fedpb.RoundConfig) string {
	if task.GetAsync() != nil {
		return "exchange"
	}
	return "round"
}

// EASGDParams returns the client's own EASGD parameters x^k (nil before
// its first exchange, or when it takes part in none).
func (c *Client) EASGDParams() wire.Weights {
	if c.easgd == nil {
		return nil
	}
	return c.easgd.Clone()
}
