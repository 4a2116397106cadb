package secround

// AppendConfig exposes the canonical encoding ConfigDigest hashes, for
// the injectivity fuzz test.
var AppendConfig = appendConfig
