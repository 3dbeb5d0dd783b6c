package redisdlock

import (
	"strings"
	"sync"
)

// layout names the Redis keys and the pub/sub channel of one lock.
type layout struct {
	lock    string // script/tx: the holder hash; legacy: the timestamp string
	fence   string // the fencing counter (outlives the lock)
	holder  string // legacy only: the side hash naming the dlock holder
	channel string // release notifications

	// Script mode's general form (see scripts/common.lua): the holders,
	// the queue in order, and the queue entries' leases. Empty in Legacy
	// mode.
	holders, queue, qexp string
}

// Suffixes of the keys that belong to one lock.
const (
	fenceSuffix   = ":fence"
	channelSuffix = ":released"
	holdersSuffix = ":holders"
	queueSuffix   = ":queue"
	qexpSuffix    = ":qexp"

	legacyHolderSuffix  = ":dlock.holder"
	legacyFenceSuffix   = ":dlock.fence"
	legacyChannelSuffix = ":dlock.released"
)

// layout returns the keys of the lock named key.
func (d *Driver) layout(key string) layout {
	if d.cfg.mode == Legacy {
		lk := d.cfg.prefix + key
		return layout{
			lock:    lk,
			holder:  sideKey(lk, legacyHolderSuffix),
			fence:   sideKey(lk, legacyFenceSuffix),
			channel: sideKey(lk, legacyChannelSuffix),
		}
	}
	base := d.base(key)
	return layout{
		lock:    base,
		fence:   base + fenceSuffix,
		channel: base + channelSuffix,
		holders: base + holdersSuffix,
		queue:   base + queueSuffix,
		qexp:    base + qexpSuffix,
	}
}

// stepLayout returns the keys that Acquire (fence true), Refresh and
// Release need: in Script mode the hash, and for Acquire the counter, which
// is all that the scripts are sent (they name the other keys after the
// hash); in the other modes every key, as layout does.
func (d *Driver) stepLayout(key string, fence bool) layout {
	if d.cfg.mode != Script {
		return d.layout(key)
	}
	if !fence {
		return layout{lock: d.base(key)}
	}
	// One string for both: the hash's name is the counter's without its
	// suffix.
	f := d.named(key, fenceSuffix)
	return layout{lock: f[:len(f)-len(fenceSuffix)], fence: f}
}

// waiterChannel returns the channel on which the queued waiter owner of the
// lock with the release channel ch hears that it may be let in (Script
// mode; see wake in scripts/common.lua).
func waiterChannel(ch, owner string) string { return ch + ":" + owner }

// base returns the name of the lock hash of key, which begins the names of
// the lock's other keys: {PREFIX+ESC(KEY)}, or, for a key with a Redis
// Cluster hash tag TAG of its own, {PREFIX+ESC(TAG)}{ESC(KEY)}, so that the
// locks of keys with one tag share a Cluster slot (and can be taken in one
// script). Neither form can be mistaken for the other: the first has one
// pair of braces, the second two.
func (d *Driver) base(key string) string { return d.named(key, "") }

// named returns base(key) + suffix.
func (d *Driver) named(key, suffix string) string {
	if tag, ok := userTag(key); ok {
		return "{" + d.cfg.prefix + escapeKey(tag) + "}{" + escapeKey(key) + "}" + suffix
	}
	return "{" + d.cfg.prefix + escapeKey(key) + "}" + suffix
}

// userTag returns the hash tag of a user key, as Redis Cluster reads it:
// the content of its first {...}, if that is not empty.
func userTag(key string) (string, bool) {
	tag := hashPart(key)
	return tag, tag != key // a key with a tag has a brace its tag lacks
}

// escapeKey makes a user key safe inside a hash tag: '%', '{' and '}' become
// "%25", "%7B" and "%7D", so the tag {prefix+escaped} ends exactly where the
// driver put its closing brace. The mapping is injective and keeps prefixes:
// escapeKey(p) is a prefix of escapeKey(k) exactly when p is a prefix of k.
func escapeKey(key string) string {
	if !strings.ContainsAny(key, "%{}") {
		return key
	}
	var b strings.Builder
	b.Grow(len(key) + 8)
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// unescapeKey reverses escapeKey. It reports false for text escapeKey cannot
// have produced.
func unescapeKey(s string) (string, bool) {
	if !strings.ContainsAny(s, "%{}") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '{' || c == '}' {
			return "", false
		}
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		switch s[i+1 : i+3] {
		case "25":
			b.WriteByte('%')
		case "7B":
			b.WriteByte('{')
		case "7D":
			b.WriteByte('}')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

// hashPart returns the part of key that Redis Cluster hashes: the content of
// the first {...} if it is non-empty, else the whole key.
func hashPart(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

// sideKey returns a key in the same Cluster slot as the legacy lock key lk,
// for the driver's own records about lk: "{TAG}" + lk + suffix. TAG is lk's
// hash part when that can stand inside braces (it has no '}'); otherwise it
// is a short string chosen to hash to the same slot. Either way the side key
// is a function of lk alone, so every dlock process names it alike.
func sideKey(lk, suffix string) string {
	tag := hashPart(lk)
	if strings.IndexByte(tag, '}') >= 0 {
		tag = slotTags()[slot(lk)]
	}
	return "{" + tag + "}" + lk + suffix
}

// sideLockKey returns the legacy lock key that the side key k was made for,
// and false if k is not a side key with the given suffix.
func sideLockKey(k, suffix string) (string, bool) {
	if !strings.HasPrefix(k, "{") || !strings.HasSuffix(k, suffix) {
		return "", false
	}
	e := strings.IndexByte(k, '}')
	if e < 0 || e+1 > len(k)-len(suffix) {
		return "", false
	}
	lk := k[e+1 : len(k)-len(suffix)]
	if lk == "" || sideKey(lk, suffix) != k {
		return "", false
	}
	return lk, true
}

// slot returns the Redis Cluster hash slot of key.
func slot(key string) uint16 {
	return crc16(hashPart(key)) % 16384
}

// slotTags returns, for every hash slot, a short alphanumeric string that
// hashes to it.
var slotTags = sync.OnceValue(func() []string {
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	tags := make([]string, 16384)
	left := len(tags)
	buf := make([]byte, 0, 8)
	// Breadth-first over strings of growing length: the shortest tag wins.
	var walk func(depth int) bool
	walk = func(depth int) bool {
		if len(buf) == depth {
			s := crc16(string(buf)) % 16384
			if tags[s] == "" {
				tags[s] = string(buf)
				left--
			}
			return left == 0
		}
		for i := 0; i < len(alphabet); i++ {
			buf = append(buf, alphabet[i])
			done := walk(depth)
			buf = buf[:len(buf)-1]
			if done {
				return true
			}
		}
		return false
	}
	for depth := 1; !walk(depth); depth++ {
	}
	return tags
})

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// globEscape quotes the characters SCAN MATCH treats specially.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
