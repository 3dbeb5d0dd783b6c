package dlockprom_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memdlock"
	"github.com/dlockhq/dlock/observe/dlockprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func Example() {
	// One Observer for the process: register it, and give it to every
	// Client.
	obs := dlockprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(obs)
	client, err := dlock.New(memdlock.New(), dlock.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	defer client.Close()

	ctx := context.Background()
	err = client.Do(ctx, "reports/daily", func(ctx context.Context, l *dlock.Lock) error {
		// A second attempt while the lock is held fails at once.
		_, err := client.TryLock(context.Background(), "reports/daily")
		return err
	})
	fmt.Println(err != nil)

	// Serve the registry (here on a test server) and scrape it.
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "dlock_acquisitions_total") || strings.HasPrefix(line, "dlock_holders") || strings.HasPrefix(line, "dlock_hold_seconds_count") {
			fmt.Print(line)
		}
	}
	// Output:
	// true
	// dlock_acquisitions_total{mode="exclusive",reason="",result="acquired"} 1
	// dlock_acquisitions_total{mode="exclusive",reason="held",result="not_acquired"} 1
	// dlock_hold_seconds_count{end="released",mode="exclusive"} 1
	// dlock_holders{mode="exclusive"} 0
}
