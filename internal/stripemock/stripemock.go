// Package stripemock starts stripe-mock, Stripe's own API mock (built from
// Stripe's OpenAPI specification), for tests: every Stripe request billing
// makes is validated against the real API's parameters.
//
// stripe-mock is a separate binary (`go install
// github.com/stripe/stripe-mock@v0.203.0`). Without it a test is skipped,
// except under CI (CI set), where its absence fails the test.
package stripemock

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Version is the stripe-mock release .ci/run installs.
const Version = "v0.203.0"

// Start runs a stripe-mock on a free 127.0.0.1 port for the test and
// returns its base URL; it stops when the test ends.
func Start(t testing.TB) string {
	t.Helper()
	bin := find()
	if bin == "" {
		msg := "stripe-mock not found: go install github.com/stripe/stripe-mock@" + Version
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("stripemock: %v", err)
	}
	cmd := exec.Command(bin, "-http-port", strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		t.Fatalf("stripemock: start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitUp(url, 20*time.Second); err != nil {
		t.Fatalf("stripemock: %v", err)
	}
	return url
}

// find looks on PATH, then in GOPATH/bin.
func find() string {
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, _ := os.UserHomeDir()
		gopath = filepath.Join(home, "go")
	}
	p := filepath.Join(gopath, "bin", "stripe-mock")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return ""
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
func waitUp(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(url + "/v1/charges")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stripe-mock at %s did not come up within %v: %w", url, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
