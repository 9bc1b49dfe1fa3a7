package httpapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// rawExchange writes req on a fresh connection to srv and reads one answer.
func rawExchange(t *testing.T, srv *httptest.Server, req string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
	go func() { _, _ = io.WriteString(conn, req) }() // the server may answer before reading it all
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// The answers Go's server writes before any handler (an over-limit header
// block, a malformed header) become problems; handlers' answers, even one
// that looks like those, pass through byte for byte.
func TestProblemListener(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
		_, _ = io.WriteString(w, "431 Request Header Fields Too Large")
	}))
	srv.Listener = ProblemListener(srv.Listener)
	srv.Start()
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		name, req string
		status    int
		code      string
	}{
		{"2MB header", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 2<<20) + "\r\n\r\n", 431, CodeHeadersTooLarge},
		{"NUL in a header", "GET / HTTP/1.1\r\nHost: x\r\nX-Bad: a\x00b\r\n\r\n", 400, CodeInvalidRequest},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", 400, CodeInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawExchange(t, srv, tc.req)
			require.Equal(t, tc.status, resp.StatusCode, string(body))
			require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
			var p Problem
			require.NoError(t, json.Unmarshal(body, &p), string(body))
			require.Equal(t, tc.code, p.Code)
			require.Equal(t, tc.status, p.Status)
		})
	}
	resp, body := rawExchange(t, srv, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"), "a handler's answer is untouched")
	require.Equal(t, "431 Request Header Fields Too Large", string(body))
}

func TestRewriteServerErrorLeavesOtherBytesAlone(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		"",
		"HTTP/1.1 200 OK" + serverErrorHeaders + "200 OK",
		"HTTP/1.1 500 Internal Server Error" + serverErrorHeaders + "500 Internal Server Error",
		"HTTP/1.1 431 Request Header Fields Too Large" + serverErrorHeaders + "something else",
		"HTTP/1.0 431 Request Header Fields Too Large" + serverErrorHeaders + "431 Request Header Fields Too Large",
		"HTTP/1.1 431 Request Header Fields Too Large\r\nDate: x" + serverErrorHeaders + "431 Request Header Fields Too Large",
		`{"not":"http"}`,
	} {
		_, ok := rewriteServerError([]byte(p))
		require.False(t, ok, "%q", p)
	}
	out, ok := rewriteServerError([]byte("HTTP/1.1 400 Bad Request: malformed MIME header line" + serverErrorHeaders +
		"400 Bad Request: malformed MIME header line"))
	require.True(t, ok)
	require.Contains(t, string(out), fmt.Sprintf("%q", "malformed request: malformed MIME header line"))
}
