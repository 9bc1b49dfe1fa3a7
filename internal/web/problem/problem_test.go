package problem_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/web/problem"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status     int
		preset     time.Duration
		retryAfter string
	}{
		{http.StatusBadRequest, 0, ""},
		{http.StatusServiceUnavailable, 0, "1"},
		{http.StatusTooManyRequests, 0, "1"},
		{http.StatusTooManyRequests, 2500 * time.Millisecond, "3"},
		{http.StatusConflict, 10 * time.Millisecond, "1"},
	} {
		w := httptest.NewRecorder()
		if tc.preset > 0 {
			problem.SetRetryAfter(w, tc.preset)
		}
		problem.Write(w, tc.status, "some_code", "detail")
		require.Equal(t, tc.status, w.Code)
		require.Equal(t, problem.ContentType, w.Header().Get("Content-Type"))
		require.Equal(t, tc.retryAfter, w.Header().Get("Retry-After"), "status %d", tc.status)
		var p problem.Problem
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
		require.Equal(t, problem.Problem{Type: "about:blank", Title: http.StatusText(tc.status), Status: tc.status,
			Code: "some_code", Detail: "detail"}, p)
	}
}
