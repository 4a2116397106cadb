package ops_test

import (
	"crypto/x509"
	"path/filepath"
	"testing"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/fed/wire"
)

// --strategy fedbuff --secagg masking --fedbuff-size 4 makes a coordinator
// whose buffers are masking rounds of 4 clients, whatever the round flags
// (--min-available 2 by default) say: they are unused.
func TestFedBuffUnderMaskingConfig(t *testing.T) {
	c := ops.DefaultConfig()
	c.State, c.Strategy, c.SecAgg, c.FedBuffSize = filepath.Join(t.TempDir(), "s.db"), "fedbuff", "masking", 4
	o, err := c.Options()
	if err != nil {
		t.Fatal(err)
	}
	if o.Async == nil || o.Async.BufferSize != 4 || o.SecAgg == nil {
		t.Fatalf("options %+v", o)
	}
	o.Init = wire.Weights{{Name: "w", Shape: []int{2}, Values: []float32{1, 2}}}
	o.SecAgg.Roots = x509.NewCertPool()
	co, err := coord.New(o)
	if err != nil {
		t.Fatalf("FedBuff with K = 4 under masking: %v", err)
	}
	co.Close()
}
