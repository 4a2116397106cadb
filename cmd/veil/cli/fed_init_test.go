package cli

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/nn/checkpoint"
)

func TestFedInitModel(t *testing.T) {
	out := filepath.Join(t.TempDir(), "init.ckpt")
	var info struct {
		Out    string `json:"out"`
		Params int    `json:"params"`
	}
	if err := json.Unmarshal([]byte(mustVeil(t, "fed", "init-model", "--out", out, "--seed", "3", "--json")), &info); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ops.WeightsFromCheckpoint(ck)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ops.InitialHead(ops.InitialHeadOptions{Seed: 3})
	if info.Out != out || info.Params != 557824 || w.Len() != 557824 || ck.Header.Seed != 3 || !ck.Header.Public ||
		ck.Header.Model.Features != "agegender" || ck.Values[0][0] != want.Values[0][0] {
		t.Fatalf("report %+v, checkpoint header %+v", info, ck.Header)
	}
	// An existing file is kept unless --force.
	var o, e bytes.Buffer
	if code := Main([]string{"fed", "init-model", "--out", out, "--seed", "4"}, strings.NewReader(""), &o, &e); code == 0 || !strings.Contains(e.String(), "--force") {
		t.Fatalf("exit %d, %q: want a refusal naming --force", code, e.String())
	}
	mustVeil(t, "fed", "init-model", "--out", out, "--seed", "4", "--force")
	if ck2, _ := checkpoint.Load(out); ck2 == nil || ck2.Header.Seed != 4 {
		t.Fatal("--force did not replace the file")
	}
	e.Reset()
	if code := Main([]string{"fed", "init-model"}, strings.NewReader(""), &o, &e); code == 0 || !strings.Contains(e.String(), "--out") {
		t.Fatalf("exit %d, %q: want --out required", code, e.String())
	}
}
