package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/face/describer"
	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/tagging"
)

const joinPass = "library join test passphrase"

// joinLibs are the three libraries' people, by index into the LFW people
// the test picks: friends overlap, as in Irene's setting.
var joinLibs = [][]int{{0, 1, 2, 3, 4, 5}, {3, 4, 5, 6, 7, 8}, {6, 7, 8, 9, 0, 1}}

// lfwPeople returns n people of LFW's development training list with at
// least 4 photos, and the descriptors of their first 4 photos (the face
// pipeline through the descriptor cache veil bench and veil train share).
func lfwPeople(t *testing.T, n int) (map[string][][]float32, []string, dataset.LFW) {
	t.Helper()
	lfw := dataset.LFW{Dir: datadir.ForTest(t, "lfw")}
	people, err := lfw.People("peopleDevTrain.txt")
	if err != nil {
		t.Fatal(err)
	}
	desc, err := describer.Options{Detector: "tiny", Align: "both", MinScore: 0.5}.Descriptors()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][][]float32{}
	var names []string
	for _, p := range people {
		if len(names) == n {
			break
		}
		if p.Images < 4 {
			continue
		}
		var ds [][]float32
		for i := 1; i <= 4; i++ {
			d, err := desc(lfw.ImagePath(p.Name, i))
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Descriptor) == 128 {
				ds = append(ds, d.Descriptor)
			}
		}
		if len(ds) == 4 {
			out[p.Name], names = ds, append(names, p.Name)
		}
	}
	if len(names) < n {
		t.Fatalf("found %d LFW people with 4 described photos, want %d", len(names), n)
	}
	return out, names, lfw
}

// makeJoinLibrary makes a library of the people: 4 photos each, the first
// 3 named by the owner; the fourth photo of the first person is rejected
// as the second, that of the third person is an accepted suggestion.
func makeJoinLibrary(t *testing.T, dir string, lfw dataset.LFW, names []string, descs map[string][][]float32) {
	t.Helper()
	l, err := tagging.Create(dir, []byte(joinPass), tagging.CreateOptions{KDF: tagging.KDFParams{Time: 1, MemoryKiB: 64, Threads: 1}, TestSettings: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var fourth []int64
	var ids []int64
	for _, n := range names {
		var faces []int64
		for i, d := range descs[n] {
			path := lfw.ImagePath(n, i+1)
			_, f, err := l.AddPhoto(tagging.PhotoRecord{Path: path, SHA256: sha256.Sum256([]byte(path)), Size: 1, Width: 250, Height: 250},
				[]tagging.NewFace{{Box: tagging.Box{X: 70, Y: 70, Width: 110, Height: 110}, Score: 0.9, Source: tagging.Detected, Descriptor: d}})
			if err != nil {
				t.Fatal(err)
			}
			faces = append(faces, f...)
		}
		p, err := l.NameFaces(faces[:3], display(n))
		if err != nil {
			t.Fatal(err)
		}
		fourth, ids = append(fourth, faces[3]), append(ids, p.ID)
	}
	if err := l.RejectFace(fourth[0], display(names[1])); err != nil {
		t.Fatal(err)
	}
	if n, err := l.AssignAuto([]tagging.Assignment{{Face: fourth[2], Person: ids[2]}}); err != nil || n != 1 {
		t.Fatalf("accepting a suggestion: %d, %v", n, err)
	}
}

// userDecisions is every decision of the library's owner: each face's
// person and who assigned it, the rejections, the people; and the model
// decisions recorded.
func userDecisions(t *testing.T, dir string) (string, []tagging.ModelDecision) {
	t.Helper()
	l, err := tagging.Open(dir, []byte(joinPass))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	faces, err := l.Faces(tagging.FaceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range faces {
		fmt.Fprintf(&b, "face %d: person %d by %q removed %v\n", f.ID, f.PersonID, f.AssignedBy, f.Removed)
	}
	rej, err := l.Rejections()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range faces {
		if r := rej[f.ID]; len(r) > 0 {
			fmt.Fprintf(&b, "face %d is not %v\n", f.ID, r)
		}
	}
	ps, err := l.People()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		fmt.Fprintf(&b, "person %d %q hidden %v\n", p.ID, p.Name, p.Hidden)
	}
	log, err := l.ModelLog(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return b.String(), log
}

type joinReport struct {
	Outcome  string  `json:"outcome"`
	People   int     `json:"people"`
	Spent    float64 `json:"epsilon_spent"`
	Imported int64   `json:"imported_version"`
	Decision *struct {
		Adopted bool   `json:"adopted"`
		Reason  string `json:"reason"`
		To      int64  `json:"to"`
	} `json:"decision"`
}

// TestLibrariesJoinAFederation runs a real federation: a veil fed
// coordinator process serving ψ (veil fed init-model --model psi) with
// masking secure aggregation, and three veil library join processes, each
// on a library built from LFW photos (real descriptors) with names,
// a rejection and an accepted suggestion, over mutual TLS. The rounds
// close with all three libraries; each library imports the result and
// adopts or declines it with its reason, recorded in the library; no user
// decision changes; each library's ledger holds the two rounds' charges;
// and no person's name is anywhere in what the coordinator kept.
func TestLibrariesJoinAFederation(t *testing.T) {
	bin := buildVeil(t)
	start := time.Now()
	dir := t.TempDir()
	ps := &procs{t: t, bin: bin, dir: dir}
	t.Cleanup(ps.killAll)
	descs, names, lfw := lfwPeople(t, 10)
	t.Logf("described %d LFW people in %s", len(names), time.Since(start).Round(time.Millisecond))
	pkiDir, state, addr := filepath.Join(dir, "pki"), filepath.Join(dir, "coordinator.db"), freePort(t)
	ps.run("fed", "certs", "init", "--pki", pkiDir)
	ps.run("fed", "certs", "issue", "coordinator", "--role", "coordinator", "--pki", pkiDir)
	libs := make([]string, len(joinLibs))
	before := make([]string, len(joinLibs))
	for i, idx := range joinLibs {
		ps.run("fed", "certs", "issue", fmt.Sprintf("library-%d", i+1), "--pki", pkiDir)
		var own []string
		for _, k := range idx {
			own = append(own, names[k])
		}
		libs[i] = filepath.Join(dir, fmt.Sprintf("lib-%d", i+1))
		makeJoinLibrary(t, libs[i], lfw, own, descs)
		before[i], _ = userDecisions(t, libs[i])
	}
	initPath := filepath.Join(dir, "psi.ckpt")
	ps.run("fed", "init-model", "--model", "psi", "--out", initPath)
	co := ps.start("coordinator", "fed", "coordinator", "--state", state, "--pki", pkiDir, "--listen", addr, "--init", initPath,
		"--rounds", "2", "--min-available", "3", "--min-updates", "3", "--fraction", "1", "--deadline", patience.String(),
		"--local-epochs", "1", "--batch", "4", "--lr", "0.001", "--clip", "1", "--delta", "1e-5", "--noise-multiplier", "0",
		"--max-update-norm", "100", "--secagg", "masking", "--secagg-phase", "30s", "--linger", patience.String(), "--await-final-download", "--json")
	t.Setenv("VEIL_PASSPHRASE", joinPass)
	joins := make([]*proc, len(libs))
	for i, lib := range libs {
		joins[i] = ps.start(fmt.Sprintf("join-%d", i+1), "library", "join", "--library", lib, "--coordinator", addr, "--pki", pkiDir,
			"--name", fmt.Sprintf("library-%d", i+1), "--budget-epsilon", "8", "--budget-delta", "1e-5", "--require-secagg",
			"--retry-for", patience.String(), "--json", "--quiet")
	}
	for i, j := range joins {
		if err := ps.wait(j, patience); err != nil {
			t.Fatalf("%s: %v\n%s\ncoordinator:\n%s", j.name, err, ps.log(j), ps.log(co))
		}
		checkJoined(t, i, j, libs[i], before[i])
	}
	if err := ps.wait(co, patience); err != nil {
		t.Fatalf("coordinator: %v\n%s", err, ps.log(co))
	}
	var st statusJSON
	if err := json.Unmarshal(ps.run("fed", "status", "--state", state, "--json"), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Rounds) != 2 || st.Rounds[0].State != "done" || st.Rounds[0].Updates != 3 || st.Rounds[1].State != "done" || st.Rounds[1].Updates != 3 {
		t.Errorf("the coordinator's rounds: %+v, want 2 done with 3 updates each", st.Rounds)
	}
	if !strings.Contains(ps.log(co), "masked vector accepted") {
		t.Errorf("the coordinator received no masked vector (secure aggregation):\n%s", ps.log(co))
	}
	checkNoNames(t, dir, names, append([]*proc{co}, joins...), ps)
	t.Logf("the federation of 3 libraries took %s in all", time.Since(start).Round(time.Millisecond))
}

// checkJoined checks a finished join: its report, the decision recorded
// in the library with its reason, the unchanged user decisions, and the
// ledger's two charges.
func checkJoined(t *testing.T, i int, j *proc, lib, before string) {
	t.Helper()
	var rep joinReport
	if err := json.Unmarshal(j.stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%s: %v\n%s", j.name, err, j.stdout.String())
	}
	if rep.Outcome != "done" || rep.People != len(joinLibs[i]) || rep.Imported < 1 || rep.Decision == nil || rep.Decision.Reason == "" ||
		rep.Decision.To != rep.Imported || !(rep.Spent > 0 && rep.Spent <= 8) {
		t.Errorf("%s's report: %s", j.name, j.stdout.String())
	}
	after, log := userDecisions(t, lib)
	if after != before {
		t.Errorf("%s: the user's decisions changed:\n%s\nwere\n%s", j.name, after, before)
	}
	if len(log) != 1 || log[0].To != rep.Imported || log[0].Reason == "" || rep.Decision == nil || log[0].Adopted != rep.Decision.Adopted {
		t.Errorf("%s: the library's model decisions %+v, want the join's", j.name, log)
	}
	t.Logf("%s: %d people, ε = %.3g; the federation's model adopted: %v (%s)", j.name, rep.People, rep.Spent, rep.Decision.Adopted, rep.Decision.Reason)
	var st struct {
		Federation struct {
			Membership *struct {
				Client string `json:"client"`
			} `json:"membership"`
			Ledger *struct {
				Spent   float64 `json:"epsilon_spent"`
				Charges int     `json:"charges"`
			} `json:"ledger"`
		} `json:"federation"`
	}
	out := (&procs{t: t, bin: veilBin}).run("library", "status", "--library", lib, "--json")
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatal(err)
	}
	f := st.Federation
	if f.Membership == nil || f.Membership.Client != fmt.Sprintf("library-%d", i+1) || f.Ledger == nil || f.Ledger.Charges != 2 || f.Ledger.Spent != rep.Spent {
		t.Errorf("%s: library status: %s", j.name, out)
	}
}

// checkNoNames searches every file the coordinator kept (its state file
// with its journal, the logs) and the processes' outputs for the people's
// names, in LFW's spelling and the owners'.
func checkNoNames(t *testing.T, dir string, names []string, all []*proc, ps *procs) {
	t.Helper()
	var blobs [][]byte
	files, err := filepath.Glob(filepath.Join(dir, "coordinator.db*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the coordinator's state: %v %v", files, err)
	}
	for _, p := range all {
		files = append(files, filepath.Join(dir, p.name+".log"))
		blobs = append(blobs, p.stdout.Bytes())
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		blobs = append(blobs, b)
	}
	if found := namesIn(blobs, names); len(found) > 0 {
		t.Errorf("names in what the coordinator kept or a process printed: %q", found)
	}
	// The search finds the names where they are: a library's photo paths
	// (LFW's file names) are in its file in the clear.
	lib, err := os.ReadFile(filepath.Join(dir, "lib-1", "library.db"))
	if err != nil {
		t.Fatal(err)
	}
	if len(namesIn([][]byte{lib}, names)) == 0 {
		t.Error("the search for names finds none even in a library's file, which holds LFW's file names")
	}
}

// namesIn returns the names (in LFW's spelling, the owners', or lower
// case) that occur in one of blobs.
func namesIn(blobs [][]byte, names []string) []string {
	var found []string
	for _, n := range names {
		for _, spelling := range []string{n, display(n), strings.ToLower(display(n))} {
			if slices.ContainsFunc(blobs, func(b []byte) bool { return bytes.Contains(b, []byte(spelling)) }) {
				found = append(found, spelling)
			}
		}
	}
	return found
}
