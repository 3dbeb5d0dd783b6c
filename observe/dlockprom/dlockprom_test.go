package dlockprom_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memdlock"
	"github.com/dlockhq/dlock/observe/dlockprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// scrape reads the metrics the handler at url serves, by series: the name
// followed by the labels, as the text format writes them.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("scrape: %q: %v", line, err)
		}
		m[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

func newServer(t *testing.T, obs *dlockprom.Observer) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(obs)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func newClient(t *testing.T, d *memdlock.Driver, obs dlock.Observer) *dlock.Client {
	t.Helper()
	c, err := dlock.New(d, dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor scrapes until series has value want.
func waitFor(t *testing.T, url, series string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, ok := scrape(t, url)[series]
		if ok && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v (present: %v); want %v", series, got, ok, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMetrics(t *testing.T) {
	obs := dlockprom.New(dlockprom.WithConstLabels(prometheus.Labels{"service": "test"}))
	url := newServer(t, obs)
	store := memdlock.New()
	c := newClient(t, store.Share(), obs)
	other := newClient(t, store.Share(), obs)
	ctx := context.Background()

	l, err := c.Lock(ctx, "orders/1", dlock.WithTTL(60*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryLock(ctx, "orders/1"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock = %v; want ErrNotAcquired", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	if _, err := other.Lock(tctx, "orders/1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock = %v; want DeadlineExceeded", err)
	}
	cancel()

	// A waiter shows in the gauge while it waits.
	got := make(chan *dlock.Lock)
	go func() {
		l, err := other.Lock(ctx, "orders/1")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, url, `dlock_waiters{mode="exclusive",service="test"}`, 1)
	if m := scrape(t, url); m[`dlock_holders{mode="exclusive",service="test"}`] != 1 {
		t.Errorf("holders = %v while one lock is held", m[`dlock_holders{mode="exclusive",service="test"}`])
	}
	time.Sleep(70 * time.Millisecond) // renewals every 20ms
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l := <-got; l != nil {
		l.Release(ctx)
	}

	p, err := c.Lock(ctx, "pool", dlock.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	p.Release(ctx)

	j, err := c.Lock(ctx, "job", dlock.WithMaxHold(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-j.Done()
	waitFor(t, url, `dlock_losses_total{cause="max_hold",mode="exclusive",service="test"}`, 1)

	m := scrape(t, url)
	for series, want := range map[string]float64{
		`dlock_acquisitions_total{mode="exclusive",reason="",result="acquired",service="test"}`:            3,
		`dlock_acquisitions_total{mode="exclusive",reason="held",result="not_acquired",service="test"}`:    1,
		`dlock_acquisitions_total{mode="exclusive",reason="timeout",result="not_acquired",service="test"}`: 1,
		`dlock_acquisitions_total{mode="semaphore",reason="",result="acquired",service="test"}`:            1,
		`dlock_wait_seconds_count{mode="exclusive",result="acquired",service="test"}`:                      3,
		`dlock_wait_seconds_count{mode="exclusive",result="not_acquired",service="test"}`:                  2,
		`dlock_hold_seconds_count{end="released",mode="exclusive",service="test"}`:                         2,
		`dlock_hold_seconds_count{end="lost",mode="exclusive",service="test"}`:                             1,
		`dlock_hold_seconds_count{end="released",mode="semaphore",service="test"}`:                         1,
		`dlock_losses_total{cause="max_hold",mode="exclusive",service="test"}`:                             1,
		`dlock_holders{mode="exclusive",service="test"}`:                                                   0,
		`dlock_holders{mode="semaphore",service="test"}`:                                                   0,
		`dlock_waiters{mode="exclusive",service="test"}`:                                                   0,
		`dlock_waiters{mode="semaphore",service="test"}`:                                                   0,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present: %v); want %v", series, got, ok, want)
		}
	}
	// The timed-out wait took its 30ms: the sum of failed waits is at
	// least that.
	if s := m[`dlock_wait_seconds_sum{mode="exclusive",result="not_acquired",service="test"}`]; s < 0.03 {
		t.Errorf("wait seconds of failures = %v; want at least 0.03", s)
	}
	if s := m[`dlock_hold_seconds_sum{end="released",mode="exclusive",service="test"}`]; s < 0.07 {
		t.Errorf("hold seconds = %v; want at least 0.07", s)
	}
	if n := m[`dlock_renewals_total{mode="exclusive",service="test"}`]; n < 2 {
		t.Errorf("renewals = %v; want at least 2", n)
	}
	for series := range m {
		if strings.Contains(series, "orders") {
			t.Errorf("a key is a label without WithKeyLabel: %s", series)
		}
	}
}

func TestKeyLabelAndNamespace(t *testing.T) {
	obs := dlockprom.New(
		dlockprom.WithNamespace("app"),
		dlockprom.WithWaitBuckets([]float64{0.5}),
		dlockprom.WithHoldBuckets([]float64{2}),
		dlockprom.WithKeyLabel(func(key string) string { kind, _, _ := strings.Cut(key, "/"); return kind }),
	)
	url := newServer(t, obs)
	c := newClient(t, memdlock.New(), obs)
	ctx := context.Background()
	for _, key := range []string{"orders/1", "orders/2", "users/7"} {
		l, err := c.Lock(ctx, key, dlock.Shared())
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	m := scrape(t, url)
	for series, want := range map[string]float64{
		`app_dlock_acquisitions_total{key="orders",mode="shared",reason="",result="acquired"}`:  2,
		`app_dlock_acquisitions_total{key="users",mode="shared",reason="",result="acquired"}`:   1,
		`app_dlock_holders{key="orders",mode="shared"}`:                                         2,
		`app_dlock_holders{key="users",mode="shared"}`:                                          1,
		`app_dlock_waiters{key="orders",mode="shared"}`:                                         0,
		`app_dlock_wait_seconds_bucket{key="orders",mode="shared",result="acquired",le="0.5"}`:  2,
		`app_dlock_wait_seconds_bucket{key="orders",mode="shared",result="acquired",le="+Inf"}`: 2,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present: %v); want %v", series, got, ok, want)
		}
	}
}

// An outcome whose start this Observer did not see leaves the waiters
// gauge alone.
func TestUnmatchedOutcome(t *testing.T) {
	obs := dlockprom.New()
	url := newServer(t, obs)
	obs.Observe(dlock.Event{Kind: dlock.EventAcquiring, ID: 1, Key: "k"})
	obs.Observe(dlock.Event{Kind: dlock.EventAcquired, ID: 2, Key: "k"})
	obs.Observe(dlock.Event{Kind: dlock.EventAcquired, ID: 1, Key: "k"})
	m := scrape(t, url)
	if w, h := m[`dlock_waiters{mode="exclusive"}`], m[`dlock_holders{mode="exclusive"}`]; w != 0 || h != 2 {
		t.Errorf("waiters %v holders %v; want 0 and 2", w, h)
	}
}
