package cli

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

func TestBenchPaillierJSON(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main([]string{"bench", "paillier", "--bits", "512", "--insecure-test-key-size", "--samples", "4", "--json"}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r map[string]any
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	for _, k := range []string{"bits", "keygen_s", "encrypt_per_s", "encrypt_precomputed_per_s", "decrypt_per_s", "add_per_s", "scalar_mul_per_s"} {
		v, ok := r[k].(float64)
		if !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive number", k, r[k])
		}
	}
	if r["bits"].(float64) != 512 {
		t.Errorf("bits = %v", r["bits"])
	}
	// The baseline cites its measurement (tool, versions, machine), never an issue a user cannot read.
	base, _ := r["baseline"].(string)
	for _, want := range []string{"python-paillier 1.5.0", "gmpy2 2.1.2", "phe_baseline.py", "AMD EPYC"} {
		if !strings.Contains(base, want) {
			t.Errorf("baseline %q does not say %q", base, want)
		}
	}
	if strings.Contains(strings.ToLower(base), "issue") {
		t.Errorf("baseline %q cites an issue instead of the measurement", base)
	}
}

// TestBenchSecaggSmallKeysNeedTheFlag: the CLI refuses keys under 2048
// bits unless the hidden test flag asks for them, even in a test binary.
func TestBenchSecaggSmallKeysNeedTheFlag(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "paillier", "--bits", "512", "--samples", "1", "--json"},
		{"bench", "dphe", "--dim", "4", "--classes", "2", "--bits", "512", "--json"},
	} {
		var out, errb bytes.Buffer
		if code := Main(args, nil, &out, &errb); code == 0 || !strings.Contains(errb.String(), "--bits must be at least 2048") {
			t.Errorf("%v: exit %d, stderr %q; want a refusal of the 512-bit key", args, code, errb.String())
		}
	}
}

// TestBenchPaillierProgress: the vector steps report progress on stderr;
// --quiet silences every line.
func TestBenchPaillierProgress(t *testing.T) {
	args := []string{"bench", "paillier", "--bits", "512", "--insecure-test-key-size", "--samples", "5"}
	var out, errb bytes.Buffer
	if code := Main(args, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{
		"encrypting 5 values (full randomness, every core): 5/5 (100%)",
		"encrypting 5 values (short-exponent randomness, every core): 5/5 (100%)",
		"decrypting 5 values (every core): 5/5 (100%)",
	} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	out.Reset()
	errb.Reset()
	if code := Main(append(args, "-q"), nil, &out, &errb); code != 0 || errb.Len() != 0 || !strings.Contains(out.String(), "Paillier 512-bit") {
		t.Errorf("-q: exit %d, stderr %q, stdout %q", code, errb.String(), out.String())
	}
}

// TestBenchDPHEProgress: the long steps (users' encryption, the key
// generator's decryption) report progress on stderr, and --quiet silences
// all of it; --json keeps stdout machine-readable either way.
func TestBenchDPHEProgress(t *testing.T) {
	args := []string{"bench", "dphe", "--dim", "8", "--classes", "4", "--users", "3", "--sparsity", "0.5",
		"--bits", "512", "--insecure-test-key-size", "--json"}
	var out, errb bytes.Buffer
	if code := Main(args, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r map[string]any
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("stdout is not JSON: %v: %s", err, out.String())
	}
	stderr := errb.String()
	// 16 non-zeros with M = 16: one shard of 16 entries plus its checksum per user.
	for _, want := range []string{
		"user 1: encrypting 16 non-zeros of 32 (with padding): 17/17 (100%)",
		"user 3: encrypting 16 non-zeros of 32 (with padding): 17/17 (100%)",
		"key generator: decrypting the sum of 32 positions: ",
		"aggregating 3 messages...",
		"user 2: dense baseline, 667 encryptions: 667/667 (100%)",
		"dense baseline: decrypting 2001 values: 2001/2001 (100%)",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	decrypt := regexp.MustCompile(`key generator: decrypting the sum of 32 positions: (\d+)/(\d+) \(100%\)`).FindStringSubmatch(stderr)
	if decrypt == nil || decrypt[1] != decrypt[2] {
		t.Errorf("no completed decryption progress in:\n%s", stderr)
	}
	out.Reset()
	errb.Reset()
	if code := Main(append(args, "--quiet"), nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d with --quiet: %s", code, errb.String())
	}
	if errb.Len() != 0 {
		t.Errorf("--quiet still wrote to stderr:\n%s", errb.String())
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("stdout with --quiet is not JSON: %v", err)
	}
}

func TestBenchDPHEJSON(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main([]string{"bench", "dphe", "--dim", "16", "--classes", "4", "--users", "3", "--sparsity", "0.75",
		"--bits", "512", "--insecure-test-key-size", "--quiet", "--json"}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r map[string]any
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	for _, k := range []string{"dim", "classes", "users", "sparsity", "user_encrypt_s", "user_bytes", "aggregate_s", "decrypt_s",
		"dense_user_encrypt_s", "dense_user_bytes", "speedup"} {
		if _, ok := r[k].(float64); !ok {
			t.Errorf("%s missing or not a number: %v", k, r[k])
		}
	}
	if r["capacity"].(float64) != 16 || r["nonzeros_per_user"].(float64) != 16 || r["dense_user_bytes"].(float64) != 64*128 {
		t.Errorf("capacity %v, non-zeros %v, dense bytes %v", r["capacity"], r["nonzeros_per_user"], r["dense_user_bytes"])
	}
	if r["dense_extrapolated"] != true || r["dense_sample"].(float64) < 2000 {
		t.Errorf("dense figures must say they are extrapolated from ≥2000 encryptions: %v %v", r["dense_extrapolated"], r["dense_sample"])
	}
}

func TestBenchSecaggRejectsBadFlags(t *testing.T) {
	cases := [][]string{
		{"bench", "dphe", "--users", "2"},
		{"bench", "dphe", "--sparsity", "1"},
		{"bench", "dphe", "--dense-sample", "100"},
		{"bench", "paillier", "--randomness", "fast"},
		{"bench", "paillier", "--samples", "0"},
		{"bench", "secagg", "--clients", "2"},
		{"bench", "secagg", "--dphe-users", "2"},
		{"bench", "secagg", "--bits", "512"},
	}
	for _, args := range cases {
		var out, errb bytes.Buffer
		if code := Main(args, nil, &out, &errb); code == 0 {
			t.Errorf("%v accepted", args)
		} else if !strings.Contains(errb.String(), "veil:") {
			t.Errorf("%v: no error message", args)
		}
	}
}

// TestBenchSecaggJSON: veil bench secagg measures a masking round per
// --clients value and a packed DPHE round, and reports them as JSON.
func TestBenchSecaggJSON(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main([]string{"bench", "secagg", "--clients", "3,12", "--length", "3000", "--block", "1024", "--dphe-users", "3",
		"--bits", "512", "--insecure-test-key-size", "--quiet", "--json"}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r struct {
		Masking []map[string]float64 `json:"masking"`
		DPHE    map[string]any       `json:"dphe"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(r.Masking) != 2 || r.Masking[1]["clients"] != 12 || r.Masking[1]["degree"] != 8 || r.Masking[1]["threshold"] != 7 || r.Masking[1]["dropped"] != 1 {
		t.Errorf("masking rounds %v", r.Masking)
	}
	for _, k := range []string{"client_cpu_s", "client_bytes_sent", "bytes_vs_plaintext", "server_unmask_cpu_s"} {
		if r.Masking[1][k] <= 0 {
			t.Errorf("masking %s = %v", k, r.Masking[1][k])
		}
	}
	if r.DPHE["privacy_unit"] != "update" {
		t.Errorf("the DPHE ε's unit is %v, want update", r.DPHE["privacy_unit"])
	}
	for _, k := range []string{"lanes", "user_encrypt_cpu_s", "aggregate_bytes", "decrypt_cpu_s", "unpacked_user_bytes", "clear_support_aggregate_bytes"} {
		if v, ok := r.DPHE[k].(float64); !ok || v <= 0 {
			t.Errorf("dphe %s = %v", k, r.DPHE[k])
		}
	}
}
