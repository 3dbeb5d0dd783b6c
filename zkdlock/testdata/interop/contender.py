"""Takes a lock at a ZooKeeper path with one of kazoo's recipes, for the
interop tests of package zkdlock (interop_test.go), and records its critical
sections in a witness directory, as Contender.java does.

    python3 contender.py HOSTS PATH RECIPE EXTRA WITNESS OVERLAPS ID ROUNDS HOLD_MS

RECIPE is lock (Lock), read (ReadLock) or write (WriteLock); EXTRA, if not
empty, is given as extra_lock_patterns=(EXTRA,). ROUNDS and HOLD_MS as in
Contender.java.
"""

import os
import sys
import tempfile
import time

from kazoo.client import KazooClient


def enter(witness, overlaps, kind, ident):
    mine = os.path.join(witness, kind + "-" + ident)
    os.close(os.open(mine, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    others = [n[0] for n in os.listdir(witness) if n != kind + "-" + ident]
    if kind == "x":
        overlap = len(others) > 0
    else:
        overlap = any(k != "r" for k in others)
    if overlap:
        os.close(tempfile.mkstemp(prefix=kind + "-" + ident + ".", dir=overlaps)[0])
    return mine


def main():
    hosts, path, recipe, extra, witness, overlaps, ident, rounds, hold_ms = sys.argv[1:]
    rounds, hold = int(rounds), int(hold_ms) / 1000
    zk = KazooClient(hosts=hosts, timeout=2.0)
    zk.start(timeout=60)
    make = {"lock": zk.Lock, "read": zk.ReadLock, "write": zk.WriteLock}[recipe]
    lock = make(path, ident, extra_lock_patterns=(extra,) if extra else ())
    kind = "r" if recipe == "read" else "x"
    print("ready", flush=True)
    if rounds == 0:
        lock.acquire()
        mine = enter(witness, overlaps, kind, ident)
        print("held", flush=True)
        sys.stdin.read()
        os.remove(mine)
        lock.release()
    else:
        for i in range(rounds):
            lock.acquire()
            mine = enter(witness, overlaps, kind, "%s-%d" % (ident, i))
            time.sleep(hold)
            os.remove(mine)
            lock.release()
        print("done", flush=True)
    zk.stop()
    zk.close()


main()
