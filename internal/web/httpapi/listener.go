package httpapi

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/fibe-dev/billing/internal/web/problem"
)

// ProblemListener wraps ln so that the few answers Go's HTTP server writes
// itself, before any handler runs (a header block over its read limit:
// 431; a malformed request line or header: 400), reach the client as
// problem+json like every other error of this service, instead of
// text/plain.
//
// net/http writes each such answer in one Write on the raw connection, as
// "HTTP/1.1 <status>[: <reason>]" + canned headers + the same
// "<status>[: <reason>]" as the body, then closes. Only a Write of exactly
// that shape (its body repeating its status line) is rewritten; every
// other byte passes through unchanged, so should a future Go change the
// format, the plain answer simply goes out as before.
func ProblemListener(ln net.Listener) net.Listener { return problemListener{ln} }

type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &problemConn{Conn: c}, nil
}

type problemConn struct{ net.Conn }

// CloseWrite keeps net/http's half-close (it lets the client read an
// answer sent before the server stopped reading).
func (c *problemConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *problemConn) Write(p []byte) (int, error) {
	if out, ok := rewriteServerError(p); ok {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// serverErrorHeaders are the headers net/http puts on its own answers.
const serverErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// rewriteServerError turns one of net/http's own plain 4xx answers into
// a problem+json one.
func rewriteServerError(p []byte) ([]byte, bool) {
	line, body, ok := bytes.Cut(p, []byte(serverErrorHeaders))
	line, isHTTP := bytes.CutPrefix(line, []byte("HTTP/1.1 "))
	if !ok || !isHTTP || !bytes.Equal(line, body) || len(line) < 3 {
		return nil, false
	}
	status, err := strconv.Atoi(string(line[:3]))
	if err != nil || status < 400 || status > 499 {
		return nil, false
	}
	code, detail := CodeInvalidRequest, "malformed request"
	if _, reason, ok := bytes.Cut(line, []byte(": ")); ok {
		detail += ": " + string(reason)
	}
	if status == http.StatusRequestHeaderFieldsTooLarge {
		code, detail = CodeHeadersTooLarge, "the request's header fields exceed 1 MiB"
	}
	b := problem.Body(status, code, detail)
	head := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		status, http.StatusText(status), problem.ContentType, len(b))
	return append([]byte(head), b...), true
}
