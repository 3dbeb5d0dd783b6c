package zkdlock

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dlockhq/dlock"
)

// Node names.
//
// The key K lives in the znode ROOT/esc(K), its parent, and each contender
// for K is a child _c_<OwnerID>-lock-<seq>, where OwnerID is
// dlock.OwnerID(owner) and seq is the ten-digit sequence number ZooKeeper
// appends.

const (
	nodePrefix = "_c_"    // Curator's prefix of protected nodes
	lockInfix  = "-lock-" // between the owner ID and the sequence number
	ownerIDLen = 32       // hexadecimal digits of dlock.OwnerID
)

// escape maps a dlock key injectively to one valid znode name: ASCII
// letters, digits and "-_.:,=+@~" stand for themselves, every other byte
// (including '%' and '/') becomes %XX, and a name that would be "." or ".."
// has its dots escaped too. Decoding reverses it, so no two keys share a
// name.
func escape(key string) string {
	var b strings.Builder
	b.Grow(len(key))
	for i := 0; i < len(key); i++ {
		c := key[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		const hexdigits = "0123456789ABCDEF"
		b.WriteByte('%')
		b.WriteByte(hexdigits[c>>4])
		b.WriteByte(hexdigits[c&15])
	}
	s := b.String()
	if s == "." || s == ".." {
		s = strings.ReplaceAll(s, ".", "%2E")
	}
	return s
}

func plain(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-_.:,=+@~", c) >= 0
}

// unescape reverses escape; ok is false for a name escape cannot produce.
func unescape(name string) (key string, ok bool) {
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '%' {
			if !plain(c) {
				return "", false
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(name) {
			return "", false
		}
		v, err := strconv.ParseUint(name[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	key = b.String()
	return key, key != "" && escape(key) == name
}

// nodeBase returns the name a contender of owner creates; ZooKeeper appends
// the sequence number.
func nodeBase(owner string) string {
	return nodePrefix + dlock.OwnerID(owner) + lockInfix
}

// node is a contender's znode, parsed from its name.
type node struct {
	name    string
	ownerID string
	seq     int64
}

// parseNode parses a contender's name; ok is false for other names.
func parseNode(name string) (n node, ok bool) {
	rest, found := strings.CutPrefix(name, nodePrefix)
	if !found || len(rest) < ownerIDLen+len(lockInfix)+1 {
		return node{}, false
	}
	id, rest := rest[:ownerIDLen], rest[ownerIDLen:]
	digits, found := strings.CutPrefix(rest, lockInfix)
	if !found {
		return node{}, false
	}
	seq, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return node{}, false
	}
	return node{name: name, ownerID: id, seq: seq}, true
}

// queue returns the contenders among children, in queue order (by sequence
// number): the first holds the lock.
func queue(children []string) []node {
	q := make([]node, 0, len(children))
	for _, c := range children {
		if n, ok := parseNode(c); ok {
			q = append(q, n)
		}
	}
	slices.SortFunc(q, func(a, b node) int { return cmp.Compare(a.seq, b.seq) })
	return q
}

// find returns the position in q of the first node of ownerID, or -1.
func find(q []node, ownerID string) int {
	return slices.IndexFunc(q, func(n node) bool { return n.ownerID == ownerID })
}

// A node's data is the owner (so that listings can name it) and the
// holder's Info: "LEN:OWNERINFO", with LEN the owner's length in bytes.
func encodeData(owner, info string) []byte {
	return fmt.Appendf(nil, "%d:%s%s", len(owner), owner, info)
}

func decodeData(b []byte) (owner, info string, ok bool) {
	n, rest, found := strings.Cut(string(b), ":")
	if !found {
		return "", "", false
	}
	l, err := strconv.Atoi(n)
	if err != nil || l < 0 || l > len(rest) {
		return "", "", false
	}
	return rest[:l], rest[l:], true
}

// checkPath reports why p is not an absolute znode path of at least one
// component, or "" if it is.
func checkPath(p string) string {
	if !strings.HasPrefix(p, "/") {
		return "does not start with /"
	}
	if p == "/" {
		return "is the root; name a node under it"
	}
	for c := range strings.SplitSeq(p[1:], "/") {
		switch c {
		case "":
			return "has an empty component (// or a trailing /)"
		case ".", "..":
			return "has a . or .. component"
		}
		for _, r := range c {
			if r < 0x20 || r >= 0x7f && r <= 0x9f || r >= 0xf000 && r <= 0xf8ff || r >= 0xfff0 {
				return fmt.Sprintf("has the character %U, which ZooKeeper does not allow", r)
			}
		}
	}
	return ""
}
