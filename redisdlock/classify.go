package redisdlock

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Permanent implements driver.Classifier. A Redis error is permanent when
// asking again cannot change the answer while the deployment stays as it
// is:
//
//   - the server refused the credentials (WRONGPASS, NOAUTH, and AUTH sent
//     to a server without a password) or a command, key or channel to the
//     ACL user (NOPERM);
//   - a key the lock needs holds a value of another type (WRONGTYPE): a
//     foreign client uses the name;
//   - the server does not know a command the mode needs ("unknown
//     command": scripting or a command renamed or disabled in the
//     configuration), or the database index does not exist.
//
// Failures of the connection, of a server that is loading, failing over,
// read-only (a replica), out of memory or busy are transient.
func (d *Driver) Permanent(err error) bool { return permanent(err) }

func permanent(err error) bool {
	var re redis.Error
	switch {
	case !errors.As(err, &re):
		return false
	case redis.IsAuthError(err) || redis.IsPermissionError(err):
		return true
	}
	return permanentReply(re.Error())
}

// permanentReply reports whether msg, a Redis error reply, says something
// that asking again does not mend.
func permanentReply(msg string) bool {
	msg = strings.TrimPrefix(msg, "ERR ") // KVRocks and others add it
	for _, p := range permanentPrefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// permanentPrefixes begin the messages of Redis errors that asking again
// does not mend (besides the authentication and permission errors that
// go-redis recognises).
var permanentPrefixes = []string{
	"WRONGTYPE ",
	"NOPERM ",
	"WRONGPASS ",
	"NOAUTH ",
	"unknown command",
	"DB index is out of range",
	"AUTH <password> called without any password configured",
	"Client sent AUTH, but no password is set",
}
