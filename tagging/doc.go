// Package tagging is the user's photo library: photos where they are, the
// faces found in them, the people the user names, clusters of unnamed faces,
// suggestions and the user's own metric, all in one SQLite file per library
// with everything that identifies a person encrypted at rest.
//
// Like PhotoPrism's faces workflow it keeps one file per step: store.go,
// schema.go and keys.go (the store), photos.go (recording photos and faces),
// people.go and faces_edit.go (the user's decisions), the indexing, matching
// and learning files, and thresholds.go (every threshold in one place).
//
// # The store
//
// A library is a folder holding library.db (modernc.org/sqlite, WAL, foreign
// keys on, a busy timeout, transactions that take the write lock at BEGIN).
// Create makes one, Open unlocks it, migrates its schema (SchemaVersion;
// migrations are ordered functions in schema.go and run each in its own
// transaction, with the library's keys) and verifies its integrity, Close
// clears the keys held in memory, RotateKey replaces the data key and the
// passphrase, Rekey (or (*Library).Rekey on a library already unlocked)
// changes only the passphrase, and CheckIntegrity runs SQLite's checks and
// the integrity check. The database itself stays inside the package: no exported method
// hands it out, so every write goes through the rules below.
//
// # Keys and sealed fields
//
// A random 32-byte data key is wrapped with XChaCha20-Poly1305 under a key
// derived from the passphrase by Argon2id (DefaultKDFParams says why its
// parameters; they and the 16-byte salt are stored in the header, and the
// wrapped key is bound to them). A wrong passphrase fails the wrapped key's
// authentication: ErrWrongPassphrase, never garbage. A new key (Create,
// Rekey, RotateKey) refuses a passphrase under MinPassphraseRunes
// characters and Argon2id costs under MinKDFParams unless
// CreateOptions.TestSettings asks for test settings.
//
// Two ways to change the passphrase. Rekey re-wraps only the data key, in
// one transaction (refusing, with ErrRekeyedMeanwhile, to replace a header
// another program wrote since the unlock), then empties the WAL; an old
// copy of the header still unwraps the same data key. RotateKey (what veil
// library rekey runs) draws a new data key and re-encrypts and re-MACs
// everything under it, in committed batches that a rerun resumes after a
// crash (rotate.go); afterwards the old passphrase and header open
// nothing. secure_delete overwrites deleted and replaced rows. (A copy of
// the whole library made before still opens with the old passphrase.)
//
// Sub-keys come from HKDF-SHA256 of the data key: "seal" for the fields;
// "name-index" (an HMAC of the case-folded name, so people are found and
// kept unique without decrypting every name); "photo-content" (a photo is
// known by HMAC-SHA256 of its SHA-256 under this key, photos.content_mac,
// so nobody without the key can test whether a candidate photo is in the
// library; the digest itself is sealed); "row-mac" and "table-sum" (the
// integrity of the plaintext structure, integrity.go); and
// "metric-rotation", the seed of the library's secret random rotation for
// package metric (RotationSeed), derived from the first data key and kept
// in the sealed integrity state so that it survives RotateKey.
//
// Seal and Unseal encrypt a field with XChaCha20-Poly1305 and a random
// 24-byte nonce, bound to "veil/tagging/v1|table|column|row": a ciphertext
// altered, or moved to another row or column, is refused with ErrTampered.
// Sealed are what identifies a person: face descriptors, landmarks and
// thumbnails, people's names, photos' content digests and the learned
// metric. The vectors are encoded with EncodeDescriptor and
// EncodeLandmarks (a version byte, then little-endian float32) before
// sealing.
//
// # What is in the clear, and authenticated
//
// SQLite needs the structure in the clear: paths, keyed content ids, sizes,
// the time taken, dimensions, boxes, scores, which face is in which photo
// and assigned to which person by whom, removals, rejections, clusters,
// hidden flags, covers, the metric's name count and training time, scan
// errors, file stamps and ids. Each such row carries an HMAC of its
// columns and table, and per-table counts and keyed sums catch deleted,
// added or replayed rows (integrity.go): an edit of the file outside Veil
// is refused by the next Open with ErrModified, and the reads suggestions
// depend on check each row again. Not hidden, then: the number of photos,
// faces and people, which faces belong to the same person and appear
// together, photo paths and times, and the lengths of names and sealed
// fields. Not detected: the whole library replaced by an older copy of
// itself, and a sealed field put back from an older copy of its own row.
//
// # Schema (version 5)
//
//	meta(key, value)                    schema_version, kdf (header), dek (wrapped key),
//	                                    integrity* (counts, sums, schema digest, settings);
//	                                    rotation_dek*, rotation_state* while RotateKey runs
//	photos(id, path, content_mac, size, taken, width, height, added_at, missing,
//	       mtime, inode, digest*, mac)  the file's stamp: re-indexing skips it unread
//	                                    while size, mtime and inode match (fileStamp)
//	faces(id, photo_id, x, y, w, h, score, fit, source, landmarks*, descriptor*,
//	      thumbnail*, person_id, assigned_by, removed, mac)      * sealed
//	people(id, name*, name_mac, hidden, cover_face, mac)
//	rejections(face_id, person_id, mac)
//	clusters(face_id, cluster, mac)
//	metric(id, blob*, names, trained_at, mac)
//	scan_errors(path, error, at, mac)
//	integrity_dirty(tbl, rid, old_mac)  rows a transaction touched; empty between them
//
// # The user's decisions outrank automatic ones
//
// faces.assigned_by records who assigned a face: ByUser (NameFaces,
// UnassignFace, RemoveFace, and RejectFace when it takes the person away)
// or ByAuto (AssignAuto). AssignAuto, the only way automatic code assigns
// faces, skips any face the user decided about, removed, or rejected for
// that person; ClearAuto undoes automatic assignments only. Indexing,
// clustering and learning must go through them and never write
// faces.person_id themselves.
//
// # API
//
// Store: Create, Open, Rekey, RotateKey, CreateOptions, KDFParams,
// DefaultKDFParams, MinKDFParams, MinPassphraseRunes, (*Library).Close,
// Dir, Rekey, CheckIntegrity, Seal, Unseal, RotationSeed;
// EncodeDescriptor, DecodeDescriptor, EncodeLandmarks, DecodeLandmarks;
// ReadKeyFile.
//
// Photos: PhotoRecord, NewFace, Photo, (*Library).AddPhoto, AddFaces,
// PhotoByPath, Photos, ForgetMissing, Status.
//
// Indexing (faces_index.go, scan.go, exif.go, thumb.go): (*Library).Index
// with IndexOptions and PipelineOptions (one photo per transaction, photos
// known by content hash, files unchanged since the last run by size,
// modification time and inode skipped unread unless IndexOptions.Rehash,
// moves and edits keep the user's decisions, vanished photos marked
// missing, never deleted unasked), Scan, ReadContent,
// ReadJPEGEXIF (imaging's EXIF parser), Thumbnail, (*Library).AddManualFace,
// ParseBox, IoU, MeasureIndexing.
//
// Faces: Face, FaceFilter, Box, Source (Detected, Manual), (*Library).Faces,
// Face, NameFaces, RejectFaces, UnassignFaces, RemoveFaces (each batch in
// one transaction: all faces or none) and their one-face forms RejectFace,
// UnassignFace, RemoveFace, AssignAuto, ClearAuto, Rejections.
//
// People: Person, (*Library).People, PersonByName, CreatePerson,
// RenamePerson, MergePeople, SetHidden, SetCover, PersonPhotos.
package tagging
