package tagging

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// v6Library makes a library at schema version 6 (before the faces'
// covering indexes) with named, unnamed and removed faces, and returns its
// folder, its status and its people as version 6 reported them.
func v6Library(t *testing.T) (string, *Status, []Person) {
	t.Helper()
	dir := t.TempDir()
	l, err := create(t.Context(), dir, []byte(testPass), cheapKDF, 6, deriveKEK)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a := addTestPhoto(t, l, "/a.jpg", 1, 3)
	b := addTestPhoto(t, l, "/b.jpg", 10, 2)
	addTestPhoto(t, l, "/c.jpg", 20, 1)
	if _, err := l.NameFaces([]int64{a[0], b[0]}, "Ada"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.NameFaces([]int64{a[1]}, "Grace"); err != nil {
		t.Fatal(err)
	}
	if err := l.RemoveFace(b[1]); err != nil {
		t.Fatal(err)
	}
	st, err := l.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ps, err := l.People()
	if err != nil {
		t.Fatal(err)
	}
	if v, err := schemaVersion(t.Context(), l.db); err != nil || v != 6 {
		t.Fatalf("made version %d, %v; want 6", v, err)
	}
	return dir, st, ps
}

// checkV7 opens dir and checks that it is at the current version with the
// faces' indexes, the queries of People and Status use them, and status
// and people are what version 6 reported.
func checkV7(t *testing.T, dir string, st *Status, ps []Person) {
	t.Helper()
	l, err := Open(dir, []byte(testPass))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if v, err := schemaVersion(t.Context(), l.db); err != nil || v != SchemaVersion || v < 7 {
		t.Fatalf("version after Open %d, %v; want %d (7 or later)", v, err, SchemaVersion)
	}
	var names []string
	rows, err := l.db.Query(`SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'faces' AND sql IS NOT NULL ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	if want := []string{"faces_counts", "faces_person_removed", "faces_photo_removed"}; !slices.Equal(names, want) {
		t.Errorf("faces' indexes %v, want %v", names, want)
	}
	// The counts read indexes only, never the face rows (which hold the
	// thumbnails).
	for _, q := range []string{
		`SELECT COUNT(*) FROM faces WHERE faces.person_id = 1 AND faces.removed = 0`,
		`SELECT count(*) FROM faces WHERE removed = 0 AND person_id IS NOT NULL AND assigned_by = 'user'`,
		`SELECT count(*) FROM faces WHERE removed = 0 AND source = 'manual'`,
		`SELECT 1 FROM faces WHERE faces.photo_id = 1 AND faces.removed = 0`,
	} {
		plan := queryPlan(t, l, q)
		if !strings.Contains(plan, "COVERING INDEX") {
			t.Errorf("%s: plan %q reads the face rows", q, plan)
		}
	}
	got, err := l.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	st.SchemaVersion, got.SchemaVersion = 0, 0
	if g, w := *got, *st; g.Photos != w.Photos || g.Faces != w.Faces || g.Named != w.Named || g.NamedByUser != w.NamedByUser ||
		g.Removed != w.Removed || g.People != w.People || !slices.Equal(g.NoFacePaths, w.NoFacePaths) {
		t.Errorf("status after the upgrade %+v, before %+v", g, w)
	}
	gotPs, err := l.People()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(gotPs, ps, func(a, b Person) bool { return a.ID == b.ID && a.Name == b.Name && a.Faces == b.Faces }) {
		t.Errorf("people after the upgrade %+v, before %+v", gotPs, ps)
	}
	// Writing still passes the integrity checks of the next Open.
	fs, err := l.Faces(FaceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(fs, func(f Face) bool { return f.Person == "" })
	if i < 0 {
		t.Fatal("no unnamed face left")
	}
	if _, err := l.NameFaces([]int64{fs[i].ID}, "Carol"); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l2, err := Open(dir, []byte(testPass))
	if err != nil {
		t.Fatalf("reopening the upgraded library: %v", err)
	}
	l2.Close()
}

func queryPlan(t *testing.T, l *Library, q string) string {
	t.Helper()
	rows, err := l.db.Query(`EXPLAIN QUERY PLAN ` + q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		b.WriteString(detail + "; ")
	}
	return b.String()
}

// A library made at version 6 opens, upgrades to the faces' covering
// indexes (and the integrity state's new schema digest), and reports the
// same people and counts.
func TestMigrate7Upgrades(t *testing.T) {
	dir, st, ps := v6Library(t)
	checkV7(t, dir, st, ps)
}

const envMigrateChild = "VEIL_TEST_MIGRATE7_CHILD"

// TestMigrate7Child is the process TestMigrate7KilledMidUpgrade kills: it
// runs migration 7 on the library in $VEIL_TEST_MIGRATE7_CHILD, up to the
// commit, says so and waits to be killed.
func TestMigrate7Child(t *testing.T) {
	dir := os.Getenv(envMigrateChild)
	if dir == "" {
		t.Skip("run by TestMigrate7KilledMidUpgrade")
	}
	migrateUncommitted(t, dir, 6)
	os.Stdout.WriteString("migrated, not committed\n")
	time.Sleep(time.Minute) // killed before this ends
	t.Fatal("not killed")
}

// Migration 7 killed with SIGKILL after its statements ran but before its
// commit loses nothing: the library is still version 6, as it was, and the
// next Open upgrades it.
func TestMigrate7KilledMidUpgrade(t *testing.T) {
	dir, st, ps := v6Library(t)
	killWhenReady(t, "TestMigrate7Child", envMigrateChild+"="+dir, "migrated, not committed")
	db, err := openDB(filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	v, err := schemaVersion(t.Context(), db)
	db.Close()
	if err != nil || v != 6 {
		t.Fatalf("after the kill the library is version %d, %v; want 6 as it was", v, err)
	}
	checkV7(t, dir, st, ps)
}

// migrateUncommitted runs migration from, bringing the library in dir to
// version from+1, in a transaction it leaves open (the caller is killed
// before it commits).
func migrateUncommitted(t *testing.T, dir string, from int) {
	t.Helper()
	ctx := context.Background()
	db, err := openDB(filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	dek, _, err := unwrapDEK(ctx, db, []byte(testPass), deriveKEK)
	if err != nil {
		t.Fatal(err)
	}
	k, err := deriveSubKeys(dek)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations[from](ctx, tx, &k); err != nil {
		t.Fatal(err)
	}
	if err := setMeta(ctx, tx, metaSchema, []byte(strconv.Itoa(from+1))); err != nil {
		t.Fatal(err)
	}
}

// killWhenReady runs the test named run of this binary with env set, waits
// for it to print the line ready and kills it with SIGKILL.
func killWhenReady(t *testing.T, run, env, ready string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+run+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	ok := false
	for sc.Scan() {
		if ok = sc.Text() == ready; ok {
			break
		}
	}
	if !ok {
		cmd.Wait()
		t.Fatalf("%s ended before it was ready: %v", run, sc.Err())
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	cmd.Wait()
}
