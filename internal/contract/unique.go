package contract

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/gojob/gojob/sidekiq/wire"
)

// UniqueKeyPrefix starts the keys of gojob's unique-job locks
// (docs/unique-jobs.md).
const UniqueKeyPrefix = "gojob-unique:"

// UniqueKey is the lock of a unique job: a SHA-256 of its class, queue and
// arguments (their Ruby JSON form), as Sidekiq Enterprise derives its
// uniqueness from the same three (its own key layout is not public).
func UniqueKey(j *wire.Job) string {
	h := sha256.New()
	h.Write([]byte(j.Class()))
	h.Write([]byte{0})
	h.Write([]byte(j.Queue()))
	h.Write([]byte{0})
	if v, ok := j.Get("args"); ok {
		h.Write(v.Encode())
	}
	return UniqueKeyPrefix + hex.EncodeToString(h.Sum(nil))
}
