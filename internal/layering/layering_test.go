package layering

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/veil-privacy/veil"

// cliPath is the command package (the command tree of cmd/veil): only
// package main may import it.
const cliPath = "cmd/veil/cli"

// pkg is one package of the module as go list reports it.
type pkg struct {
	path string // import path without the module prefix ("fed/client")
	name string // package name ("main" for commands)
	deps []string
}

// listModule runs go list once over the whole module: every package with
// its transitive dependencies (tests excluded: the rules are about what a
// program links).
func listModule(t *testing.T) []pkg {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the layering check needs the go command: %v", err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(gobin, "list", "-f", "{{.ImportPath}}|{{.Name}}|{{join .Deps \" \"}}", module+"/...")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "|", 3)
		if len(f) != 3 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		pkgs = append(pkgs, pkg{path: strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/"), name: f[1], deps: strings.Fields(f[2])})
	}
	return pkgs
}

// under reports whether path is p or a package below it.
func under(path, p string) bool { return path == p || strings.HasPrefix(path, p+"/") }

// inModule matches a module package (or a package below it) by its path in
// the module.
func inModule(p string) func(string) bool {
	return func(dep string) bool {
		rest, ok := strings.CutPrefix(dep, module+"/")
		return ok && under(rest, p)
	}
}

// external matches a third-party module (or a package below it).
func external(p string) func(string) bool {
	return func(dep string) bool { return under(dep, p) }
}

var (
	engine  = external("github.com/gomlx")
	sqlite  = external("modernc.org/sqlite")
	grpc    = external("google.golang.org/grpc")
	fed     = inModule("fed")
	tagging = inModule("tagging")
	evalPkg = inModule("eval")
	cli     = inModule(cliPath)
	trainer = inModule("nn/train")
	anyOurs = func(dep string) bool { return strings.HasPrefix(dep, module+"/") }
)

// rule forbids packages matched by subject to depend on anything matched by
// one of forbidden.
type rule struct {
	why       string
	subject   func(pkg) bool
	forbidden map[string]func(string) bool
}

var rules = []rule{
	{
		why:       "dataset reads data; eval scores it and imports dataset, never the reverse",
		subject:   func(p pkg) bool { return p.path == "dataset" },
		forbidden: map[string]func(string) bool{"eval": evalPkg},
	},
	{
		why:     "dp and secagg are the privacy core: no engine, no network, no storage, nothing above them",
		subject: func(p pkg) bool { return under(p.path, "dp") || under(p.path, "secagg") },
		forbidden: map[string]func(string) bool{
			"the engine (gomlx)": engine, "SQLite": sqlite, "gRPC": grpc, "fed/...": fed, "tagging": tagging,
		},
	},
	{
		why:       "face never imports fed",
		subject:   func(p pkg) bool { return under(p.path, "face") },
		forbidden: map[string]func(string) bool{"fed/...": fed},
	},
	{
		why:     "describing images is the face pipeline's and the cache's: no trainer, no model code, not the library or the federation",
		subject: func(p pkg) bool { return p.path == "face/describer" },
		forbidden: map[string]func(string) bool{
			"nn/...": inModule("nn"), "training": inModule("training"), "tagging": tagging,
		},
	},
	{
		why:       "a checkpoint stores plain records (nn/record), it does not know the trainer",
		subject:   func(p pkg) bool { return p.path == "nn/checkpoint" },
		forbidden: map[string]func(string) bool{"nn/train": trainer},
	},
	{
		why:     "a federated client runs the protocol and its owner's policy: no engine, no model code, no checkpoints, not the coordinator or its store",
		subject: func(p pkg) bool { return p.path == "fed/client" },
		forbidden: map[string]func(string) bool{
			"the engine (gomlx)": engine, "nn/...": inModule("nn"), "training": inModule("training"), "eval": evalPkg,
			"fed/coord": inModule("fed/coord"), "SQLite": sqlite,
		},
	},
	{
		why:     "DPHE's federation halves (a client's and the coordinator's) do not link the key generator's service and state, the coordinator, SQLite or the engine",
		subject: func(p pkg) bool { return p.path == "fed/dphefed" },
		forbidden: map[string]func(string) bool{
			"fed/keygen": inModule("fed/keygen"), "fed/coord": inModule("fed/coord"), "SQLite": sqlite, "the engine (gomlx)": engine,
		},
	},
	{
		why:     "fed/secround is what a coordinator and a client share of a secure round: neither side's code, no network, no storage",
		subject: func(p pkg) bool { return p.path == "fed/secround" },
		forbidden: map[string]func(string) bool{
			"fed/coord": inModule("fed/coord"), "fed/client": inModule("fed/client"), "SQLite": sqlite, "the engine (gomlx)": engine,
		},
	},
	{
		why:     "the key generator is its own party: not the coordinator, its store or the engine",
		subject: func(p pkg) bool { return p.path == "fed/keygen" },
		forbidden: map[string]func(string) bool{
			"fed/coord": inModule("fed/coord"), "fed/client": inModule("fed/client"), "SQLite": sqlite, "the engine (gomlx)": engine,
		},
	},
	{
		why:     "fed/ddp is distributed DP-SGD's mathematics, which a federated client imports: no engine, no model code, no network, no storage, no coordinator",
		subject: func(p pkg) bool { return p.path == "fed/ddp" },
		forbidden: map[string]func(string) bool{
			"the engine (gomlx)": engine, "nn/...": inModule("nn"), "training": inModule("training"), "gRPC": grpc, "SQLite": sqlite,
			"fed/coord": inModule("fed/coord"), "fed/client": inModule("fed/client"),
		},
	},
	{
		why:     "fed/ddpserver is the coordinator's optimiser of distributed DP-SGD, which the coordinator calls through an interface and whose state it stores: no storage of its own, not the coordinator",
		subject: func(p pkg) bool { return p.path == "fed/ddpserver" },
		forbidden: map[string]func(string) bool{
			"SQLite": sqlite, "fed/coord": inModule("fed/coord"),
		},
	},
	{
		why: "leaf utilities and plain records stand on the standard library alone",
		subject: func(p pkg) bool {
			return p.path == "internal/atomicfile" || p.path == "internal/vec" || p.path == "nn/record"
		},
		forbidden: map[string]func(string) bool{"a package of the module": anyOurs},
	},
	{
		why: "the SHA-256 helper and a ψ model file's format stand on the standard library and internal/vec (for ClearUpper) alone",
		subject: func(p pkg) bool {
			return p.path == "internal/digest" || p.path == "tagging/psimodel"
		},
		forbidden: map[string]func(string) bool{"a package of the module but internal/vec and internal/digest": func(d string) bool {
			return anyOurs(d) && d != module+"/internal/vec" && d != module+"/internal/digest"
		}},
	},
	{
		why:     "face clustering and matching are pure computation on descriptors: no storage, no engine, not the library",
		subject: func(p pkg) bool { return under(p.path, "tagging/cluster") || under(p.path, "tagging/match") },
		forbidden: map[string]func(string) bool{
			"SQLite": sqlite, "the engine (gomlx)": engine, "tagging": func(d string) bool { return d == module+"/tagging" },
		},
	},
	{
		why:       "a benchmark is a leaf: nothing but a command imports tagging/tagbench (the library and its algorithms never link their benchmark)",
		subject:   func(p pkg) bool { return p.name != "main" && p.path != cliPath && p.path != "tagging/tagbench" },
		forbidden: map[string]func(string) bool{"tagging/tagbench": inModule("tagging/tagbench")},
	},
	{
		why:     "the web app (serve) is a front end over the tagging library: it links no federation, training or trainable models",
		subject: func(p pkg) bool { return under(p.path, "serve") },
		forbidden: map[string]func(string) bool{
			"fed/...": fed, "training": inModule("training"), "nn/...": inModule("nn"), "gRPC": grpc,
		},
	},
	{
		why:       "only a command starts the web app: no library package imports serve",
		subject:   func(p pkg) bool { return p.name != "main" && p.path != cliPath && !under(p.path, "serve") },
		forbidden: map[string]func(string) bool{"serve": inModule("serve")},
	},
	{
		why:       "collaborative training is a library the federation calls: it knows nothing of the federation",
		subject:   func(p pkg) bool { return under(p.path, "collab") },
		forbidden: map[string]func(string) bool{"fed/...": fed},
	},
	{
		why:       "the library (tagging) links no federation: taking part in one is tagging/fedjoin's",
		subject:   func(p pkg) bool { return p.path == "tagging" },
		forbidden: map[string]func(string) bool{"fed/...": fed, "gRPC": grpc},
	},
	{
		why:     "tagging/fedjoin is a federated client: it links neither the coordinator nor its serving",
		subject: func(p pkg) bool { return p.path == "tagging/fedjoin" },
		forbidden: map[string]func(string) bool{
			"fed/coord": inModule("fed/coord"), "fed/ops": inModule("fed/ops"),
		},
	},
	{
		why:       "an experiment is a leaf: nothing but a command imports fed/asyncsim",
		subject:   func(p pkg) bool { return p.name != "main" && p.path != cliPath && p.path != "fed/asyncsim" },
		forbidden: map[string]func(string) bool{"fed/asyncsim": inModule("fed/asyncsim")},
	},
	{
		why:       "nothing but a command imports the command package",
		subject:   func(p pkg) bool { return p.name != "main" && p.path != cliPath },
		forbidden: map[string]func(string) bool{cliPath: cli},
	},
}

// TestLayering fails when a package depends on something its layer must not
// (docs/architecture.md, "Layering rules").
func TestLayering(t *testing.T) {
	pkgs := listModule(t)
	for _, r := range rules {
		n := 0
		for _, p := range pkgs {
			if !r.subject(p) {
				continue
			}
			n++
			for what, bad := range r.forbidden {
				for _, d := range p.deps {
					if bad(d) {
						t.Errorf("%s depends on %s (%s): %s", p.path, what, d, r.why)
						break
					}
				}
			}
		}
		if n == 0 {
			t.Errorf("rule %q matches no package: the check would pass vacuously", r.why)
		}
	}
	// The rule about the command package forbids a path: if the package
	// moved, the rule would forbid nothing.
	if !slices.ContainsFunc(pkgs, func(p pkg) bool { return p.path == cliPath }) {
		t.Errorf("the command package %s is not in the module: the rule about it would pass vacuously", cliPath)
	}
}

// TestRulesCatchViolations checks the matchers on dependency lists that
// break each rule, so that a rule cannot pass because it matches nothing.
func TestRulesCatchViolations(t *testing.T) {
	tests := []struct {
		subject pkg
		dep     string
	}{
		{pkg{path: "dataset", name: "dataset"}, module + "/eval"},
		{pkg{path: "dp", name: "dp"}, "github.com/gomlx/gomlx/graph"},
		{pkg{path: "dp/pate", name: "pate"}, module + "/fed/coord"},
		{pkg{path: "secagg/masking", name: "masking"}, "modernc.org/sqlite"},
		{pkg{path: "secagg/dphe", name: "dphe"}, "google.golang.org/grpc/credentials"},
		{pkg{path: "secagg/quant", name: "quant"}, module + "/tagging"},
		{pkg{path: "face/nets", name: "nets"}, module + "/fed/wire"},
		{pkg{path: "face/describer", name: "describer"}, module + "/nn/arch"},
		{pkg{path: "face/describer", name: "describer"}, module + "/training"},
		{pkg{path: "training", name: "training"}, module + "/" + cliPath},
		{pkg{path: "nn/checkpoint", name: "checkpoint"}, module + "/nn/train"},
		{pkg{path: "internal/atomicfile", name: "atomicfile"}, module + "/internal/datadir"},
		{pkg{path: "internal/vec", name: "vec"}, module + "/metric"},
		{pkg{path: "internal/vec", name: "vec"}, module + "/internal/digest"},
		{pkg{path: "internal/digest", name: "digest"}, module + "/internal/atomicfile"},
		{pkg{path: "tagging/psimodel", name: "psimodel"}, module + "/tagging"},
		{pkg{path: "tagging/cluster", name: "cluster"}, "modernc.org/sqlite/lib"},
		{pkg{path: "tagging/cluster", name: "cluster"}, module + "/tagging"},
		{pkg{path: "tagging/match", name: "match"}, "modernc.org/sqlite"},
		{pkg{path: "tagging", name: "tagging"}, module + "/tagging/tagbench"},
		{pkg{path: "eval", name: "eval"}, module + "/tagging/tagbench"},
		{pkg{path: "fed/client", name: "client"}, module + "/nn/checkpoint"},
		{pkg{path: "fed/client", name: "client"}, "github.com/gomlx/gomlx/core/graph"},
		{pkg{path: "serve", name: "serve"}, module + "/fed/wire"},
		{pkg{path: "serve", name: "serve"}, module + "/training"},
		{pkg{path: "tagging", name: "tagging"}, module + "/serve"},
		{pkg{path: "fed/dphefed", name: "dphefed"}, module + "/fed/keygen"},
		{pkg{path: "fed/keygen", name: "keygen"}, module + "/fed/coord"},
		{pkg{path: "collab", name: "collab"}, module + "/fed/strategy"},
		{pkg{path: "fed/coord", name: "coord"}, module + "/fed/asyncsim"},
		{pkg{path: "fed/ddp", name: "ddp"}, module + "/nn/train"},
		{pkg{path: "fed/ddp", name: "ddp"}, module + "/fed/client"},
		{pkg{path: "tagging", name: "tagging"}, module + "/fed/client"},
		{pkg{path: "tagging", name: "tagging"}, "google.golang.org/grpc"},
		{pkg{path: "tagging/fedjoin", name: "fedjoin"}, module + "/fed/coord"},
		{pkg{path: "tagging/fedjoin", name: "fedjoin"}, module + "/fed/ops"},
	}
	for _, tc := range tests {
		caught := false
		for _, r := range rules {
			if !r.subject(tc.subject) {
				continue
			}
			for _, bad := range r.forbidden {
				caught = caught || bad(tc.dep)
			}
		}
		if !caught {
			t.Errorf("%s depending on %s is not caught by any rule", tc.subject.path, tc.dep)
		}
	}
	// Allowed arrows stay allowed.
	for _, tc := range []struct {
		subject pkg
		dep     string
	}{
		{pkg{path: "eval", name: "eval"}, module + "/dataset"},
		{pkg{path: "cmd/veil", name: "main"}, module + "/" + cliPath},
		{pkg{path: "dp", name: "dp"}, module + "/dpx"},
		{pkg{path: "fed/client", name: "client"}, module + "/dp"},
		{pkg{path: "serve", name: "serve"}, module + "/tagging"},
		{pkg{path: "cmd/veil/cli", name: "cli"}, module + "/serve"},
		{pkg{path: "fed/ddp", name: "ddp"}, module + "/secagg/quant"},
		{pkg{path: "tagging/fedjoin", name: "fedjoin"}, module + "/fed/client"},
		{pkg{path: "tagging/fedjoin", name: "fedjoin"}, module + "/collab"},
		{pkg{path: "tagging/psimodel", name: "psimodel"}, module + "/internal/digest"},
		{pkg{path: "internal/digest", name: "digest"}, module + "/internal/vec"},
	} {
		for _, r := range rules {
			if !r.subject(tc.subject) {
				continue
			}
			for what, bad := range r.forbidden {
				if bad(tc.dep) {
					t.Errorf("%s depending on %s is refused as %s", tc.subject.path, tc.dep, what)
				}
			}
		}
	}
}
