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
// Create makes one, Open unlocks it and migrates its schema (SchemaVersion;
// migrations are ordered functions in schema.go and run each in its own
// transaction), Close clears the keys held in memory, Rekey (or
// (*Library).Rekey on a library already unlocked) changes the passphrase,
// deriving each passphrase's key once, and CheckIntegrity runs SQLite's
// checks. The database itself stays inside the package: no exported method
// hands it out, so every write goes through the rules below.
//
// # Keys and sealed fields
//
// A random 32-byte data key is wrapped with XChaCha20-Poly1305 under a key
// derived from the passphrase by Argon2id (DefaultKDFParams says why its
// parameters; they and the 16-byte salt are stored in the header, and the
// wrapped key is bound to them). A wrong passphrase fails the wrapped key's
// authentication: ErrWrongPassphrase, never garbage. Rekey re-wraps only the
// data key, in one transaction (refusing, with ErrRekeyedMeanwhile, to
// replace a header another program wrote since the unlock), then empties
// the WAL so the files keep no copy of the key wrapped under the old
// passphrase; secure_delete overwrites
// deleted rows. (Copies of the library made before a rekey still open with
// the old passphrase: the data key is the same.) Sub-keys come from HKDF-SHA256 of the data
// key: "seal" for the fields, "name-index" (an HMAC of the case-folded name,
// so people are found and kept unique without decrypting every name) and
// "metric-rotation" (RotationSeed, the seed of the library's secret random
// rotation for package metric).
//
// Seal and Unseal encrypt a field with XChaCha20-Poly1305 and a random
// 24-byte nonce, bound to "veil/tagging/v1|table|column|row": a ciphertext
// altered, or moved to another row or column, is refused with ErrTampered.
// Sealed are what identifies a person: face descriptors, landmarks and
// thumbnails, people's names and the learned metric. Plain are paths,
// hashes, sizes, dimensions, boxes, scores, ids and flags. The vectors are
// encoded with EncodeDescriptor and EncodeLandmarks (a version byte, then
// little-endian float32) before sealing.
//
// What the encryption does not hide: the number of photos, faces and people,
// which faces belong to the same person (person ids are plain), photo paths,
// and the lengths of names.
//
// # Schema (version 3)
//
//	meta(key, value)                    schema_version, kdf (header), dek (wrapped key)
//	photos(id, path, sha256, size, taken, width, height, added_at, missing,
//	       mtime, inode)                the file's stamp: re-indexing skips it unread
//	                                    while size, mtime and inode match (fileStamp)
//	faces(id, photo_id, x, y, w, h, score, fit, source, landmarks*, descriptor*,
//	      thumbnail*, person_id, assigned_by, removed)      * sealed
//	people(id, name*, name_mac, hidden, cover_face)
//	rejections(face_id, person_id)
//	clusters(face_id, cluster)
//	metric(id, blob*, names, trained_at)
//	scan_errors(path, error, at)
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
// Store: Create, Open, Rekey, CreateOptions, KDFParams, DefaultKDFParams,
// (*Library).Close, Dir, Rekey, CheckIntegrity, Seal, Unseal, RotationSeed;
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
