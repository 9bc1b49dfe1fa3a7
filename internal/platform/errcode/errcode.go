// Package errcode lets the package that declares an error say, next to
// it, what the error means to a client of the HTTP surface: a status, a
// stable problem code and the client's words. The web layer only asks
// (Of); it keeps no map of other packages' errors.
//
// A sentinel error declares its answer with New; a typed error that
// carries details implements Answerer. Either way errors.Is and errors.As
// work as before, and an error wrapped with %w keeps its answer.
//
// The package imports nothing of billing and nothing of net/http, so any
// package may declare its answers without depending on the web layer.
package errcode

import (
	"errors"
	"time"
)

// Answer is what an error means to a client.
type Answer struct {
	Status int    // the HTTP status
	Code   string // the stable, machine-readable problem code
	// Detail is the client's words: never the error's own text, which
	// names Go packages and internals.
	Detail string
	// RetryAfter, when positive, is how long a client should wait before
	// retrying (the Retry-After header).
	RetryAfter time.Duration
}

// NotFound is the answer of every missing resource, and of another
// player's: one answer for both, so that an id never reveals whether it
// exists for someone else.
var NotFound = Answer{Status: 404, Code: "not_found", Detail: "no such resource"}

// Answerer is an error that knows its Answer.
type Answerer interface {
	error
	Answer() Answer
}

// New returns a sentinel error with text as its Error() and a as its
// answer. Compare it with errors.Is, like an errors.New value.
func New(text string, a Answer) error { return &sentinel{text: text, answer: a} }

type sentinel struct {
	text   string
	answer Answer
}

func (e *sentinel) Error() string  { return e.text }
func (e *sentinel) Answer() Answer { return e.answer }

// Of is the answer of the first error in err's tree that has one, in the
// order errors.As walks it: the outermost first (a typed error before the
// error it wraps), a join's errors left to right.
func Of(err error) (Answer, bool) {
	if a, ok := errors.AsType[Answerer](err); ok {
		return a.Answer(), true
	}
	return Answer{}, false
}
