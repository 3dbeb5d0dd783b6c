package zkdlock

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// Node names.
//
// The key K lives in the znode ROOT/esc(K), its parent, and each contender
// for K is a child _c_<OwnerID>-<KIND>-<seq>, where OwnerID is
// dlock.OwnerID(owner), seq is the ten-digit sequence number ZooKeeper
// appends, and KIND names the mode: "lock" for Exclusive (a mutex, or the
// write side of a read-write lock: the driver cannot tell them apart, and
// a mutex's node keeps Curator's name), "read" for Shared and "sem-<N>" for
// a Semaphore of N permits.

const (
	nodePrefix = "_c_"    // Curator's prefix of protected nodes
	lockInfix  = "-lock-" // a write node: between the owner ID and the sequence number
	readInfix  = "-read-" // a read node
	semInfix   = "-sem-"  // a permit node, followed by "<N>-"
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

// nodeBase returns the name a contender of owner creates for a hold of mode
// m (with limit permits, for a Semaphore); ZooKeeper appends the sequence
// number.
func nodeBase(owner string, m driver.Mode, limit int) string {
	infix := lockInfix
	switch m {
	case driver.Shared:
		infix = readInfix
	case driver.Semaphore:
		infix = semInfix + strconv.Itoa(limit) + "-"
	}
	return nodePrefix + dlock.OwnerID(owner) + infix
}

// node is a contender's znode, parsed from its name.
type node struct {
	name    string
	ownerID string
	seq     int64
	mode    driver.Mode // as created: a downgraded write node stays Exclusive
	limit   int         // the permits of a Semaphore node, 0 otherwise
}

// parseNode parses a contender's name; ok is false for other names.
func parseNode(name string) (n node, ok bool) {
	rest, found := strings.CutPrefix(name, nodePrefix)
	if !found || len(rest) < ownerIDLen+len(lockInfix)+1 {
		return node{}, false
	}
	n = node{name: name, ownerID: rest[:ownerIDLen]}
	rest = rest[ownerIDLen:]
	var digits string
	if digits, found = strings.CutPrefix(rest, lockInfix); found {
		n.mode = driver.Exclusive
	} else if digits, found = strings.CutPrefix(rest, readInfix); found {
		n.mode = driver.Shared
	} else if rest, found = strings.CutPrefix(rest, semInfix); found {
		var limit string
		if limit, digits, found = strings.Cut(rest, "-"); !found {
			return node{}, false
		}
		l, err := strconv.Atoi(limit)
		if err != nil || l < 1 || strconv.Itoa(l) != limit {
			return node{}, false
		}
		n.mode, n.limit = driver.Semaphore, l
	} else {
		return node{}, false
	}
	seq, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return node{}, false
	}
	n.seq = seq
	return n, true
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
// holder's Info: "LEN:OWNERINFO", with LEN the owner's length in bytes. A
// write node that has been downgraded to a read hold has "shared:" in front
// (a prefix that plain data, which starts with a digit, never has).
func encodeData(owner, info string, downgraded bool) []byte {
	var b []byte
	if downgraded {
		b = append(b, downgradedMark...)
	}
	return fmt.Appendf(b, "%d:%s%s", len(owner), owner, info)
}

// downgradedMark starts the data of a downgraded write node.
const downgradedMark = "shared:"

func decodeData(b []byte) (owner, info string, downgraded, ok bool) {
	s, downgraded := strings.CutPrefix(string(b), downgradedMark)
	n, rest, found := strings.Cut(s, ":")
	if !found {
		return "", "", false, false
	}
	l, err := strconv.Atoi(n)
	if err != nil || l < 0 || l > len(rest) {
		return "", "", false, false
	}
	return rest[:l], rest[l:], downgraded, true
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
