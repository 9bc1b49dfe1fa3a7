// Package stripemock starts stripe-mock, Stripe's own API mock (built from
// Stripe's OpenAPI specification), for tests: every Stripe request billing
// makes is validated against the real API's parameters.
//
// stripe-mock is a separate binary (`go install
// github.com/stripe/stripe-mock@v0.203.0`). Without it a test is skipped,
// except under CI (CI set), where its absence fails the test.
//
// Part of the test kit (one package per kind of part; docs/testing.md):
// stripemock checks billing's Stripe requests against Stripe's own API
// description; providerfake, which keeps state, counts what was created.
package stripemock

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fibe-dev/billing/internal/kit/proctest"
)

// Version is the stripe-mock release .ci/run installs.
const Version = "v0.203.0"

// Start runs a stripe-mock on a free 127.0.0.1 port for the test and
// returns its base URL; it stops when the test ends.
func Start(t testing.TB) string {
	t.Helper()
	bin := Bin(t)
	// The port is free when chosen and taken by stripe-mock only once it
	// has loaded its document; on a busy machine another listener can
	// take it first, and stripe-mock then exits: start again on another.
	var err error
	for range 3 {
		var url string
		if url, err = start(t, bin); err == nil {
			return url
		}
		if !errors.Is(err, errExited) {
			break // a stripe-mock that never answered: fail now, not 3 bounds later
		}
	}
	t.Fatalf("stripemock: %v", err)
	return ""
}

// errExited is a stripe-mock that ended before it answered.
var errExited = errors.New("stripe-mock exited before it answered")

// start runs one stripe-mock on a free port and waits for it to answer;
// it stops when the test ends.
func start(t testing.TB, bin string) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bin, "-http-port", strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	// stripe-mock loads Stripe's whole OpenAPI document before it listens:
	// about a second when idle, far longer at load 30, and more than 2
	// minutes at load 50 (two suites at once), so a generous bound.
	if err := waitUp(url, 5*time.Minute, exited); err != nil {
		return "", err
	}
	return url, nil
}

// Bin is the stripe-mock binary: $STRIPE_MOCK, then on PATH, then in
// GOPATH/bin (where go install puts it). Without one the test is skipped,
// except under CI (internal/kit/proctest).
func Bin(t testing.TB) string {
	t.Helper()
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, _ := os.UserHomeDir()
		gopath = filepath.Join(home, "go")
	}
	return proctest.RequireTool(t, "go install github.com/stripe/stripe-mock@"+Version,
		os.Getenv("STRIPE_MOCK"), "stripe-mock", filepath.Join(gopath, "bin", "stripe-mock"))
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitUp polls until stripe-mock answers (any status) or timeout passes.
func waitUp(url string, timeout time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-exited:
			return fmt.Errorf("%s: %w", url, errExited)
		default:
		}
		resp, err := http.Get(url + "/v1/charges")
		if err == nil {
			resp.Body.Close()
			// Only stripe-mock's own answer counts: another listener may
			// hold the port, and stripe-mock then exits.
			if resp.Header.Get("Stripe-Mock-Version") != "" {
				return nil
			}
			err = errors.New("something other than stripe-mock answers on its port")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stripe-mock at %s did not come up within %v: %w", url, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
