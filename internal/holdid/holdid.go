// Package holdid encodes and decodes the hold IDs of package dlock (see
// dlock.Lock.HoldID): the wire format only. Package dlock checks what the
// fields mean; the conformance suite (package drivertest) edits them to
// prove that a changed ID is refused.
package holdid

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strings"
)

// A hold ID is Prefix followed by the unpadded base64url encoding of
//
//	uvarint len(key), key, uvarint len(owner), owner,
//	mode (one byte), uvarint limit, uvarint token, uvarint lease in ns,
//	and, for a lock with a lock delay only, uvarint lock delay in ns,
//	which the mode byte's high bit (delayBit) announces.
//
// The prefix names the format's version.
const Prefix = "dlh1."

const (
	// MaxKeyLen bounds the key a hold ID may carry, whatever the backend
	// (whose own limit dlock checks next).
	MaxKeyLen = 1 << 16
	// MaxOwnerLen bounds the owner token a hold ID may carry: dlock's own
	// tokens are 26 characters.
	MaxOwnerLen = 256
)

// delayBit, set in a hold ID's mode byte, says that a lock delay follows
// the lease.
const delayBit = 0x80

// Ref is what a hold ID names.
type Ref struct {
	Key, Owner string
	Mode       uint8
	Limit      uint64
	Token      uint64
	TTL        uint64 // the lease, in nanoseconds
	Delay      uint64 // the lock delay, in nanoseconds
}

// Encode returns the hold ID of r.
func (r Ref) Encode() string {
	b := make([]byte, 0, 32+len(r.Key)+len(r.Owner))
	b = binary.AppendUvarint(b, uint64(len(r.Key)))
	b = append(b, r.Key...)
	b = binary.AppendUvarint(b, uint64(len(r.Owner)))
	b = append(b, r.Owner...)
	mode := r.Mode
	if r.Delay > 0 {
		mode |= delayBit
	}
	b = append(b, mode)
	b = binary.AppendUvarint(b, r.Limit)
	b = binary.AppendUvarint(b, r.Token)
	b = binary.AppendUvarint(b, r.TTL)
	if r.Delay > 0 {
		b = binary.AppendUvarint(b, r.Delay)
	}
	return Prefix + base64.RawURLEncoding.EncodeToString(b)
}

// Decode returns the fields of id, after surrounding blanks. Its errors
// say what is wrong in words that never show the ID.
func Decode(id string) (Ref, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(id), Prefix)
	if !ok {
		return Ref{}, errors.New("is not a dlock hold ID: it does not start with \"" + Prefix + "\"")
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return Ref{}, errors.New("is not a dlock hold ID: it is not base64url")
	}
	r := reader{b: b}
	ref := Ref{Key: r.string(MaxKeyLen), Owner: r.string(MaxOwnerLen), Mode: r.byte(), Limit: r.uvarint(), Token: r.uvarint(), TTL: r.uvarint()}
	if ref.Mode&delayBit != 0 {
		ref.Mode &^= delayBit
		ref.Delay = r.uvarint()
	}
	if r.bad || len(r.b) > 0 {
		return Ref{}, errors.New("is damaged: it does not decode")
	}
	return ref, nil
}

// reader reads the fields of a decoded hold ID; bad records a short or
// malformed field.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad, r.b = true, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.bad = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) string(limit int) string {
	n := r.uvarint()
	if r.bad || n > uint64(limit) || n > uint64(len(r.b)) {
		r.bad, r.b = true, nil
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
