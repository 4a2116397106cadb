// Package layering holds no code: its test checks, with go list, that the
// module's import arrows point down (docs/architecture.md, "Layering
// rules"). A change that makes a lower package import a higher one fails
// the test, naming the package, the dependency and the rule.
package layering
