package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestFedKeygenRefusesBadSettings: veil fed keygen names what is wrong
// before it creates anything: no state folder, a small key without the
// test flag, a client's certificate instead of a server's.
func TestFedKeygenRefusesBadSettings(t *testing.T) {
	dir := t.TempDir()
	pkiDir := filepath.Join(dir, "ca")
	for _, args := range [][]string{
		{"fed", "certs", "init", "--pki", pkiDir},
		{"fed", "certs", "issue", "alice", "--pki", pkiDir},
	} {
		var out, errb bytes.Buffer
		if code := Main(args, nil, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
	}
	state := filepath.Join(dir, "state")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fed", "keygen", "--pki", pkiDir, "--name", "alice"}, "--state is required"},
		{[]string{"fed", "keygen", "--pki", pkiDir, "--name", "alice", "--state", state, "--bits", "512"}, "--bits must be at least 2048"},
		{[]string{"fed", "keygen", "--pki", pkiDir, "--name", "alice", "--state", state, "--bits", "512", "--insecure-test-key-size", "--listen", "127.0.0.1:0"}, "needs a server certificate"},
		{[]string{"fed", "keygen", "--pki", pkiDir, "--name", "nobody", "--state", state}, "is missing"},
	} {
		var out, errb bytes.Buffer
		if code := Main(c.args, nil, &out, &errb); code == 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error saying %q", c.args, code, errb.String(), c.want)
		}
	}
}
