package core

import (
	"encoding/base64"
	"strconv"
	"sync/atomic"

	"github.com/google/uuid"
)

// clientID names this process in owner ids: a random UUID, in 22 characters.
var clientID = func() string {
	u := uuid.New()
	return base64.RawURLEncoding.EncodeToString(u[:])
}()

var handles, requests atomic.Uint64

// NewOwnerID returns a fresh owner id, "<client>.<handle>": one per handle.
// The fair lock's queue entries extend it as "<owner>/<join>".
func NewOwnerID() string {
	return clientID + "." + strconv.FormatUint(handles.Add(1), 36)
}

// NextID returns a process-unique id (request ids, queue entries).
func NextID() string { return strconv.FormatUint(requests.Add(1), 36) }

// IDOf returns prefix + sep + NextID(), in one allocation.
func IDOf(prefix string, sep byte) string {
	var buf [64]byte
	b := append(append(buf[:0], prefix...), sep)
	return string(strconv.AppendUint(b, requests.Add(1), 36))
}
