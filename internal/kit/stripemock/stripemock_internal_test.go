package stripemock

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitUp counts only stripe-mock's own answer: another listener on its
// port does not make it up, and a stripe-mock that exited ends the wait
// at once with errExited (Start then tries another port).
func TestWaitUpCountsOnlyStripeMock(t *testing.T) {
	t.Parallel()
	mock := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Stripe-Mock-Version", "master")
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer mock.Close()
	require.NoError(t, waitUp(mock.URL, time.Minute, make(chan struct{})))

	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	exited := make(chan struct{})
	close(exited)
	require.ErrorIs(t, waitUp(other.URL, time.Minute, exited), errExited)
	require.ErrorContains(t, waitUp(other.URL, 200*time.Millisecond, make(chan struct{})),
		"something other than stripe-mock answers")
}
