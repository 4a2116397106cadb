//go:build unix

package keygen

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/secagg/dphe"
)

// TestStateIsPrivateAndSecretsStayOutOfLogs: the state folder is 0700 and
// its file 0600 (they hold the private key and the rounds' seeds), and
// neither the key nor a seed appears in the key generator's log.
func TestStateIsPrivateAndSecretsStayOutOfLogs(t *testing.T) {
	old := syscallUmask(0)
	defer syscallUmask(old)
	dir := filepath.Join(t.TempDir(), "state")
	var logs bytes.Buffer
	s, err := Open(Options{Dir: dir, Coordinator: "coordinator", Bits: 512, AllowInsecureTestKeySize: true,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.mu.Lock()
	if _, err := s.kg.NewRound(dphe.RoundParams{Round: 1, Dim: 8, Capacity: 2, Users: []uint32{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	s.names[1] = []string{"a", "b", "c"}
	if err := s.saveLocked(); err != nil {
		t.Fatal(err)
	}
	s.mu.Unlock()
	s.log.Info("round set up", "round", 1)
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, stateFile): 0o600} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %v; want %v", path, err, fi.Mode().Perm(), want)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		t.Fatal(err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil || len(st.Rounds) != 1 {
		t.Fatalf("state %v, %d rounds", err, len(st.Rounds))
	}
	for _, secret := range [][]byte{st.Key, st.Rounds[0].Seed} {
		for _, enc := range []string{base64.StdEncoding.EncodeToString(secret), hex.EncodeToString(secret), string(secret)} {
			if strings.Contains(logs.String(), enc[:min(len(enc), 24)]) {
				t.Errorf("a secret of the state appears in the log:\n%s", logs.String())
			}
		}
	}
}
