package errcode_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/platform/errcode"
)

var (
	errA = errcode.New("a: refused", errcode.Answer{Status: 409, Code: "a_refused", Detail: "A refused"})
	errB = errcode.New("b: missing", errcode.Answer{Status: 404, Code: "not_found", Detail: "no such B"})
)

// typed carries a detail and wraps errA.
type typed struct{ n int }

func (e *typed) Error() string { return fmt.Sprintf("typed %d", e.n) }
func (e *typed) Unwrap() error { return errA }
func (e *typed) Answer() errcode.Answer {
	return errcode.Answer{Status: 400, Code: "typed", Detail: fmt.Sprintf("n is %d", e.n)}
}

func TestOf(t *testing.T) {
	t.Parallel()
	a, ok := errcode.Of(fmt.Errorf("outer: %w", errA))
	require.True(t, ok)
	require.Equal(t, errcode.Answer{Status: 409, Code: "a_refused", Detail: "A refused"}, a)
	require.EqualError(t, errA, "a: refused", "the error's own text is unchanged")
	require.ErrorIs(t, fmt.Errorf("x: %w", errA), errA)

	a, _ = errcode.Of(fmt.Errorf("outer: %w", &typed{n: 3}))
	require.Equal(t, "typed", a.Code, "the outermost answer wins over the one it wraps")
	require.Equal(t, "n is 3", a.Detail)

	a, _ = errcode.Of(errors.Join(errors.New("plain"), errB, errA))
	require.Equal(t, "not_found", a.Code, "a join is read left to right")

	_, ok = errcode.Of(errors.New("plain"))
	require.False(t, ok)
	_, ok = errcode.Of(nil)
	require.False(t, ok)
}
