// Contender takes a lock at a ZooKeeper path with one of Apache Curator's
// recipes, for the interop tests of package zkdlock (interop_test.go), and
// records its critical sections in a witness directory.
//
//	java -cp curator-recipes.jar Contender.java CONNECT PATH RECIPE N WITNESS OVERLAPS ID ROUNDS HOLD_MS
//
// RECIPE is mutex (InterProcessMutex), read or write (InterProcessReadWriteLock),
// semaphore (InterProcessSemaphoreV2 of N leases) or semmutex
// (InterProcessSemaphoreMutex). With ROUNDS > 0 it takes and releases the
// lock ROUNDS times, holding it HOLD_MS each, and prints "done"; with
// ROUNDS 0 it takes the lock once, prints "held" and keeps it until its
// standard input closes. It prints "ready" once connected. The witness
// protocol is the one of type witness in interop_test.go.

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;

public class Contender {
    interface Lock {
        void acquire() throws Exception;

        void release() throws Exception;
    }

    static Lock of(InterProcessLock l) {
        return new Lock() {
            public void acquire() throws Exception { l.acquire(); }

            public void release() throws Exception { l.release(); }
        };
    }

    public static void main(String[] a) throws Exception {
        String connect = a[0], path = a[1], recipe = a[2];
        int n = Integer.parseInt(a[3]);
        Path witness = Paths.get(a[4]), overlaps = Paths.get(a[5]);
        String id = a[6];
        int rounds = Integer.parseInt(a[7]);
        long holdMs = Long.parseLong(a[8]);

        CuratorFramework c = CuratorFrameworkFactory.builder().connectString(connect)
                .sessionTimeoutMs(2000).connectionTimeoutMs(10000).retryPolicy(new RetryOneTime(100)).build();
        c.start();
        if (!c.blockUntilConnected(60, TimeUnit.SECONDS)) {
            throw new IOException("not connected to " + connect);
        }
        Lock lock;
        String kind = "x";
        int limit = 1;
        switch (recipe) {
            case "mutex": lock = of(new InterProcessMutex(c, path)); break;
            case "read": lock = of(new InterProcessReadWriteLock(c, path).readLock()); kind = "r"; break;
            case "write": lock = of(new InterProcessReadWriteLock(c, path).writeLock()); break;
            case "semmutex": lock = of(new InterProcessSemaphoreMutex(c, path)); break;
            case "semaphore": {
                InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(c, path, n);
                Lease[] held = new Lease[1];
                lock = new Lock() {
                    public void acquire() throws Exception { held[0] = s.acquire(); }

                    public void release() throws Exception { held[0].close(); }
                };
                kind = "s";
                limit = n;
                break;
            }
            default: throw new IllegalArgumentException("recipe " + recipe);
        }
        System.out.println("ready");
        System.out.flush();
        if (rounds == 0) {
            lock.acquire();
            Path mine = enter(witness, overlaps, kind, limit, id);
            System.out.println("held");
            System.out.flush();
            while (System.in.read() >= 0) {
            }
            Files.delete(mine);
            lock.release();
        } else {
            for (int i = 0; i < rounds; i++) {
                lock.acquire();
                Path mine = enter(witness, overlaps, kind, limit, id + "-" + i);
                Thread.sleep(holdMs);
                Files.delete(mine);
                lock.release();
            }
            System.out.println("done");
            System.out.flush();
        }
        c.close();
    }

    // enter records a critical section of kind x (exclusive), r (reader) or
    // s (one of limit permits): it creates the file KIND-ID in witness, then
    // lists witness and, if another section there conflicts with its own,
    // creates a file in overlaps.
    static Path enter(Path witness, Path overlaps, String kind, int limit, String id) throws IOException {
        Path mine = Files.createFile(witness.resolve(kind + "-" + id));
        int x = 0, r = 0, s = 0;
        try (DirectoryStream<Path> d = Files.newDirectoryStream(witness)) {
            for (Path p : d) {
                if (p.equals(mine)) {
                    continue;
                }
                switch (p.getFileName().toString().charAt(0)) {
                    case 'x': x++; break;
                    case 'r': r++; break;
                    default: s++;
                }
            }
        }
        boolean overlap = switch (kind) {
            case "x" -> x + r + s > 0;
            case "r" -> x + s > 0;
            default -> x + r > 0 || s + 1 > limit;
        };
        if (overlap) {
            Files.createTempFile(overlaps, kind + "-" + id + ".", "");
        }
        return mine;
    }
}
