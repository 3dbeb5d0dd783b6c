package testsrv

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dlockhq/dlock/internal/testing/testcert"
)

// Settings of the ZooKeeper server started by StartZooKeeper.
const (
	// zkTickTime is ZooKeeper's tickTime, its basic time unit.
	zkTickTime = 500 * time.Millisecond
	// ZooKeeperMinSessionTimeout and ZooKeeperMaxSessionTimeout bound the
	// session timeouts the server of StartZooKeeper grants: a client asking
	// for less or more gets the bound.
	ZooKeeperMinSessionTimeout = 1 * time.Second
	ZooKeeperMaxSessionTimeout = 20 * time.Second
)

// zkJarDirs are searched for zookeeper.jar (Debian's libzookeeper-java puts
// it in /usr/share/java, with its dependencies named in its manifest's
// Class-Path).
var zkJarDirs = []string{"/usr/share/java"}

// javaDirs are searched for java after PATH.
var javaDirs = []string{"/usr/bin", "/usr/lib/jvm/default-java/bin"}

// findZooKeeper finds java and the ZooKeeper server's classpath.
func findZooKeeper() (java, classpath string, err error) {
	var jar string
	for _, d := range zkJarDirs {
		if p := filepath.Join(d, "zookeeper.jar"); isFile(p) {
			jar = p
			break
		}
	}
	if jar == "" {
		return "", "", fmt.Errorf("%w: zookeeper (zookeeper.jar not found in %s)", ErrMissing, strings.Join(zkJarDirs, ", "))
	}
	java = lookPath([]string{"java"}, javaDirs...)
	if java == "" {
		return "", "", fmt.Errorf("%w: zookeeper (java not found in PATH or %s)", ErrMissing, strings.Join(javaDirs, ", "))
	}
	cp := []string{jar}
	// Logging: the jar needs an SLF4J binding; slf4j-simple writes to
	// stderr, that is, the server log. Without one SLF4J logs nothing.
	if p := filepath.Join(filepath.Dir(jar), "slf4j-simple.jar"); isFile(p) {
		cp = append(cp, p)
	}
	return java, strings.Join(cp, string(os.PathListSeparator)), nil
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// StartZooKeeper starts a standalone ZooKeeper server (ZooKeeperServerMain,
// run directly with java, not through the system service) on a free port on
// 127.0.0.1, with its configuration (zoo.cfg), data and log in a new
// temporary directory, and waits until it answers the four-letter words
// "ruok" with "imok" and "srvr" with "Mode: standalone". The server is
// tuned for tests: tickTime 500 ms, session timeouts between 1 s and 20 s
// (ZooKeeperMinSessionTimeout, ZooKeeperMaxSessionTimeout), no fsync, no
// admin server, the four-letter words ruok, srvr and mntr enabled, and a
// small JVM (-Xmx256m, serial GC, C1 only). Stop kills it (SIGKILL): it
// holds nothing worth a clean shutdown.
//
// Server.Addr is "127.0.0.1:port", Addrs holds Addr alone, and URL is
// "zk://127.0.0.1:port". The error wraps ErrMissing if java or Debian's
// zookeeper.jar cannot be found.
func StartZooKeeper(ctx context.Context) (*Server, error) { return startZooKeeper(ctx, nil) }

// startZooKeeper starts the server of StartZooKeeper, or of
// StartZooKeeperTLS if certs is not nil.
func startZooKeeper(ctx context.Context, certs *testcert.Set) (_ *Server, err error) {
	java, classpath, err := findZooKeeper()
	if err != nil {
		return nil, err
	}
	var tlsConfig string
	if certs != nil {
		if classpath, tlsConfig, err = zkTLS(classpath, certs); err != nil {
			return nil, err
		}
	}
	s, err := newServer(ZooKeeper, nil, syscall.SIGKILL)
	if err != nil {
		return nil, err
	}
	defer s.abandonOnError(&err)
	dir := s.Dir
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "zoo.cfg")
	var securePort int
	start := func(port int, log *os.File) (*exec.Cmd, error) {
		// A fresh data directory (and secure port) on every attempt to
		// start; a restart keeps them.
		if !s.launched {
			if certs != nil {
				p, err := freePort()
				if err != nil {
					return nil, err
				}
				securePort = p
			}
			if err := os.RemoveAll(data); err != nil {
				return nil, err
			}
			if err := os.Mkdir(data, 0o755); err != nil {
				return nil, err
			}
		}
		config := zkConfig(zkTickTime, data, port)
		if certs != nil {
			config += fmt.Sprintf("secureClientPort=%d\n", securePort) + tlsConfig
		}
		if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
			return nil, err
		}
		args := zkJavaArgs(dir, classpath, "org.apache.zookeeper.server.ZooKeeperServerMain", cfg)
		return startProcess(java, args, dir, nil, log)
	}
	ready := zkReady
	if certs != nil {
		// The server opens its secure port after its plain one.
		ready = func(ctx context.Context, port int) error {
			if err := zkReady(ctx, port); err != nil {
				return err
			}
			c, err := new(net.Dialer).DialContext(ctx, "tcp", loopbackAddr(securePort))
			if err != nil {
				return err
			}
			return c.Close()
		}
	}
	if err := s.launch(ctx, start, ready); err != nil {
		return nil, err
	}
	s.Addr = loopbackAddr(s.port)
	s.URL = "zk://" + s.Addr
	if certs != nil {
		s.Addr = loopbackAddr(securePort)
		s.URL = "zk://" + s.Addr + tlsQuery(certs)
	}
	s.Addrs = []string{s.Addr}
	return s, nil
}

// zkConfig returns the settings (zoo.cfg) every ZooKeeper server gets:
// tickTime, data directory, client port on 127.0.0.1, the session timeout
// bounds, no fsync, no admin server, the four-letter words ruok, srvr and
// mntr.
func zkConfig(tickTime time.Duration, data string, port int) string {
	return fmt.Sprintf("tickTime=%d\n"+
		"dataDir=%s\n"+
		"clientPort=%d\n"+
		"clientPortAddress=127.0.0.1\n"+
		"minSessionTimeout=%d\n"+
		"maxSessionTimeout=%d\n"+
		"maxClientCnxns=0\n"+
		"forceSync=no\n"+
		"admin.enableServer=false\n"+
		"4lw.commands.whitelist=ruok,srvr,mntr\n",
		tickTime.Milliseconds(), data, port,
		ZooKeeperMinSessionTimeout.Milliseconds(), ZooKeeperMaxSessionTimeout.Milliseconds())
}

// zkJavaArgs returns the java command line of a ZooKeeper server running
// class main with the configuration file cfg, with a small JVM, its
// temporary files and logs in dir, and the system properties props
// ("-Dname=value") besides.
func zkJavaArgs(dir, classpath, main, cfg string, props ...string) []string {
	args := []string{
		"-Xmx256m",
		"-XX:+UseSerialGC",
		"-XX:TieredStopAtLevel=1",
		"-XX:-UsePerfData", // no /tmp/hsperfdata_* file
		"-Djava.net.preferIPv4Stack=true",
		"-Djava.io.tmpdir=" + dir,
		"-Dzookeeper.log.dir=" + dir,
		"-Dzookeeper.jmx.log4j.disable=true",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
	}
	args = append(args, props...)
	return append(args, "-cp", classpath, main, cfg)
}

// zkReady is the readiness check of ZooKeeper: "ruok" must be answered
// "imok", and "srvr" must report the standalone mode. (A server answers
// "imok" as soon as it accepts connections, a moment before it serves
// requests; until then "srvr" answers that it is not serving.)
func zkReady(ctx context.Context, port int) error { return zkServing(ctx, port, "standalone") }

// zkServing reports whether the server on port answers "ruok" with "imok"
// and "srvr" with one of modes ("Mode: " + mode).
func zkServing(ctx context.Context, port int, modes ...string) error {
	reply, err := zkCommand(ctx, loopbackAddr(port), "ruok")
	if err != nil {
		return err
	}
	if reply != "imok" {
		return fmt.Errorf("ruok: reply %q", reply)
	}
	reply, err = zkCommand(ctx, loopbackAddr(port), "srvr")
	if err != nil {
		return err
	}
	for _, m := range modes {
		if strings.Contains(reply, "Mode: "+m) {
			return nil
		}
	}
	return fmt.Errorf("srvr: reply %q", strings.TrimSpace(reply))
}

// zkCommand sends a ZooKeeper four-letter word over a new connection and
// returns the reply (the server closes the connection after it).
func zkCommand(ctx context.Context, addr, cmd string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	if _, err := conn.Write([]byte(cmd)); err != nil {
		return "", fmt.Errorf("%s: %w", cmd, err)
	}
	b, err := io.ReadAll(io.LimitReader(conn, 1<<16))
	if err != nil {
		return "", fmt.Errorf("%s: %w", cmd, err)
	}
	return string(b), nil
}
