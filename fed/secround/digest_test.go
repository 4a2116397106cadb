package secround_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/secround"
)

// fullConfig is a configuration with every field, of every message, set
// to a value that is not the default.
func fullConfig() *fedpb.SecAggConfig {
	cfg := &fedpb.SecAggConfig{}
	fill(cfg.ProtoReflect(), 1)
	return cfg
}

// fill sets every field of m (recursively; a list gets two elements) to
// a distinct non-default value derived from seed.
func fill(m protoreflect.Message, seed int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		v := seed*100 + i + 1
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for j := range 2 {
				if fd.Kind() == protoreflect.MessageKind {
					e := l.NewElement()
					fill(e.Message(), v*10+j)
					l.Append(e)
				} else {
					l.Append(scalar(fd, v*10+j))
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			fill(m.Mutable(fd).Message(), v)
		default:
			m.Set(fd, scalar(fd, v))
		}
	}
}

func scalar(fd protoreflect.FieldDescriptor, v int) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("s" + string(rune('a'+v%26)))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{byte(v), byte(v >> 8), 3})
	case protoreflect.Uint32Kind:
		return protoreflect.ValueOfUint32(uint32(v))
	case protoreflect.Uint64Kind:
		return protoreflect.ValueOfUint64(uint64(v))
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(int64(v))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(v) + 0.25)
	}
	panic("secround test: a field kind fill does not know: " + fd.Kind().String() + " (" + string(fd.FullName()) + "); add it here and to ConfigDigest")
}

// mutations returns, for every field of m reachable from it (list
// elements included), a function that changes that field alone, named by
// its path.
func mutations(m protoreflect.Message, path string, out map[string]func(protoreflect.Message)) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			sub := map[string]func(protoreflect.Message){}
			mutations(m.Get(fd).List().Get(0).Message(), "", sub)
			for name, f := range sub {
				out[p+"[0]"+name] = func(x protoreflect.Message) { f(x.Mutable(fd).List().Get(0).Message()) }
			}
			out[p+" (one element fewer)"] = func(x protoreflect.Message) { x.Mutable(fd).List().Truncate(1) }
		case fd.IsList():
			out[p+"[0]"] = func(x protoreflect.Message) { x.Mutable(fd).List().Set(0, scalar(fd, 999)) }
		case fd.Kind() == protoreflect.MessageKind:
			sub := map[string]func(protoreflect.Message){}
			mutations(m.Get(fd).Message(), "", sub)
			for name, f := range sub {
				out[p+name] = func(x protoreflect.Message) { f(x.Mutable(fd).Message()) }
			}
			out[p+" (absent)"] = func(x protoreflect.Message) { x.Clear(fd) }
		default:
			out[p] = func(x protoreflect.Message) { x.Set(fd, scalar(fd, 999)) }
		}
	}
}

// TestConfigDigestCoversEveryField changes each field of the secure
// aggregation section alone (found by reflection over the protocol's
// descriptor, so a field added later is checked too) and checks that the
// digest changes: a coordinator cannot give two clients configurations
// that differ in any field and have them sign the same digest. An empty
// message and an absent one differ too, and the digest is what Params
// binds in masking.Params.Context.
func TestConfigDigestCoversEveryField(t *testing.T) {
	base := fullConfig()
	d0 := secround.ConfigDigest(base)
	muts := map[string]func(protoreflect.Message){}
	mutations(base.ProtoReflect(), "SecAggConfig", muts)
	if len(muts) < 30 {
		t.Fatalf("only %d mutations found", len(muts))
	}
	for name, mutate := range muts {
		c := proto.Clone(base).(*fedpb.SecAggConfig)
		mutate(c.ProtoReflect())
		if proto.Equal(c, base) {
			t.Fatalf("%s: the mutation changed nothing", name)
		}
		if secround.ConfigDigest(c) == d0 {
			t.Errorf("changing %s leaves the digest unchanged", name)
		}
	}
	c := proto.Clone(base).(*fedpb.SecAggConfig)
	c.Quant, c.Ddp = &fedpb.QuantConfig{}, nil
	e := proto.Clone(c).(*fedpb.SecAggConfig)
	e.Quant = nil
	if secround.ConfigDigest(c) == secround.ConfigDigest(e) {
		t.Error("an empty quantiser and none have the same digest")
	}
	// Params binds the digest and the model's.
	cfg := &fedpb.SecAggConfig{Mode: "masking", RoundId: make([]byte, 32), GraphSeed: make([]byte, 32), Degree: 3, Threshold: 3, Length: 8,
		Roster: []*fedpb.SecAggMember{{Id: 1, Client: "a"}, {Id: 2, Client: "b"}, {Id: 3, Client: "c"}, {Id: 4, Client: "d"}}}
	model := [32]byte{1}
	p, err := secround.Params(cfg, model)
	if err != nil {
		t.Fatal(err)
	}
	if p.Context != secround.RoundContext(cfg, model) {
		t.Fatal("Params does not bind the configuration's digest and the model's")
	}
	cfg.MinHonest = 3
	q, err := secround.Params(cfg, model)
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := p.Digest()
	if qd, _ := q.Digest(); pd == qd {
		t.Fatal("two configurations that differ outside the masking parameters give one parameters digest")
	}
}

// TestRoundContextBindsTheModel: two clients of one configuration that
// trained from different models (one byte of the weights apart) sign
// different contexts and so different masking parameters, and a model
// version that is not a hex SHA-256 is refused.
func TestRoundContextBindsTheModel(t *testing.T) {
	cfg := fullConfig()
	a, err := secround.ModelDigest("00" + strings.Repeat("ab", 31))
	if err != nil {
		t.Fatal(err)
	}
	b := a
	b[31] ^= 1
	if secround.RoundContext(cfg, a) == secround.RoundContext(cfg, b) {
		t.Fatal("two models give one round context")
	}
	if secround.RoundContext(cfg, a) == secround.ConfigDigest(cfg) {
		t.Fatal("the round context is the configuration's digest alone")
	}
	for _, v := range []string{"", "abc", strings.Repeat("ab", 31), strings.Repeat("ab", 33), strings.Repeat("zz", 32)} {
		if _, err := secround.ModelDigest(v); err == nil {
			t.Errorf("ModelDigest(%q) accepted", v)
		}
	}
}
