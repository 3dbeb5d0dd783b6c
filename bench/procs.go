package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync"
	"time"
)

// The cells with OS processes (hotkey-os, handoff-os) run each client in a
// process of its own: the bench's own executable, started with workerEnv
// set, which holds one client of every library of the cell (process i is
// client i of each library, as if each machine of a fleet ran every
// library) and does what the parent asks over its stdin and stdout, one
// JSON line per request and per reply.

// workerEnv, set in a process's environment, makes the bench a worker.
const workerEnv = "DLOCK_BENCH_WORKER"

// workerSpec is a worker's first line: the clients it opens.
type workerSpec struct {
	Store  string
	Libs   []string
	Addrs  []string
	TTL    time.Duration
	Retry  time.Duration
	Pool   int
	Budget time.Duration
	Name   string // of the clients' connections
}

// job is a request to a worker, on the client of library Lib.
type job struct {
	Op  string // "lock", "unlock" (of the lock Lock took), or "loop": hot key until Until
	Lib string
	Key string
	CS  time.Duration
	// Until (loop): no Lock starts after it (Unix nanoseconds: the
	// processes share the machine's clock).
	Until int64
}

// stamp is one acquisition in a loop: when Lock was called, when it
// returned holding the lock and when the release was called (Unix
// nanoseconds).
type stamp struct{ Called, Got, Release int64 }

// reply answers a job (or, first, the spec: Err says whether the clients
// opened).
type reply struct {
	Err string `json:",omitempty"`
	// lock, unlock: the call and its return (Unix nanoseconds).
	Called, Done int64 `json:",omitempty"`
	GaveUp       int   `json:",omitempty"`
	// loop: the waits, the acquisitions, when the loop began and ended
	// (Unix nanoseconds) and the CPU time the worker used meanwhile.
	Locks      []time.Duration `json:",omitempty"`
	Stamps     []stamp         `json:",omitempty"`
	Start, End int64           `json:",omitempty"`
	CPU        time.Duration   `json:",omitempty"`
}

// runWorker is the worker's main: it opens the clients the spec on in
// names, answers the jobs, and closes the clients when in ends.
func runWorker(in io.Reader, out io.Writer) error {
	dec, enc := json.NewDecoder(in), json.NewEncoder(out)
	var spec workerSpec
	if err := dec.Decode(&spec); err != nil {
		return err
	}
	set := settings{ttl: spec.TTL, retry: spec.Retry, pool: spec.Pool, name: spec.Name}
	lks := map[string]locker{}
	var open error
	for _, name := range spec.Libs {
		i := slices.IndexFunc(libraries, func(l library) bool { return l.store == spec.Store && l.name == name })
		if i < 0 {
			open = fmt.Errorf("no library %s/%s", spec.Store, name)
			break
		}
		l, closeIt, err := libraries[i].open(spec.Addrs, set)
		if err != nil {
			open = fmt.Errorf("%s: %w", name, err)
			break
		}
		defer closeIt()
		lks[name] = l
	}
	var r reply
	if open != nil {
		r.Err = open.Error()
	}
	if err := enc.Encode(r); err != nil || open != nil {
		return errors.Join(open, err)
	}
	rc := &runCtx{ctx: context.Background(), budget: spec.Budget}
	held := map[string]func(context.Context) error{}
	for {
		var j job
		if err := dec.Decode(&j); err != nil {
			if err == io.EOF {
				err = nil
			}
			return err
		}
		if err := enc.Encode(work(rc, lks[j.Lib], held, j)); err != nil {
			return err
		}
	}
}

// work does one job on l; held keeps the locks between lock and unlock.
func work(rc *runCtx, l locker, held map[string]func(context.Context) error, j job) reply {
	var r reply
	var err error
	switch j.Op {
	case "lock":
		r.Called = time.Now().UnixNano()
		var unlock func(context.Context) error
		var gaveUp bool
		unlock, gaveUp, err = rc.lock(l, j.Key)
		r.Done = time.Now().UnixNano()
		if gaveUp {
			r.GaveUp = 1
		}
		if err == nil {
			held[j.Lib+"\x00"+j.Key] = unlock
		}
	case "unlock":
		k := j.Lib + "\x00" + j.Key
		unlock := held[k]
		delete(held, k)
		if unlock == nil {
			return reply{Err: "unlock of a lock not held: " + j.Key}
		}
		r.Called = time.Now().UnixNano()
		err = unlock(rc.ctx)
		r.Done = time.Now().UnixNano()
	case "loop":
		cpu := processCPU()
		var s samples
		st := &stamps{}
		rc := *rc
		rc.lks, rc.dur = []locker{l}, time.Until(time.Unix(0, j.Until))
		r.Start = time.Now().UnixNano()
		loop(&rc, &s, 1, j.CS, func(int) string { return j.Key }, st)
		r.End, r.CPU = time.Now().UnixNano(), processCPU()-cpu
		r.Locks, r.Stamps, r.GaveUp, err = s.locks, st.s, s.gaveUp, s.firstErr
	default:
		err = fmt.Errorf("unknown job %q", j.Op)
	}
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

// stamps records a loop's acquisitions for the parent (one goroutine).
type stamps struct{ s []stamp }

func (st *stamps) acquired(called, got time.Time) {
	st.s = append(st.s, stamp{Called: called.UnixNano(), Got: got.UnixNano()})
}

func (st *stamps) releasing(at time.Time) { st.s[len(st.s)-1].Release = at.UnixNano() }

// worker is the parent's end of one worker process.
type worker struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	enc  *json.Encoder
	dec  *json.Decoder
	mu   sync.Mutex // one job at a time
	dead error
}

// call sends a job (or the spec) and waits for the reply.
func (w *worker) call(v any) (reply, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var r reply
	if w.dead != nil {
		return r, w.dead
	}
	if err := w.enc.Encode(v); err != nil {
		w.dead = fmt.Errorf("worker %d: %w", w.cmd.Process.Pid, err)
		return r, w.dead
	}
	if err := w.dec.Decode(&r); err != nil {
		w.dead = fmt.Errorf("worker %d: %w", w.cmd.Process.Pid, err)
		return r, w.dead
	}
	if r.Err != "" {
		return r, errors.New(r.Err)
	}
	return r, nil
}

// fleet is n worker processes, each with a client of every library of a
// cell.
type fleet struct{ ws []*worker }

// startFleet starts n workers, a few at a time, and waits until each has
// opened its clients. The fleet must be closed, also when it fails.
func startFleet(spec workerSpec, n int) (*fleet, error) {
	exe, err := os.Executable()
	if err != nil {
		return &fleet{}, err
	}
	f := &fleet{ws: make([]*worker, n)}
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cmd := exec.Command(exe)
			cmd.Env = append(os.Environ(), workerEnv+"=1")
			cmd.Stderr = os.Stderr
			in, err := cmd.StdinPipe()
			if err != nil {
				errs[i] = err
				return
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				errs[i] = err
				return
			}
			if err := cmd.Start(); err != nil {
				errs[i] = err
				return
			}
			w := &worker{cmd: cmd, in: in, enc: json.NewEncoder(in), dec: json.NewDecoder(bufio.NewReader(out))}
			f.ws[i] = w
			spec := spec
			spec.Name = clientName(i)
			_, errs[i] = w.call(spec)
		})
	}
	wg.Wait()
	return f, errors.Join(errs...)
}

// close ends every worker (they close their clients when their stdin ends)
// and waits for them.
func (f *fleet) close() {
	if f == nil {
		return
	}
	for _, w := range f.ws {
		if w != nil {
			w.in.Close()
		}
	}
	for _, w := range f.ws {
		if w != nil {
			w.cmd.Wait()
		}
	}
}

// lockers returns the fleet's clients of lib, one per worker.
func (f *fleet) lockers(lib string) []locker {
	lks := make([]locker, len(f.ws))
	for i, w := range f.ws {
		lks[i] = &remoteLocker{w: w, lib: lib}
	}
	return lks
}

// remoteLocker is a worker's client of one library. Its Lock and unlock
// make the worker call them; last returns the worker's own timestamps of
// the last call.
type remoteLocker struct {
	w    *worker
	lib  string
	mu   sync.Mutex
	prev reply
}

func (l *remoteLocker) do(j job) (reply, error) {
	j.Lib = l.lib
	r, err := l.w.call(j)
	l.mu.Lock()
	l.prev = r
	l.mu.Unlock()
	return r, err
}

func (l *remoteLocker) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	r, err := l.do(job{Op: "lock", Key: key})
	if r.GaveUp > 0 {
		<-ctx.Done() // the worker's budget ran out: so does the caller's
	}
	if err != nil {
		return nil, err
	}
	return func(context.Context) error {
		_, err := l.do(job{Op: "unlock", Key: key})
		return err
	}, nil
}

// last returns when the worker began and ended its last call.
func (l *remoteLocker) last() (called, done time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Unix(0, l.prev.Called), time.Unix(0, l.prev.Done)
}

// stamped returns the times a call on l began and ended: the worker's own
// for a remoteLocker, else called and done (taken around the call here).
func stamped(l locker, called, done time.Time) (time.Time, time.Time) {
	if r, ok := l.(*remoteLocker); ok {
		return r.last()
	}
	return called, done
}

// hotKeyOS is hotKey with a worker process per goroutine (rc.lks are
// remoteLockers): each worker runs the loop of one goroutine on its client;
// the handoffs are found from the workers' timestamps, merged in time order.
func hotKeyOS(rc *runCtx, s *samples, g int, cs time.Duration) {
	if s.counts == nil {
		s.counts = make([]int, g)
	}
	j := job{Op: "loop", Key: rc.prefix + "hot", CS: cs, Until: time.Now().Add(rc.dur).UnixNano()}
	rs := make([]reply, g)
	errs := make([]error, g)
	var wg sync.WaitGroup
	for i := range g {
		wg.Go(func() { rs[i], errs[i] = rc.lks[i].(*remoteLocker).do(j) })
	}
	wg.Wait()
	type event struct {
		at      int64
		called  int64 // 0: a release
		acquire bool
	}
	var evs []event
	var start, end int64
	for i, r := range rs {
		if errs[i] != nil {
			s.err(errs[i])
		}
		s.locks = append(s.locks, r.Locks...)
		s.counts[i] += len(r.Locks)
		s.ops += len(r.Locks)
		s.gaveUp += r.GaveUp
		s.clientCPU += r.CPU
		if r.Start > 0 && (start == 0 || r.Start < start) {
			start = r.Start
		}
		end = max(end, r.End)
		for _, st := range r.Stamps {
			evs = append(evs, event{at: st.Got, called: st.Called, acquire: true})
			if st.Release > 0 {
				evs = append(evs, event{at: st.Release})
			}
		}
	}
	s.elapsed += time.Duration(end - start)
	slices.SortFunc(evs, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	hc := &handoffClock{}
	for _, e := range evs {
		if e.acquire {
			hc.acquired(time.Unix(0, e.called), time.Unix(0, e.at))
		} else {
			hc.releasing(time.Unix(0, e.at))
		}
	}
	s.fromCall = append(s.fromCall, hc.samples...)
}
