package zkdlock

import (
	"cmp"
	"errors"
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
// for K is a child _c_<OwnerID>-<KIND><seq>, where OwnerID is
// dlock.OwnerID(owner), seq is the ten-digit sequence number ZooKeeper
// appends, and KIND names the mode in the driver's Layout so that Curator's
// recipe at the same znode sees the node as a contender, in sequence order:
//
//	Layout                Exclusive   Shared       Semaphore of N
//	CuratorMutex          lock-       read-lock-   sem-N-lock-
//	CuratorReadWriteLock  __WRIT__    __READ__     sem-N-__WRIT__
//
// Curator sorts a lock's children by what follows the last occurrence of
// its lock name ("lock-", or "__READ__" and "__WRIT__"): only a name that
// ends with the lock name and the sequence number sorts by sequence.
// Earlier versions of the driver named Shared nodes read-<seq> and permits
// sem-N-<seq>; those names are still read.
//
// Every other child whose name ends in ten digits is a foreign contender
// (a Curator node, a kazoo node, a node of the plain ZooKeeper recipe): a
// Shared one if the digits follow "__READ__" (Curator's reader) or
// "__rlock__" (kazoo's ReadLock), an Exclusive one otherwise.
//
// Some foreign recipes would not see the driver's nodes as contenders, and
// so would take the key while the driver holds it; the driver refuses the
// keys they use (see foreignRecipe).

const (
	nodePrefix = "_c_" // Curator's prefix of protected nodes
	ownerIDLen = 32    // hexadecimal digits of dlock.OwnerID
	seqLen     = 10    // digits of the sequence number ZooKeeper appends

	curatorMutexName = "lock-"     // InterProcessMutex's lock name
	curatorReadName  = "__READ__"  // InterProcessReadWriteLock's read lock name
	curatorWriteName = "__WRIT__"  // InterProcessReadWriteLock's write lock name
	legacyReadKind   = "read-"     // an earlier version's Shared node
	kazooReadName    = "__rlock__" // kazoo's ReadLock node name
	semKind          = "sem-"      // a permit node, followed by "<N>-"
)

// Layout says which of Curator's lock recipes the driver's nodes are named
// for, so that Curator clients locking the key's znode see them as
// contenders. Whatever the layout, the driver reads the nodes of either
// layout (and foreign ones) alike.
type Layout int

const (
	// CuratorMutex names nodes for Curator's InterProcessMutex: every
	// node's name ends in "lock-<seq>". It is the default.
	CuratorMutex Layout = iota
	// CuratorReadWriteLock names nodes for Curator's
	// InterProcessReadWriteLock: Shared nodes end in "__READ__<seq>",
	// the others in "__WRIT__<seq>".
	CuratorReadWriteLock
)

// String returns the layout's name in zk URLs: "mutex" or "rwlock".
func (l Layout) String() string {
	if l == CuratorReadWriteLock {
		return "rwlock"
	}
	return "mutex"
}

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
// m (with limit permits, for a Semaphore) in layout l; ZooKeeper appends
// the sequence number.
func nodeBase(owner string, m driver.Mode, limit int, l Layout) string {
	kind := curatorMutexName
	if l == CuratorReadWriteLock {
		kind = curatorWriteName
	}
	switch m {
	case driver.Shared:
		kind = "read-" + curatorMutexName
		if l == CuratorReadWriteLock {
			kind = curatorReadName
		}
	case driver.Semaphore:
		kind = semKind + strconv.Itoa(limit) + "-" + kind
	}
	return nodePrefix + dlock.OwnerID(owner) + "-" + kind
}

// node is a contender's znode, parsed from its name.
type node struct {
	name    string
	ownerID string // "" for a foreign node
	seq     int64
	mode    driver.Mode // as created: a downgraded write node stays Exclusive
	limit   int         // the permits of a Semaphore node, 0 otherwise
	foreign bool        // not a node of this driver's format
}

// parseNode parses a contender's name: any name that ends in a sequence
// number. ok is false for other names, which are not contenders.
func parseNode(name string) (n node, ok bool) {
	if len(name) < seqLen {
		return node{}, false
	}
	base, digits := name[:len(name)-seqLen], name[len(name)-seqLen:]
	for i := range len(digits) {
		if digits[i] < '0' || digits[i] > '9' {
			return node{}, false
		}
	}
	seq, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return node{}, false
	}
	n = node{name: name, seq: seq}
	if id, m, limit, own := parseBase(base); own {
		n.ownerID, n.mode, n.limit = id, m, limit
		return n, true
	}
	// A foreign contender: the rules treat it as an exclusive hold, except
	// a reader's node.
	n.foreign, n.mode = true, driver.Exclusive
	if strings.HasSuffix(base, curatorReadName) || strings.HasSuffix(base, kazooReadName) {
		n.mode = driver.Shared
	}
	return n, true
}

// Curator's InterProcessSemaphoreV2 (and InterProcessSemaphoreMutex, a
// semaphore of one lease) at a znode keeps its contenders in two children
// of it: an InterProcessMutex at "locks" and the leases, counted whatever
// their names, in "leases".
const (
	curatorSemLocks  = "locks"
	curatorSemLeases = "leases"
)

// errForeignRecipe marks a key whose znode a foreign recipe uses in a way
// that does not see the driver's nodes: the driver refuses it (Permanent
// reports it permanent, like a key of a foreign type on other stores).
var errForeignRecipe = errors.New("the key's znode is used by a lock recipe that does not see this driver's nodes")

// foreignNow returns an error wrapping errForeignRecipe if the key's znode
// parent now shows a foreign recipe that does not see the driver's nodes
// (see foreignRecipe), and nil otherwise, or if the read fails.
func (d *Driver) foreignNow(parent string) error {
	children, _, err := d.conn.Children(parent)
	if err != nil {
		return nil
	}
	return foreignRecipe(children, queue(children), d.layout)
}

// foreignRecipe returns an error wrapping errForeignRecipe if the key's
// children (and q, their queue) show a recipe that would not count the
// driver's nodes of layout l: Curator's semaphores, which keep their nodes
// in children of their own; Curator's InterProcessReadWriteLock beside the
// CuratorMutex layout, which sorts the driver's nodes behind its own; and
// Curator's InterProcessMutex beside the CuratorReadWriteLock layout,
// likewise. (kazoo's recipes see the driver's nodes only when told to, by
// extra_lock_patterns: that cannot be told from here.)
func foreignRecipe(children []string, q []node, l Layout) error {
	if i := slices.IndexFunc(children, func(c string) bool { return c == curatorSemLocks || c == curatorSemLeases }); i >= 0 {
		return fmt.Errorf("%w: it has a child %q, as Curator's InterProcessSemaphoreV2 and InterProcessSemaphoreMutex make; use another key, or a Curator mutex or read-write lock", errForeignRecipe, children[i])
	}
	for _, n := range q {
		if !n.foreign {
			continue
		}
		base := n.name[:len(n.name)-seqLen]
		rw := strings.HasSuffix(base, curatorReadName) || strings.HasSuffix(base, curatorWriteName)
		switch {
		case l == CuratorMutex && rw:
			return fmt.Errorf("%w: node %s is Curator's InterProcessReadWriteLock's; open the store with curator=rwlock (WithCuratorLayout(CuratorReadWriteLock))", errForeignRecipe, n.name)
		case l == CuratorReadWriteLock && strings.HasSuffix(base, curatorMutexName):
			return fmt.Errorf("%w: node %s is Curator's InterProcessMutex's; open the store with curator=mutex (the default layout)", errForeignRecipe, n.name)
		}
	}
	return nil
}

// parseBase parses what precedes the sequence number in the name of a node
// of this driver (of any layout or earlier version).
func parseBase(base string) (id string, m driver.Mode, limit int, ok bool) {
	rest, found := strings.CutPrefix(base, nodePrefix)
	if !found || len(rest) < ownerIDLen+1 || rest[ownerIDLen] != '-' {
		return "", 0, 0, false
	}
	id, kind := rest[:ownerIDLen], rest[ownerIDLen+1:]
	for i := range len(id) {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", 0, 0, false
		}
	}
	switch kind {
	case curatorMutexName, curatorWriteName:
		return id, driver.Exclusive, 0, true
	case legacyReadKind, legacyReadKind + curatorMutexName, curatorReadName:
		return id, driver.Shared, 0, true
	}
	rest, found = strings.CutPrefix(kind, semKind)
	if !found {
		return "", 0, 0, false
	}
	n, tail, found := strings.Cut(rest, "-")
	if !found || tail != "" && tail != curatorMutexName && tail != curatorWriteName {
		return "", 0, 0, false
	}
	l, err := strconv.Atoi(n)
	if err != nil || l < 1 || strconv.Itoa(l) != n {
		return "", 0, 0, false
	}
	return id, driver.Semaphore, l, true
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
	slices.SortFunc(q, func(a, b node) int { return cmp.Or(cmp.Compare(a.seq, b.seq), strings.Compare(a.name, b.name)) })
	return q
}

// find returns the position in q of the first node of ownerID, or -1.
func find(q []node, ownerID string) int {
	return slices.IndexFunc(q, func(n node) bool { return !n.foreign && n.ownerID == ownerID })
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
